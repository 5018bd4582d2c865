//! Wake-ups across machines: the core's [`Listener`](leasehold::backend::Listener)
//! over one etcd watch stream per backend, for deletions: of holder keys
//! (a release, a break, an expiry, all delete the holder key), and of
//! waiters' registrations (a release that handed the key to a waiter
//! deletes its registration: the waiter is woken, and reads the key).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use leasehold::backend::{Released, Subscribe};
use leasehold::BoxError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::grpc::etcdserverpb::watch_create_request::FilterType;
use crate::grpc::etcdserverpb::watch_request::RequestUnion;
use crate::grpc::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};
use crate::grpc::mvccpb::event::EventType;
use crate::grpc::{prefix_end, Connection};
use crate::queue::Queue;
use crate::record::{Handed, HolderRecord, WaiterEntry};

/// The deletions of holder keys: a watch re-created (by the listener, after
/// a loss) from the revision after the last one seen, so deletions while
/// it was down are replayed.
pub(crate) struct Deletions {
    client: Connection,
    /// `PREFIX` + `h/`: holder keys.
    prefix: String,
    /// `PREFIX` + `w/`: waiters' registrations.
    waiters: String,
    /// This backend's registrations: one seen deleted is marked so.
    queue: Arc<Queue>,
    /// The revision the next watch starts from (0: from now).
    next_rev: Arc<AtomicI64>,
}

impl Deletions {
    /// Deletions under the store prefix `prefix`.
    pub fn new(client: Connection, prefix: &str, queue: Arc<Queue>) -> Self {
        Deletions {
            client,
            prefix: format!("{prefix}h/"),
            waiters: format!("{prefix}w/"),
            queue,
            next_rev: Arc::default(),
        }
    }

    /// A watch on `prefix` from the next revision: deletions only, or
    /// (`registrations`) puts too, and deletions with the deleted value.
    fn watch(&self, prefix: &str, registrations: bool) -> WatchRequest {
        WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.as_bytes().to_vec(),
                range_end: prefix_end(prefix.as_bytes()),
                start_revision: self.next_rev.load(Ordering::Relaxed),
                filters: if registrations {
                    Vec::new()
                } else {
                    vec![FilterType::Noput as i32]
                },
                prev_kv: registrations,
                ..Default::default()
            })),
        }
    }
}

#[async_trait]
impl Subscribe for Deletions {
    async fn subscribe(&self) -> Result<Released, BoxError> {
        // Holder keys; and registrations, with the deleted value (its
        // key name and lease id).
        let creates = [
            self.watch(&self.prefix, false),
            self.watch(&self.waiters, true),
        ];
        // The request stream stays open (the creates, then nothing) for as
        // long as the watches are wanted: closing it would end them.
        let requests = tokio_stream::iter(creates).chain(tokio_stream::pending());
        let mut wc = self.client.watch();
        let mut stream = wc.watch(requests).await?.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        // In place once etcd says both watches are created.
        let mut created = 0;
        while created < 2 {
            let Some(resp) = stream.message().await? else {
                return Err("the watch ended before etcd created it".into());
            };
            created += usize::from(resp.created);
            if !self.forward(&resp, &tx) {
                return Err("etcd cancelled the watch".into());
            }
        }
        // Then a task forwards what follows, until the watch is lost or the
        // stream is dropped (the receiver closed).
        let this = Deletions {
            client: self.client.clone(),
            prefix: self.prefix.clone(),
            waiters: self.waiters.clone(),
            queue: self.queue.clone(),
            next_rev: self.next_rev.clone(),
        };
        tokio::spawn(async move {
            let _wc = wc;
            loop {
                let message = tokio::select! {
                    _ = tx.closed() => return,
                    m = stream.message() => m,
                };
                match message {
                    Ok(Some(resp)) if this.forward(&resp, &tx) => {}
                    Ok(_) => return,
                    Err(e) => {
                        tracing::debug!(error = %e, "etcd watch lost");
                        return;
                    }
                }
            }
        });
        Ok(Box::pin(UnboundedReceiverStream::new(rx)))
    }
}

impl Deletions {
    /// Sends the name of each holder key `resp` deletes, and notes the
    /// revisions seen; false when the watch was cancelled (compacted past
    /// the revision asked for, or ended by the server: the next starts
    /// afresh).
    fn forward(&self, resp: &WatchResponse, tx: &mpsc::UnboundedSender<Arc<str>>) -> bool {
        if resp.canceled {
            self.next_rev.store(0, Ordering::Relaxed);
            return false;
        }
        if let Some(h) = &resp.header {
            self.next_rev.fetch_max(h.revision + 1, Ordering::Relaxed);
        }
        for ev in &resp.events {
            let Some(kv) = &ev.kv else { continue };
            self.next_rev
                .fetch_max(kv.mod_revision + 1, Ordering::Relaxed);
            if ev.r#type != EventType::Delete as i32 {
                // A put under `P w/`: a waiter writing its registration
                // (ignored), or a handoff's grant to it. For one of ours,
                // the grant is kept for the waiter's next attempt, which
                // takes it without a request; its key's waiters wake.
                let handed = serde_json::from_slice::<Handed>(&kv.value).ok();
                let holder = handed
                    .as_ref()
                    .and_then(|h| serde_json::from_str::<HolderRecord>(&h.holder).ok());
                if let (Some(handed), Some(holder)) = (handed, holder) {
                    let key = kv
                        .key
                        .get(self.waiters.len()..)
                        .map(|id| String::from_utf8_lossy(id).into_owned());
                    if key.as_deref() == Some(holder.lease_id.as_str()) {
                        let name = self.queue.saw_handed(
                            &holder.lease_id,
                            handed.holder.into_bytes(),
                            handed.record.into_bytes(),
                            kv.lease,
                        );
                        if let Some(name) = name {
                            let _ = tx.send(name.into());
                        }
                    }
                }
                continue;
            }
            if kv.key.starts_with(self.waiters.as_bytes()) {
                // A registration ended: handed the key, cancelled, or its
                // session over. Its waiter reads the key at once.
                let entry = ev
                    .prev_kv
                    .as_ref()
                    .and_then(|p| serde_json::from_slice::<WaiterEntry>(&p.value).ok());
                if let Some(entry) = entry {
                    self.queue.saw_deleted(&entry.lease_id);
                    let _ = tx.send(entry.key.into());
                }
            } else if let Some(name) = kv.key.get(self.prefix.len()..) {
                let _ = tx.send(String::from_utf8_lossy(name).into());
            }
        }
        true
    }
}
