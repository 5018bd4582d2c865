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
        (like(store, Arc::new(backend)), (go_tx, paused_rx))
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
impl leasehold::backend::Wrapper for PausesOnce {
    fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }
    async fn inspect(&self, key: &Key) -> leasehold::Result<leasehold::KeyInfo> {
        self.maybe_pause(false, key.as_str()).await;
        self.inner.inspect(key).await
    }
    async fn list(&self, prefix: &str) -> leasehold::Result<Vec<leasehold::KeyInfo>> {
        self.maybe_pause(true, prefix).await;
        self.inner.list(prefix).await
    }
}

/// The longest a grant after a loss may wait: the quarantine, and more.
fn after_loss_wait(store: &Store) -> Duration {
    store.backend().capabilities().max_ttl * 3 + Duration::from_secs(30)
}

/// A reader-writer lock's gate that reads the other side after a loss of
/// the store's data, its own grant made on the old data, lets no one in
/// beside the other side's holders of the old data while they are not yet
/// told lost. Both sides at once, on two keys, across one loss:
///
/// * a writer granted its key just before the loss, whose gate then lists
///   the reader slots on the emptied store (where the reader's slot is
///   gone too), while a reader of the old data holds;
/// * a reader granted its slot just before the loss, whose gate then
///   reads the writer's key on the emptied store, while a writer of the
///   old data holds.
///
/// Each new grant comes only once the old holder was told lost, with a
/// greater token.
pub async fn rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side<F, Fut>(
    store: Store,
    lose: F,
) where
    F: FnOnce(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ttl = test_ttl(&store);
    let options = opts(&store).renew_interval(ttl / 5);
    let rw = |s: &Store, key: &str| s.rw_lock_with(key, 2, options.clone()).unwrap();
    let (w_key, r_key) = (unique_key("rw-loss-w"), unique_key("rw-loss-r"));
    let old_reader = rw(&other_process(&store), &w_key).try_read().await.unwrap();
    let old_writer = rw(&other_process(&store), &r_key)
        .try_write()
        .await
        .unwrap();
    let slots = format!("{w_key}{}", leasehold::backend::READ_SEGMENT);
    let (w_store, (w_go, w_paused)) = PausesOnce::over(&store, slots, true);
    let (r_store, (r_go, r_paused)) = PausesOnce::over(&store, r_key.clone(), false);
    let (writer, reader) = (rw(&w_store, &w_key), rw(&r_store, &r_key));
    let loss = async {
        w_paused.await.expect("the writer's gate lists the slots");
        r_paused.await.expect("the reader's gate reads the key");
        lose(store.clone()).await;
        w_go.send(()).unwrap();
        r_go.send(()).unwrap();
    };
    // Each side checks the old holder the moment its grant is in hand.
    let wait = after_loss_wait(&store);
    let new_writer = async {
        let g = writer.write_timeout(wait).await.unwrap();
        (old_reader.is_lost(), g)
    };
    let new_reader = async {
        let g = reader.read_timeout(wait).await.unwrap();
        (old_writer.is_lost(), g)
    };
    let ((reader_lost, new_writer), (writer_lost, new_reader), ()) =
        tokio::join!(new_writer, new_reader, loss);
    let sides: [(_, _, &leasehold::LeaseGuard, &leasehold::LeaseGuard); 2] = [
        ("writer", reader_lost, &new_writer, &old_reader),
        ("reader", writer_lost, &new_reader, &old_writer),
    ];
    for (side, lost, new, old) in sides {
        assert!(
            lost,
            "a {side} was granted (token {}) beside a holder of the lost data (token {}) not yet told lost",
            new.fencing_token(),
            old.fencing_token()
        );
        assert!(new.fencing_token() > old.fencing_token(), "{side}");
    }
    new_writer.release().await.unwrap();
    new_reader.release().await.unwrap();
}
