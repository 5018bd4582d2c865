//! Wake-ups across processes: one persistent recursive watch per backend
//! on the store's root (ZooKeeper 3.6+). Every write of a record node
//! (a release, a break, but also a grant or a renewal) is announced as its
//! key: a hint only, which may wake a waiter for nothing (it then finds
//! the key held and waits on).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use leasehold::backend::{Released, Subscribe};
use leasehold::BoxError;
use tokio::sync::mpsc;
use zookeeper_client as zk;

use crate::client::Connection;
use crate::names::Paths;

/// The store's record writes, as announcements of keys.
pub(crate) struct RecordWrites {
    pub(crate) conn: Arc<Connection>,
    pub(crate) paths: Paths,
}

#[async_trait]
impl Subscribe for RecordWrites {
    async fn subscribe(&self) -> Result<Released, BoxError> {
        let client = self.conn.client("watch").await?;
        let root = self.paths.root().to_string();
        let mut watcher = match client
            .watch(&root, zk::AddWatchMode::PersistentRecursive)
            .await
        {
            Ok(w) => w,
            Err(e) => return Err(Box::new(e)),
        };
        let (tx, rx) = mpsc::channel::<Arc<str>>(256);
        let paths = self.paths.clone();
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    event = watcher.changed() => event,
                    // Nobody listens any more.
                    () = tx.closed() => return,
                };
                match event.event_type {
                    // Disconnected (events may be missed until the watch is
                    // back: ZOOKEEPER-4698), or the session ended: the
                    // stream ends, and the listener subscribes again,
                    // waking everyone.
                    zk::EventType::Session
                        if event.session_state != zk::SessionState::SyncConnected =>
                    {
                        return;
                    }
                    zk::EventType::NodeDataChanged | zk::EventType::NodeDeleted => {
                        if let Some(key) = paths.key_of_path(&event.path) {
                            if tx.send(key.as_str().into()).await.is_err() {
                                return;
                            }
                        }
                    }
                    _ => {}
                }
            }
        });
        Ok(Box::pin(Keys(rx)))
    }
}

/// The announced keys, as a stream.
struct Keys(mpsc::Receiver<Arc<str>>);

impl futures_core::Stream for Keys {
    type Item = Arc<str>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Arc<str>>> {
        self.0.poll_recv(cx)
    }
}
