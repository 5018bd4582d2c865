//! Wake-ups across machines: the core's [`Listener`](leasehold::backend::Listener)
//! over one etcd watch per backend on the holder keys' prefix, for
//! deletions (a release, a break, an expiry, all delete the holder key).

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

/// The deletions of holder keys: a watch re-created (by the listener, after
/// a loss) from the revision after the last one seen, so deletions while
/// it was down are replayed.
pub(crate) struct Deletions {
    client: Connection,
    /// `PREFIX` + `h/`: holder keys.
    prefix: String,
    /// The revision the next watch starts from (0: from now).
    next_rev: Arc<AtomicI64>,
}

impl Deletions {
    pub fn new(client: Connection, prefix: String) -> Self {
        Deletions {
            client,
            prefix,
            next_rev: Arc::default(),
        }
    }
}

#[async_trait]
impl Subscribe for Deletions {
    async fn subscribe(&self) -> Result<Released, BoxError> {
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: self.prefix.clone().into_bytes(),
                range_end: prefix_end(self.prefix.as_bytes()),
                start_revision: self.next_rev.load(Ordering::Relaxed),
                filters: vec![FilterType::Noput as i32],
                ..Default::default()
            })),
        };
        // The request stream stays open (one create, then nothing) for as
        // long as the watch is wanted: closing it would end the watch.
        let requests = tokio_stream::once(create).chain(tokio_stream::pending());
        let mut wc = self.client.watch();
        let mut stream = wc.watch(requests).await?.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        // In place once etcd says the watch is created.
        loop {
            let Some(resp) = stream.message().await? else {
                return Err("the watch ended before etcd created it".into());
            };
            let created = resp.created;
            if !self.forward(&resp, &tx) {
                return Err("etcd cancelled the watch".into());
            }
            if created {
                break;
            }
        }
        // Then a task forwards what follows, until the watch is lost or the
        // stream is dropped (the receiver closed).
        let this = Deletions {
            client: self.client.clone(),
            prefix: self.prefix.clone(),
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
            if ev.r#type != EventType::Delete as i32 {
                continue;
            }
            if let Some(kv) = &ev.kv {
                self.next_rev
                    .fetch_max(kv.mod_revision + 1, Ordering::Relaxed);
                if let Some(name) = kv.key.get(self.prefix.len()..) {
                    let _ = tx.send(String::from_utf8_lossy(name).into());
                }
            }
        }
        true
    }
}
