//! Store loss (run only with `lose = ...`): the old holder is stopped
//! before the next grant, and the store's run records are forgotten.

use super::*;

/// The store's data is lost while a lease is held and another holder waits
/// (`lose` destroys it): the waiter is granted only after the first holder's
/// guard was told lost (so the two critical sections never overlap), it
/// waited in quarantine, and its token is greater than the first one. The
/// old holder's release reports the loss.
pub async fn store_loss_stops_holder_before_next_grant<F, Fut>(store: Store, lose: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let key = unique_key("store-loss");
    let ttl = test_ttl(&store);
    let holder = take(&store, &key, opts(&store).renew_interval(ttl / 5)).await;
    let first = holder.fencing_token();
    let waiter = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    assert_held(waiter.try_acquire().await);

    lose(store.clone()).await;

    let max_ttl = store.backend().capabilities().max_ttl;
    let mut quarantined = None;
    let guard = waiter
        .acquire_reporting(max_ttl * 3 + Duration::from_secs(30), |reason| {
            if let WaitReason::Quarantine { remaining, .. } = reason {
                quarantined.get_or_insert(remaining);
            }
        })
        .await
        .unwrap();
    // Checked the moment the new grant is in hand.
    let old_lost = holder.is_lost();
    assert!(
        old_lost,
        "a new holder was granted (token {}) while the holder of the lost data (token {first}) was not yet told lost",
        guard.fencing_token()
    );
    assert!(
        guard.fencing_token() > first,
        "token {} after the store's data was lost is not above the earlier {first}",
        guard.fencing_token()
    );
    assert!(
        quarantined.is_some(),
        "the waiter was never told of a quarantine"
    );
    let err = holder.release().await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = store.inspect(&key).await.unwrap();
    assert_eq!(info.fencing_token, guard.fencing_token());
    guard.release().await.unwrap();
}

/// A store that lost its data has no run records: the job runs again.
pub async fn store_loss_forgets_runs<F, Fut>(store: Store, lose: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let key = unique_key("run-store-loss");
    let g = take(&store, &key, opts(&store)).await;
    g.release_with(RunReport::succeeded(started_now()))
        .await
        .unwrap();
    assert!(store
        .last_success_within(&key, Duration::from_secs(3600))
        .await
        .unwrap()
        .is_some());
    lose(store.clone()).await;
    let info = store.inspect(&key).await.unwrap();
    assert!(
        info.last_success.is_none() && info.last_run.is_none(),
        "{info:?}"
    );
    assert!(store
        .last_success_within(&key, Duration::from_secs(3600))
        .await
        .unwrap()
        .is_none());
}

/// A backend over another whose first read of one key (`inspect`) or of
/// one prefix (`list`) waits, after telling the test, until the test lets
/// it go: the test loses the store's data in between.
#[derive(Debug)]
struct PausesOnce {
    inner: Arc<dyn Backend>,
    /// The key (`inspect`) or prefix (`list`) whose first read waits.
    at: String,
    list: bool,
    pause: Mutex<Option<Pause>>,
}

/// Sends "paused"; waits for "go".
type Pause = (
    tokio::sync::oneshot::Sender<()>,
    tokio::sync::oneshot::Receiver<()>,
);

impl PausesOnce {
    /// A store over `store`'s backend (another process) whose first read
    /// of `at` waits; the test's ends of the pause.
    fn over(store: &Store, at: String, list: bool) -> (Store, Pause) {
        let (paused_tx, paused_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel();
        let backend = PausesOnce {
            inner: store.backend().clone(),
            at,
            list,
            pause: Mutex::new(Some((paused_tx, go_rx))),
        };
        (
            Store::with_clock(Arc::new(backend), store.clock().clone()),
            (go_tx, paused_rx),
        )
    }

    async fn maybe_pause(&self, list: bool, at: &str) {
        if list != self.list || at != self.at {
            return;
        }
        let pause = self.pause.lock().unwrap().take();
        if let Some((paused, go)) = pause {
            let _ = paused.send(());
            let _ = go.await;
        }
    }
}

#[async_trait::async_trait]
impl crate::backend::Wrapper for PausesOnce {
    fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }
    async fn inspect(&self, key: &Key) -> crate::Result<crate::KeyInfo> {
        self.maybe_pause(false, key.as_str()).await;
        self.inner.inspect(key).await
    }
    async fn list(&self, prefix: &str) -> crate::Result<Vec<crate::KeyInfo>> {
        self.maybe_pause(true, prefix).await;
        self.inner.list(prefix).await
    }
}

/// Whether `holder` (granted before the loss) was told lost by the time
/// `after` (asked for at once, paused inside the reader-writer gate while
/// `lose` destroys the data) was granted; `after`'s guard.
async fn granted_across_a_loss<F, Fut, G>(
    store: &Store,
    holder: &crate::LeaseGuard,
    (go, paused): Pause,
    after: G,
    lose: F,
) -> (bool, crate::LeaseGuard)
where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
    G: std::future::Future<Output = crate::Result<crate::LeaseGuard>>,
{
    let loss = async {
        paused.await.expect("the gate reads the other side");
        lose(store.clone()).await;
        go.send(()).unwrap();
    };
    let (granted, ()) = tokio::join!(after, loss);
    // Checked the moment the new grant is in hand.
    let holder_lost = holder.is_lost();
    (holder_lost, granted.unwrap())
}

/// The longest a grant after a loss may wait: the quarantine, and more.
fn after_loss_wait(store: &Store) -> Duration {
    store.backend().capabilities().max_ttl * 3 + Duration::from_secs(30)
}

/// A writer of a reader-writer lock granted its key on the store's data
/// just before the data is lost, whose gate then lists the reader slots on
/// the emptied store (where the reader's slot is gone too), is not let in
/// while the reader, granted before the loss, is not yet told lost; its
/// token is above the reader's.
pub async fn rw_lock_a_writer_whose_gate_reads_after_a_loss_waits_for_the_readers<F, Fut>(
    store: Store,
    lose: F,
) where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let key = unique_key("rw-loss-writer");
    let ttl = test_ttl(&store);
    let options = opts(&store).renew_interval(ttl / 5);
    let reader = other_process(&store)
        .rw_lock_with(&key, 2, options.clone())
        .unwrap()
        .try_read()
        .await
        .unwrap();
    // The slots' prefix: a slot's key less its number.
    let slot = reader.key().as_str();
    let prefix = slot
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .to_owned();
    let (paused, pause) = PausesOnce::over(&store, prefix, true);
    let writer = paused.rw_lock_with(&key, 2, options).unwrap();
    let (reader_lost, guard) = granted_across_a_loss(
        &store,
        &reader,
        pause,
        writer.write_timeout(after_loss_wait(&store)),
        lose,
    )
    .await;
    assert!(
        reader_lost,
        "a writer was granted (token {}) beside a reader of the lost data (token {}) not yet told lost",
        guard.fencing_token(),
        reader.fencing_token()
    );
    assert!(guard.fencing_token() > reader.fencing_token());
    guard.release().await.unwrap();
}

/// A reader of a reader-writer lock granted its slot on the store's data
/// just before the data is lost, whose gate then reads the writer's key on
/// the emptied store, is not let in while the writer, granted before the
/// loss, is not yet told lost; its token is above the writer's.
pub async fn rw_lock_a_reader_whose_gate_reads_after_a_loss_waits_for_the_writer<F, Fut>(
    store: Store,
    lose: F,
) where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let key = unique_key("rw-loss-reader");
    let ttl = test_ttl(&store);
    let options = opts(&store).renew_interval(ttl / 5);
    let writer = other_process(&store)
        .rw_lock_with(&key, 2, options.clone())
        .unwrap()
        .try_write()
        .await
        .unwrap();
    let (paused, pause) = PausesOnce::over(&store, key.clone(), false);
    let reader = paused.rw_lock_with(&key, 2, options).unwrap();
    let (writer_lost, guard) = granted_across_a_loss(
        &store,
        &writer,
        pause,
        reader.read_timeout(after_loss_wait(&store)),
        lose,
    )
    .await;
    assert!(
        writer_lost,
        "a reader was granted (token {}) beside a writer of the lost data (token {}) not yet told lost",
        guard.fencing_token(),
        writer.fencing_token()
    );
    assert!(guard.fencing_token() > writer.fencing_token());
    guard.release().await.unwrap();
}
