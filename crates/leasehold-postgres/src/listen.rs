//! Wake-ups across machines: the core's [`Listener`](leasehold::backend::Listener)
//! over one connection per backend that LISTENs on the table's channel,
//! which every release and break NOTIFYs with the key.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use leasehold::backend::{Released, Subscribe};
use leasehold::BoxError;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The table's notification channel: `leasehold.TABLE`, cut to
/// PostgreSQL's 63-byte identifier limit (table names are ASCII).
pub(crate) fn channel(table: &str) -> String {
    let mut name = format!("leasehold.{table}");
    name.truncate(63);
    name
}

/// The table's release announcements: its notification channel.
pub(crate) struct Announcements {
    pub config: tokio_postgres::Config,
    pub tls: MakeRustlsConnect,
    pub channel: String,
}

#[async_trait]
impl Subscribe for Announcements {
    async fn subscribe(&self) -> Result<Released, BoxError> {
        let (client, mut connection) = self.config.connect(self.tls.clone()).await?;
        // The connection delivers notifications (and answers the LISTEN)
        // only while it is polled: a task drives it, forwarding each
        // notification's key, until the connection ends (when the stream,
        // which owns the client, is dropped, or the server goes away).
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        if tx.send(Arc::<str>::from(n.payload())).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "LISTEN connection lost");
                        return;
                    }
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN \"{}\"", self.channel))
            .await?;
        Ok(Box::pin(Notifications {
            _client: client,
            keys: rx,
        }))
    }
}

/// The keys notified on a LISTEN connection; dropping it closes the
/// connection.
struct Notifications {
    _client: tokio_postgres::Client,
    keys: mpsc::UnboundedReceiver<Arc<str>>,
}

impl futures_core::Stream for Notifications {
    type Item = Arc<str>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Arc<str>>> {
        self.keys.poll_recv(cx)
    }
}
