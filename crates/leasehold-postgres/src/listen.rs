//! Wake-ups across machines: one connection per backend LISTENs on the
//! table's channel, which every release and break NOTIFYs with the key.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{Key, ReleaseWatch};
use tokio::sync::{broadcast, oneshot, watch};
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The table's notification channel: `leasehold.TABLE`, cut to
/// PostgreSQL's 63-byte identifier limit (table names are ASCII).
pub(crate) fn channel(table: &str) -> String {
    let mut name = format!("leasehold.{table}");
    name.truncate(63);
    name
}

/// The listening side: started on the first watch, ended when the backend
/// is dropped.
pub(crate) struct Listener {
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    channel: String,
    keys: broadcast::Sender<Arc<str>>,
    /// Dropping it stops the listening task.
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// Whether the LISTEN is in place now.
    listening: watch::Sender<bool>,
}

impl Listener {
    pub fn new(config: tokio_postgres::Config, tls: MakeRustlsConnect, channel: String) -> Self {
        Listener {
            config,
            tls,
            channel,
            // Released keys; a waiter that falls this far behind just wakes.
            keys: broadcast::channel(1024).0,
            stop: Mutex::new(None),
            listening: watch::channel(false).0,
        }
    }

    /// Starts listening if not yet, and waits until the LISTEN is in place.
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
        runtime.spawn(listen(
            self.config.clone(),
            self.tls.clone(),
            self.channel.clone(),
            self.keys.clone(),
            self.listening.clone(),
            rx,
        ));
        Some(())
    }
}

/// Keeps one LISTEN connection up (reconnecting with back-off) and
/// forwards each notification's key, until `stop` fires or is dropped.
/// While it is down, notifications are missed and waiters poll.
async fn listen(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    channel: String,
    keys: broadcast::Sender<Arc<str>>,
    listening: watch::Sender<bool>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = tokio::select! {
            _ = &mut stop => return,
            c = config.connect(tls.clone()) => c,
        };
        let (client, mut connection) = match connected {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "LISTEN connection failed; waiters poll meanwhile");
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        // The connection delivers notifications only while it is polled,
        // so it is driven here, while the LISTEN runs beside it.
        let sql = format!("LISTEN \"{channel}\"");
        let subscribe = client.batch_execute(&sql);
        tokio::pin!(subscribe);
        let mut subscribed = false;
        loop {
            let message = tokio::select! {
                _ = &mut stop => return,
                r = &mut subscribe, if !subscribed => {
                    match r {
                        Ok(()) => {
                            subscribed = true;
                            listening.send_replace(true);
                            backoff = Duration::from_millis(100);
                            continue;
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "LISTEN failed; waiters poll meanwhile");
                            break;
                        }
                    }
                }
                m = std::future::poll_fn(|cx| connection.poll_message(cx)) => m,
            };
            match message {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let _ = keys.send(n.payload().into());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "LISTEN connection lost; reconnecting");
                    break;
                }
                None => break,
            }
        }
        listening.send_replace(false);
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(backoff) => {}
        }
    }
}
