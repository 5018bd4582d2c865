//! Who holds each key now, followed in the witness log.

use std::collections::HashMap;

use crate::witness::{Kind, Witness};

/// Who holds a key now, as the witness log says.
#[derive(Debug, Clone)]
pub struct Holder {
    pub worker: String,
    pub token: u64,
    pub pid: u32,
    /// When its section began.
    pub since: u64,
}

#[derive(Default)]
pub struct Tracker {
    pub offset: u64,
    pub holders: HashMap<String, Holder>,
}

impl Tracker {
    pub fn update(&mut self, w: &Witness) {
        let Ok((records, offset)) = w.read_from(self.offset) else {
            return;
        };
        self.offset = offset;
        for r in records {
            match r.kind {
                Kind::Begin => {
                    self.holders.insert(
                        r.key.clone(),
                        Holder {
                            worker: r.worker,
                            token: r.token,
                            pid: r.pid,
                            since: r.t_ns,
                        },
                    );
                }
                Kind::End | Kind::Lost
                    if self
                        .holders
                        .get(&r.key)
                        .is_some_and(|h| h.token == r.token && h.worker == r.worker) =>
                {
                    self.holders.remove(&r.key);
                }
                _ => {}
            }
        }
    }
}
