//! Wake-ups across machines: one pub/sub connection per backend subscribes
//! to the store's channel, on which every release and break publishes the
//! key (from inside its script, so only when it changed something).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use leasehold::{Key, ReleaseWatch};
use tokio::sync::{broadcast, oneshot, watch};

/// The subscribing side: started on the first watch, ended when the
/// backend is dropped.
pub(crate) struct Listener {
    client: redis::Client,
    channel: String,
    keys: broadcast::Sender<Arc<str>>,
    /// Dropping it stops the subscribing task.
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// Whether the subscription is in place now.
    listening: watch::Sender<bool>,
}

impl Listener {
    pub fn new(client: redis::Client, channel: String) -> Self {
        Listener {
            client,
            channel,
            // Released keys; a waiter that falls this far behind just wakes.
            keys: broadcast::channel(1024).0,
            stop: Mutex::new(None),
            listening: watch::channel(false).0,
        }
    }

    /// Starts subscribing if not yet, and waits until the subscription is
    /// in place.
    pub async fn listening(&self) {
        if self.start().is_none() {
            return;
        }
        let mut rx = self.listening.subscribe();
        let _ = rx.wait_for(|on| *on).await;
    }

    /// A future that completes when a release or break of one of `keys` is
    /// announced (subscribed now); `None` outside a tokio runtime.
    pub fn watch(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.start()?;
        let mut rx = self.keys.subscribe();
        let keys: HashSet<Arc<str>> = keys.iter().map(|k| k.as_str().into()).collect();
        Some(Box::pin(async move {
            loop {
                match rx.recv().await {
                    Ok(k) if keys.contains(&k) => return,
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
        runtime.spawn(subscribe(
            self.client.clone(),
            self.channel.clone(),
            self.keys.clone(),
            self.listening.clone(),
            rx,
        ));
        Some(())
    }
}

/// Keeps one subscription up (reconnecting with back-off) and forwards
/// each published key, until `stop` fires or is dropped. While it is
/// down, releases are missed and waiters poll.
async fn subscribe(
    client: redis::Client,
    channel: String,
    keys: broadcast::Sender<Arc<str>>,
    listening: watch::Sender<bool>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = tokio::select! {
            _ = &mut stop => return,
            c = tokio::time::timeout(Duration::from_secs(5), async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            }) => c,
        };
        match connected {
            Ok(Ok(pubsub)) => {
                listening.send_replace(true);
                backoff = Duration::from_millis(100);
                let mut messages = pubsub.into_on_message();
                loop {
                    let message = tokio::select! {
                        _ = &mut stop => return,
                        m = messages.next() => m,
                    };
                    let Some(message) = message else { break };
                    if let Ok(key) = message.get_payload::<String>() {
                        let _ = keys.send(key.into());
                    }
                }
                tracing::debug!("subscription lost; reconnecting");
                listening.send_replace(false);
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot subscribe to releases; waiters poll meanwhile")
            }
            Err(_) => tracing::debug!("subscribing timed out; waiters poll meanwhile"),
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
