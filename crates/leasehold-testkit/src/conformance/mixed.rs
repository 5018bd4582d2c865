//! Store loss under a holder whose settings differ from the re-creator's
//! (not registered by [`conformance_tests!`](crate::conformance_tests):
//! each backend's store-loss tests call it with two handles on one store,
//! opened with different settings).

use super::*;
use leasehold::backend::{Clock, ManualClock, SystemClock};

/// A holder on a store opened with a long max TTL (`holder`) holds the
/// longest lease that store allows; the store's data is lost (`lose`);
/// another process opens the store with the default settings
/// (`open_default`, called after the loss, so it never sees the lost
/// epoch), re-creates it and asks for the key. It must not be granted
/// while the holder's guard can still believe it holds: the holder's loss
/// deadline comes before the second grant, whatever either side's max TTL
/// (issue #28, item 1).
///
/// Both "processes" use the confirmation window every program uses
/// ([`CONFIRMATION_WINDOW`](leasehold::CONFIRMATION_WINDOW)), and time their
/// guards and quarantines on one manual clock
/// (one machine's), which the test moves on by each quarantine the
/// re-creator reports instead of waiting it out, so the test takes
/// seconds whatever the store's quarantine.
pub async fn store_loss_quarantine_outlasts_every_holder(
    holder: Arc<dyn Backend>,
    lose: impl AsyncFnOnce(),
    open_default: impl AsyncFnOnce() -> Arc<dyn Backend>,
) {
    let after = recreate_under_a_holder(holder, lose, open_default).await;
    // Checked the moment the second grant was in hand.
    assert!(
        after.old_lost,
        "granted (token {}) after a quarantine of {:?} while the holder of the lost data \
         (token {}, TTL {:?}) still believed it held, for {:?} more",
        after.guard.fencing_token(),
        after.quarantine,
        after.holder.fencing_token(),
        after.holder_ttl,
        after.old_valid_for
    );
    assert!(
        after.quarantine > Duration::ZERO,
        "granted in the re-created store without a quarantine while a holder of the lost data was live"
    );
    after.release().await;
}

/// As [`store_loss_quarantine_outlasts_every_holder`], the data lost at
/// once after the first grant (within the second the store was created
/// in): the grant in the re-created store has a greater fencing token than
/// the holder of the lost data. A store whose epoch is its creation time in
/// whole seconds gives the re-created store the same epoch, and the same
/// tokens again.
pub async fn store_recreated_at_once_issues_greater_tokens(
    holder: Arc<dyn Backend>,
    lose: impl AsyncFnOnce(),
    open_default: impl AsyncFnOnce() -> Arc<dyn Backend>,
) {
    let after = recreate_under_a_holder(holder, lose, open_default).await;
    assert!(
        after.guard.fencing_token() > after.holder.fencing_token(),
        "token {} after the loss is not above the earlier {}",
        after.guard.fencing_token(),
        after.holder.fencing_token()
    );
    after.release().await;
}

/// What [`recreate_under_a_holder`] leaves: the holder of the lost data,
/// the re-created store's grant, and what was seen at the moment of that
/// grant.
struct Recreated {
    holder: leasehold::LeaseGuard,
    holder_ttl: Duration,
    guard: leasehold::LeaseGuard,
    quarantine: Duration,
    old_lost: bool,
    old_valid_for: Duration,
}

impl Recreated {
    async fn release(self) {
        let err = self.holder.release().await.unwrap_err();
        assert!(err.is_lease_lost(), "{err}");
        self.guard.release().await.unwrap();
    }
}

/// A holder of the longest lease `holder`'s store allows; the data lost;
/// the key asked for in the store `open_default` re-creates, until
/// granted, the shared manual clock moved on by each quarantine.
async fn recreate_under_a_holder(
    holder: Arc<dyn Backend>,
    lose: impl AsyncFnOnce(),
    open_default: impl AsyncFnOnce() -> Arc<dyn Backend>,
) -> Recreated {
    let clock = Arc::new(ManualClock::new(SystemClock.now()));
    let first = on_clock(holder, &clock);
    let holder_ttl = first.backend().capabilities().max_ttl;
    let key = unique_key("store-loss-long-holder");
    let lock = first
        .lock_with(&key, LockOptions::new().ttl(holder_ttl))
        .unwrap();
    let (holder, _) = acquire_moving_clock(&lock, &clock).await;

    lose().await;

    let second = on_clock(open_default().await, &clock);
    // The default TTL, or the longest the second store allows if shorter.
    let ttl = leasehold::DEFAULT_TTL.min(second.backend().capabilities().max_ttl);
    let lock = second.lock_with(&key, LockOptions::new().ttl(ttl)).unwrap();
    let (guard, quarantine) = acquire_moving_clock(&lock, &clock).await;
    Recreated {
        old_lost: holder.is_lost(),
        old_valid_for: holder.valid_for(),
        holder,
        holder_ttl,
        guard,
        quarantine,
    }
}

/// A store over `backend` whose guards and quarantines run on `clock`,
/// with the confirmation window every program has (a test store of
/// [`test_store`](crate::test_store) takes its backend's max TTL for it).
fn on_clock(backend: Arc<dyn Backend>, clock: &Arc<ManualClock>) -> Store {
    Store::builder(backend)
        .clock(clock.clone())
        .confirmation_window(leasehold::CONFIRMATION_WINDOW)
        .build()
}

/// `lock.try_acquire()` until granted, moving `clock` on by each
/// quarantine reported (and retrying failures a store may give while its
/// data is being re-created); the guard and the quarantine moved through.
async fn acquire_moving_clock(
    lock: &leasehold::Lock,
    clock: &ManualClock,
) -> (leasehold::LeaseGuard, Duration) {
    let mut quarantine = Duration::ZERO;
    for _ in 0..200 {
        match lock.try_acquire().await {
            Ok(guard) => return (guard, quarantine),
            Err(Error::Quarantined { remaining, .. }) => {
                let step = remaining + Duration::from_millis(1);
                quarantine += step;
                clock.advance(step);
            }
            Err(e) if e.is_retryable() && !matches!(e, Error::Held { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("acquiring {}: {e}", lock.key()),
        }
    }
    panic!("{} was not granted after 200 attempts", lock.key());
}
