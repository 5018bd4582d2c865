//! Wake-ups across machines: the core's [`Listener`](leasehold::backend::Listener)
//! over one pub/sub connection per backend, subscribed to the store's
//! channel, on which every release and break publishes the key (from inside
//! its script, so only when it changed something).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;
use leasehold::backend::{Released, Subscribe};
use leasehold::BoxError;

use crate::topology::SharedConnector;

/// The store's release announcements: its pub/sub channel.
pub(crate) struct Announcements {
    pub connector: SharedConnector,
    /// The backend's connection generation: a new connection ends the
    /// subscription (see `Inner::generation`).
    pub generation: tokio::sync::watch::Receiver<u64>,
    /// A cluster's nodes, subscribed to in turn (empty otherwise).
    pub nodes: Vec<redis::ConnectionInfo>,
    /// How many subscriptions were made (for a cluster: the next node).
    pub attempt: AtomicUsize,
    pub channel: String,
}

#[async_trait]
impl Subscribe for Announcements {
    async fn subscribe(&self) -> Result<Released, BoxError> {
        let mut generation = self.generation.clone();
        generation.borrow_and_update();
        let attempt = self.attempt.fetch_add(1, Ordering::Relaxed);
        let client = self.connector.pubsub_client(&self.nodes, attempt).await?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&self.channel).await?;
        let replaced = async move {
            let _ = generation.changed().await;
        };
        Ok(Box::pin(
            pubsub
                .into_on_message()
                .filter_map(|m| {
                    std::future::ready(m.get_payload::<String>().ok().map(Arc::<str>::from))
                })
                .take_until(replaced),
        ))
    }
}
