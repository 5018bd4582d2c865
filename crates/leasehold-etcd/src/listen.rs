//! Wake-ups across machines: one etcd watch per backend on the holder keys'
//! prefix, for deletions (a release, a break, an expiry, all delete the
//! holder key).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{Key, ReleaseWatch};
use tokio::sync::{broadcast, oneshot, watch};
use tokio_stream::StreamExt;

use crate::grpc::etcdserverpb::watch_create_request::FilterType;
use crate::grpc::etcdserverpb::watch_request::RequestUnion;
use crate::grpc::etcdserverpb::{WatchCreateRequest, WatchRequest};
use crate::grpc::mvccpb::event::EventType;
use crate::grpc::{prefix_end, Connection};

/// Sent instead of a key when events may have been missed: every waiter
/// wakes and looks.
const EVERYONE: &str = "";

/// The watching side: started on the first wait, ended when the backend is
/// dropped.
pub(crate) struct Listener {
    client: Connection,
    /// `PREFIX` + `h/`: holder keys.
    prefix: String,
    keys: broadcast::Sender<Arc<str>>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// Whether the watch is in place now.
    listening: watch::Sender<bool>,
}

impl Listener {
    pub fn new(client: Connection, prefix: String) -> Self {
        Listener {
            client,
            prefix,
            keys: broadcast::channel(1024).0,
            stop: Mutex::new(None),
            listening: watch::channel(false).0,
        }
    }

    /// Starts watching if not yet, and waits until the watch is in place.
    pub async fn listening(&self) {
        if self.start().is_none() {
            return;
        }
        let mut rx = self.listening.subscribe();
        let _ = rx.wait_for(|on| *on).await;
    }

    /// A future that completes when a holder key of one of `keys` is
    /// deleted (subscribed now); `None` outside a tokio runtime.
    pub fn watch(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.start()?;
        let mut rx = self.keys.subscribe();
        let keys: HashSet<Arc<str>> = keys.iter().map(|k| k.as_str().into()).collect();
        Some(Box::pin(async move {
            loop {
                match rx.recv().await {
                    Ok(k) if &*k == EVERYONE || keys.contains(&k) => return,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                }
            }
        }))
    }

    fn start(&self) -> Option<()> {
        let mut stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        if stop.is_some() {
            return Some(());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = oneshot::channel();
        *stop = Some(tx);
        runtime.spawn(listen(
            self.client.clone(),
            self.prefix.clone(),
            self.keys.clone(),
            self.listening.clone(),
            rx,
        ));
        Some(())
    }
}

/// Keeps one watch up (re-created with back-off, from the revision after
/// the last one seen, so deletions while it was down are replayed), and
/// forwards each deleted holder key's name, until `stop` fires or is
/// dropped.
async fn listen(
    client: Connection,
    prefix: String,
    keys: broadcast::Sender<Arc<str>>,
    listening: watch::Sender<bool>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut backoff = Duration::from_millis(100);
    let mut next_rev: i64 = 0;
    loop {
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.clone().into_bytes(),
                range_end: prefix_end(prefix.as_bytes()),
                start_revision: next_rev,
                filters: vec![FilterType::Noput as i32],
                ..Default::default()
            })),
        };
        // The request stream stays open (one create, then nothing) for as
        // long as the watch is wanted: closing it would end the watch.
        let requests = tokio_stream::once(create).chain(tokio_stream::pending());
        let mut wc = client.watch();
        let opened = tokio::select! {
            _ = &mut stop => return,
            c = wc.watch(requests) => c,
        };
        match opened {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                loop {
                    let message = tokio::select! {
                        _ = &mut stop => return,
                        m = stream.message() => m,
                    };
                    match message {
                        Ok(Some(resp)) => {
                            if resp.canceled {
                                // Compacted past next_rev, or the server
                                // ended the watch: start afresh.
                                next_rev = 0;
                                break;
                            }
                            if resp.created {
                                listening.send_replace(true);
                                backoff = Duration::from_millis(100);
                                // Deletions during the gap may have been
                                // missed (or were replayed): waking everyone
                                // once is cheap.
                                let _ = keys.send(EVERYONE.into());
                            }
                            if let Some(h) = &resp.header {
                                next_rev = next_rev.max(h.revision + 1);
                            }
                            for ev in &resp.events {
                                if ev.r#type != EventType::Delete as i32 {
                                    continue;
                                }
                                if let Some(kv) = &ev.kv {
                                    next_rev = next_rev.max(kv.mod_revision + 1);
                                    if let Some(name) = kv.key.get(prefix.len()..) {
                                        let _ = keys.send(String::from_utf8_lossy(name).into());
                                    }
                                }
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!(error = %e, "etcd watch lost; re-creating it");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "etcd watch failed; waiters poll meanwhile");
            }
        }
        listening.send_replace(false);
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
