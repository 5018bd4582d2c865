//! Several keys in one request ([`Backend::try_acquire_all`]), on stores
//! that offer it (the others answer [`BatchOutcome::Unsupported`], and
//! these tests say so and check nothing more): all or none, each key's
//! token by the rule of one grant, retries answered with the same tokens,
//! and a multi-key lock's uncontended acquisition in one request.

use super::*;
use leasehold::backend::{BatchOutcome, Wrapper};

/// The lease a grant of `req` made.
fn lease_of(req: &AcquireRequest, fencing_token: u64, epoch: u64) -> Lease {
    Lease {
        key: req.key.clone(),
        lease_id: req.lease_id.clone(),
        ttl: req.ttl,
        fencing_token,
        epoch,
    }
}

/// What `key` holds now: its last token and whether it is held.
async fn state(store: &Store, key: &str) -> (u64, bool) {
    let info = store
        .backend()
        .inspect(&Key::new(key).unwrap())
        .await
        .unwrap();
    (info.fencing_token, info.holder.is_some())
}

/// A batch grants every key, each a token above its own last one; the same
/// batch sent again (a retry after an ambiguous failure) answers the same
/// tokens; a batch that meets one held key grants nothing (its free keys
/// keep their counters and stay free) and names the held key; a batch in
/// another epoch grants nothing.
pub async fn batch_grants_every_key_or_none(store: Store) {
    let backend = store.backend().clone();
    let epoch = current_epoch(backend.as_ref()).await.epoch;
    let base = unique_key("batch");
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|k| format!("{base}/{k}"));
    let before = take(&store, &b, opts(&store)).await;
    let b_last = before.fencing_token();
    before.release().await.unwrap();
    let ttl = long_ttl(&store);
    let reqs: Vec<AcquireRequest> = [&a, &b, &c]
        .iter()
        .map(|k| acquire_request(k, ttl, Some(epoch)))
        .collect();
    let grants = match backend.try_acquire_all(&reqs).await.unwrap() {
        BatchOutcome::Unsupported => {
            eprintln!(
                "{} takes keys one by one: no batch to check",
                backend.name()
            );
            return;
        }
        BatchOutcome::Acquired(grants) => grants,
        other => panic!("a batch of free keys answered {other:?}"),
    };
    assert_eq!(grants.len(), 3);
    assert!(
        grants[1].fencing_token > b_last,
        "{grants:?} after {b_last}"
    );
    for (key, grant) in [&a, &b, &c].iter().zip(&grants) {
        assert_eq!(
            state(&store, key).await,
            (grant.fencing_token, true),
            "{key}"
        );
    }
    // Sent again with the same lease ids: the same grants.
    match backend.try_acquire_all(&reqs).await.unwrap() {
        BatchOutcome::Acquired(again) => assert_eq!(again, grants),
        other => panic!("a retry of the same batch answered {other:?}"),
    }
    // a released; b still held: another batch of a, b and d takes none.
    backend
        .release(&lease_of(&reqs[0], grants[0].fencing_token, epoch))
        .await
        .unwrap();
    let others: Vec<AcquireRequest> = [&a, &b, &d]
        .iter()
        .map(|k| acquire_request(k, ttl, Some(epoch)))
        .collect();
    match backend.try_acquire_all(&others).await.unwrap() {
        BatchOutcome::Held { index, .. } => assert_eq!(index, 1, "the held key is b"),
        other => panic!("a batch with a held key answered {other:?}"),
    }
    assert_eq!(state(&store, &a).await, (grants[0].fencing_token, false));
    assert_eq!(state(&store, &d).await, (0, false));
    // Another epoch: nothing.
    let stale: Vec<AcquireRequest> = [&a, &d]
        .iter()
        .map(|k| acquire_request(k, ttl, Some(epoch + 1)))
        .collect();
    match backend.try_acquire_all(&stale).await.unwrap() {
        BatchOutcome::OtherEpoch(found) => assert_eq!(found.epoch, epoch),
        other => panic!("a batch in another epoch answered {other:?}"),
    }
    assert_eq!(state(&store, &a).await, (grants[0].fencing_token, false));
    assert_eq!(state(&store, &d).await, (0, false));
    for (req, grant) in reqs.iter().zip(&grants).skip(1) {
        backend
            .release(&lease_of(req, grant.fencing_token, epoch))
            .await
            .unwrap();
    }
}

/// Counts acquisition requests, one per key or one per batch.
#[derive(Debug)]
struct Requests {
    inner: Arc<dyn Backend>,
    singles: AtomicU32,
    batches: AtomicU32,
}

#[async_trait::async_trait]
impl Wrapper for Requests {
    fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }
    async fn try_acquire(&self, request: &AcquireRequest) -> leasehold::Result<AcquireOutcome> {
        self.singles.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(request).await
    }
    async fn try_acquire_all(
        &self,
        requests: &[AcquireRequest],
    ) -> leasehold::Result<BatchOutcome> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire_all(requests).await
    }
}

/// Another process of `store` whose acquisition requests are counted, its
/// store's epoch learnt (and any quarantine waited out) before counting.
async fn counting(store: &Store) -> (Arc<Requests>, Store) {
    let counted = Arc::new(Requests {
        inner: store.backend().clone(),
        singles: AtomicU32::new(0),
        batches: AtomicU32::new(0),
    });
    let process = like(store, counted.clone());
    let warm = take(&process, &unique_key("batch-warm"), opts(store)).await;
    warm.release().await.unwrap();
    (counted, process)
}

/// A multi-key lock on free keys takes them in one request where the store
/// batches (one key by one otherwise), each with a token of its own; one
/// that finds a key held falls back to the keys one by one and still takes
/// every key once it is free.
pub async fn batch_takes_a_multi_key_lock_in_one_request(store: Store) {
    let (counted, process) = counting(&store).await;
    let base = unique_key("batch-multi");
    let keys = ["c", "a", "b"].map(|k| format!("{base}/{k}"));
    counted.singles.store(0, Ordering::SeqCst);
    let all = process.lock_all_with(&keys, opts(&store)).unwrap();
    let held = all.try_acquire().await.unwrap();
    let (singles, batches) = (
        counted.singles.load(Ordering::SeqCst),
        counted.batches.load(Ordering::SeqCst),
    );
    let batched = singles == 0;
    if batched {
        assert_eq!(batches, 1, "one batch for three free keys");
    } else {
        assert_eq!((singles, batches), (3, 1), "unsupported: one key at a time");
    }
    let tokens: Vec<u64> = held.iter().map(|(_, g)| g.fencing_token()).collect();
    for (key, token) in held.keys().zip(&tokens) {
        assert_eq!(state(&store, key.as_str()).await, (*token, true), "{key}");
    }
    held.release().await.unwrap();
    // The last key held elsewhere: the batch takes nothing, and the wait
    // (one key by one) takes every key once it is released.
    let last = &keys[0];
    let blocker = take(&other_process(&store), last, opts(&store)).await;
    let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
    let waiting = tokio::spawn(async move {
        let mut waiting = Some(waiting_tx);
        all.acquire_reporting(Duration::from_secs(30), |_, _| {
            if let Some(tx) = waiting.take() {
                let _ = tx.send(());
            }
        })
        .await
    });
    waiting_rx.await.unwrap();
    blocker.release().await.unwrap();
    let again = waiting.await.unwrap().unwrap();
    for ((key, guard), before) in again.iter().zip(&tokens) {
        assert!(guard.fencing_token() > *before, "{key}");
    }
    again.release().await.unwrap();
    if !batched {
        eprintln!(
            "{} takes keys one by one: no batch to check",
            store.backend().name()
        );
    }
}

/// A multi-key lock of reader-writer locks' writers takes its keys in one
/// request too, where the store batches, and each writer's grant passes
/// its gate: with a reader on one key, the batch lets every key go and the
/// wait (one key by one) ends when the reader leaves, never beside it.
pub async fn batch_takes_writers_and_passes_each_gate(store: Store) {
    let (counted, process) = counting(&store).await;
    let base = unique_key("batch-writers");
    let (a, b) = (format!("{base}/a"), format!("{base}/b"));
    let writers = leasehold::MultiLock::builder(&process, opts(&store))
        .write(&b)
        .write(&a)
        .build()
        .unwrap();
    counted.singles.store(0, Ordering::SeqCst);
    let held = writers.try_acquire().await.unwrap();
    let batched = counted.singles.load(Ordering::SeqCst) == 0;
    assert_eq!(counted.batches.load(Ordering::SeqCst), 1);
    held.release().await.unwrap();
    // A reader of b: the writers wait for it.
    let reader = other_process(&store)
        .rw_lock_with(&b, leasehold::DEFAULT_MAX_READERS, opts(&store))
        .unwrap()
        .read_timeout(Duration::from_secs(30))
        .await
        .unwrap();
    let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
    let mut waiting = tokio::spawn(async move {
        let mut waiting = Some(waiting_tx);
        writers
            .acquire_reporting(Duration::from_secs(30), |_, _| {
                if let Some(tx) = waiting.take() {
                    let _ = tx.send(());
                }
            })
            .await
    });
    tokio::select! {
        _ = waiting_rx => {}
        done = &mut waiting => panic!(
            "the writers were done beside b's reader: {:?}",
            done.map(|r| r.map(|g| g.keys().count()))
        ),
    }
    assert!(
        !waiting.is_finished(),
        "the writers got b beside its reader"
    );
    reader.release().await.unwrap();
    let again = waiting.await.unwrap().unwrap();
    assert!(again.fencing_token(&b).is_some() && again.fencing_token(&a).is_some());
    again.release().await.unwrap();
    if !batched {
        eprintln!(
            "{} takes keys one by one: no batch to check",
            store.backend().name()
        );
    }
}
