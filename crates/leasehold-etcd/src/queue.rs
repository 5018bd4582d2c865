//! Queued waiters: a lock's waiter registers under `P w/`, and the
//! holder's release hands the key to the oldest registration in the same
//! `Txn` (see the crate docs' "Handoff"). This module keeps what a backend
//! knows of them: its own registrations, and a view of everyone's, kept by
//! a watch on `P w/` from the backend's first grant on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold::backend::SharedClock;
use tokio::sync::oneshot;
use tokio_stream::StreamExt;

use crate::grpc::etcdserverpb::watch_request::RequestUnion;
use crate::grpc::etcdserverpb::{WatchCreateRequest, WatchRequest};
use crate::grpc::mvccpb::event::EventType;
use crate::grpc::{prefix_end, Connection};
use crate::record::WaiterEntry;

/// A waiter writes its registration again at a poll when it last wrote it
/// this long ago (or on another session): the write that shows it alive.
/// (Not at every poll: each write is a revision etcd keeps until it is
/// compacted.)
pub(crate) const REFRESH: Duration = Duration::from_millis(500);

/// A registration is handed the key only if its last write was seen this
/// recently (three [`REFRESH`] periods): a waiter whose process is gone
/// stops writing it, and is skipped after this long (a key handed to it
/// would stay held, for nobody, until its session ends).
pub(crate) const FRESH: Duration = Duration::from_millis(1500);

/// The queue as one backend knows it.
pub(crate) struct Queue {
    /// The backend's clock: a registration's age counts a suspend.
    clock: SharedClock,
    /// The lease ids this backend registered as waiters, by lease id.
    mine: Mutex<HashMap<String, Mine>>,
    /// Registrations as the watch shows them, by etcd key.
    view: Mutex<HashMap<Vec<u8>, Waiting>>,
}

/// One of this backend's registrations.
struct Mine {
    /// The key it waits for.
    key: String,
    /// The watch saw it deleted (handed the key, or ended): the waiter's
    /// next attempt reads the key before asking for it.
    consumed: bool,
    /// When it was last sent to be written, and on which session.
    written: Option<(Duration, i64)>,
    /// The key as a handoff granted it to this registration, seen by the
    /// watch: the holder value, the record, the etcd lease they hang on.
    handed: Option<(Vec<u8>, Vec<u8>, i64)>,
}

/// A registration as the watch showed it last.
#[derive(Clone)]
pub(crate) struct Waiting {
    pub(crate) etcd_key: Vec<u8>,
    pub(crate) entry: WaiterEntry,
    /// Its stored bytes, compared by the handoff.
    pub(crate) value: Vec<u8>,
    /// The etcd lease (the waiter's session) it hangs on: the key is handed
    /// over on it.
    pub(crate) lease: i64,
    /// Its `create_revision`: the oldest goes first.
    created: i64,
    /// When the watch last showed it written, on the backend's clock.
    seen: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Queue {
    pub(crate) fn new(clock: SharedClock) -> Self {
        Queue {
            clock,
            mine: Mutex::default(),
            view: Mutex::default(),
        }
    }

    /// Whether an attempt of `lease_id`'s waiter on `session` writes its
    /// registration (again): the first, after its deletion was seen, on
    /// another session, or [`REFRESH`] after the last; noted as written
    /// (sent) now when it does.
    pub(crate) fn write_now(&self, lease_id: &str, key: &str, session: i64) -> bool {
        let now = self.clock.now();
        let mut mine = lock(&self.mine);
        let m = mine.entry(lease_id.to_string()).or_insert_with(|| Mine {
            key: key.to_string(),
            consumed: false,
            written: None,
            handed: None,
        });
        let due = m.consumed
            || match m.written {
                None => true,
                Some((at, s)) => s != session || now.saturating_sub(at) >= REFRESH,
            };
        if due {
            m.consumed = false;
            m.written = Some((now, session));
        }
        due
    }

    /// Whether `lease_id` is one of this backend's registrations.
    pub(crate) fn is_mine(&self, lease_id: &str) -> bool {
        lock(&self.mine).contains_key(lease_id)
    }

    /// The watch saw a handoff grant the key to `lease_id`'s registration:
    /// `holder` and `record` are the values it wrote, on etcd lease `lease`.
    /// The key, if the registration is ours.
    pub(crate) fn saw_handed(
        &self,
        lease_id: &str,
        holder: Vec<u8>,
        record: Vec<u8>,
        lease: i64,
    ) -> Option<String> {
        let mut mine = lock(&self.mine);
        let m = mine.get_mut(lease_id)?;
        m.consumed = true;
        m.written = None;
        m.handed = Some((holder, record, lease));
        Some(m.key.clone())
    }

    /// The grant a handoff made to `lease_id`, as the watch saw it (asked
    /// once).
    pub(crate) fn take_handed(&self, lease_id: &str) -> Option<(Vec<u8>, Vec<u8>, i64)> {
        lock(&self.mine).get_mut(lease_id)?.handed.take()
    }

    /// Whether `lease_id`'s registration was seen deleted since it was
    /// last written (asked once: the answer is cleared).
    pub(crate) fn take_consumed(&self, lease_id: &str) -> bool {
        lock(&self.mine)
            .get_mut(lease_id)
            .is_some_and(|m| std::mem::take(&mut m.consumed))
    }

    /// The watch saw `lease_id`'s registration deleted: the next attempt
    /// reads first, and writes it again if still waiting.
    pub(crate) fn saw_deleted(&self, lease_id: &str) {
        if let Some(m) = lock(&self.mine).get_mut(lease_id) {
            m.consumed = true;
            m.written = None;
        }
    }

    /// `lease_id` is no longer registered by this backend (granted, or its
    /// registration ended); whether it was.
    pub(crate) fn forget(&self, lease_id: &str) -> bool {
        lock(&self.mine).remove(lease_id).is_some()
    }

    /// The registration to hand `key` to at a release by `holder` (a lease
    /// id) in `epoch`: the oldest one for that key and epoch, written
    /// within [`FRESH`], on an etcd lease, with a TTL the store allows.
    pub(crate) fn pick(
        &self,
        key: &str,
        epoch: u64,
        holder: &str,
        max_ttl: Duration,
    ) -> Option<Waiting> {
        let now = self.clock.now();
        let view = lock(&self.view);
        view.values()
            .filter(|w| {
                w.entry.key == key
                    && w.entry.epoch == epoch
                    && w.entry.lease_id != holder
                    && w.lease != 0
                    && Duration::from_millis(w.entry.ttl_ms) <= max_ttl
                    && now.saturating_sub(w.seen) <= FRESH
            })
            .min_by_key(|w| w.created)
            .cloned()
    }

    /// Registrations for `key` in the view.
    pub(crate) fn seen_for(&self, key: &str) -> usize {
        lock(&self.view)
            .values()
            .filter(|w| w.entry.key == key)
            .count()
    }

    fn saw_put(&self, w: Waiting) {
        lock(&self.view).insert(w.etcd_key.clone(), w);
    }

    fn saw_delete(&self, etcd_key: &[u8]) {
        lock(&self.view).remove(etcd_key);
    }

    fn clear_view(&self) {
        lock(&self.view).clear();
    }
}

/// Keeps the view of `prefix` (`P w/`) in `queue` up to date until `stop`
/// fires or is dropped (the backend is dropped): a watch from now on,
/// started again after a loss with the view emptied (every waiter writes
/// its registration again at its next poll, so the view fills again
/// within a poll interval).
pub(crate) async fn keep_view(
    conn: Connection,
    prefix: String,
    queue: Arc<Queue>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            r = watch_view(&conn, &prefix, &queue) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "etcd: the waiters' watch was lost; watching again");
                } else {
                    backoff = Duration::from_millis(100);
                }
            }
        }
        queue.clear_view();
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn watch_view(
    conn: &Connection,
    prefix: &str,
    queue: &Queue,
) -> Result<(), leasehold::BoxError> {
    let create = WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            ..Default::default()
        })),
    };
    // The request stream stays open for as long as the watch is wanted.
    let requests = tokio_stream::once(create).chain(tokio_stream::pending());
    let mut wc = conn.watch();
    let mut stream = wc.watch(requests).await?.into_inner();
    while let Some(resp) = stream.message().await? {
        if resp.canceled {
            return Err("etcd cancelled the waiters' watch".into());
        }
        for ev in resp.events {
            let Some(kv) = ev.kv else { continue };
            if ev.r#type == EventType::Delete as i32 {
                queue.saw_delete(&kv.key);
                continue;
            }
            // A value that is not a registration (a handoff's grant, or
            // written by hand) is never handed anything.
            let Ok(entry) = serde_json::from_slice::<WaiterEntry>(&kv.value) else {
                queue.saw_delete(&kv.key);
                continue;
            };
            queue.saw_put(Waiting {
                etcd_key: kv.key,
                entry,
                value: kv.value,
                lease: kv.lease,
                created: kv.create_revision,
                seen: queue.clock.now(),
            });
        }
    }
    Ok(())
}
