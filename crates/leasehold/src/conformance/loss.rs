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
