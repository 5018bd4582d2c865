//! Run records (`run --once-per`): successes recorded and read elsewhere,
//! kept through release, expiry and break; failed and lost runs are not
//! successes.

use super::*;

/// Asserts that `run` is the record of a run with `outcome` under the
/// lease with `token`, by this process with `label`, that took place
/// between `before` and `after` (wall clock; a backend may stamp the end
/// with the store's clock, so a minute of slack).
fn assert_run(
    run: Option<&RunRecord>,
    outcome: RunOutcome,
    token: u64,
    label: &str,
    before: std::time::SystemTime,
    after: std::time::SystemTime,
) {
    let run =
        run.unwrap_or_else(|| panic!("no run recorded (expected {outcome:?}, token {token})"));
    assert_eq!(run.outcome, outcome, "{run:?}");
    assert_eq!(run.fencing_token, token, "{run:?}");
    assert_eq!(run.owner.label.as_deref(), Some(label), "{run:?}");
    assert_eq!(run.owner.pid, std::process::id(), "{run:?}");
    let slack = Duration::from_secs(60);
    assert!(
        run.started_at >= before - Duration::from_millis(1) && run.started_at <= after,
        "{run:?}"
    );
    assert!(
        run.ended_at >= run.started_at - slack && run.ended_at <= after + slack,
        "{run:?}"
    );
}

/// [`assert_run`]: the key's last success is that of `runner-a`'s lease
/// with `token`, between `before` and `after`.
fn assert_runner_a_succeeded(
    info: &leasehold::KeyInfo,
    token: u64,
    before: std::time::SystemTime,
    after: std::time::SystemTime,
) {
    let success = info.last_success.as_ref();
    assert_run(
        success,
        RunOutcome::Succeeded,
        token,
        "runner-a",
        before,
        after,
    );
}

/// A run released with success is the key's last success and last run,
/// with its token, owner, times and exit code, as read through another
/// "process" (a store sharing nothing in-process), and it is what
/// [`Store::last_success_within`] answers.
pub async fn run_success_recorded_and_read_elsewhere(store: Store) {
    let key = unique_key("run-success");
    let other = other_process(&store);
    let none = other.inspect(&key).await.unwrap();
    assert!(none.last_success.is_none() && none.last_run.is_none());
    assert!(other
        .last_success_within(&key, Duration::from_secs(3600))
        .await
        .unwrap()
        .is_none());

    let before = started_now();
    let guard = take(&store, &key, opts(&store).owner_label("runner-a")).await;
    let token = guard.fencing_token();
    guard
        .release_with(RunReport::succeeded(before).exit_code(Some(0)))
        .await
        .unwrap();
    let after = started_now();

    let info = other.inspect(&key).await.unwrap();
    assert!(info.holder.is_none(), "release_with released the lease");
    assert_runner_a_succeeded(&info, token, before, after);
    assert_eq!(info.last_run, info.last_success);
    assert_eq!(info.last_run.as_ref().unwrap().exit_code, Some(0));
    let within = other
        .last_success_within(&key, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(within, info.last_success);
    assert!(other
        .last_success_within(&key, Duration::ZERO)
        .await
        .is_err());
    // list shows the records too.
    let listed = other.list(&key).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_success, info.last_success);
}

/// The last success stays through a release, an expiry and a break of
/// later leases, and through later grants (like the fencing counter).
pub async fn runs_survive_release_expiry_and_break(store: Store) {
    let key = unique_key("run-survives");
    let before = started_now();
    let guard = take(&store, &key, opts(&store).owner_label("runner-a")).await;
    let token = guard.fencing_token();
    guard
        .release_with(RunReport::succeeded(before))
        .await
        .unwrap();
    let after = started_now();
    let check = |info: leasehold::KeyInfo, when: &str| {
        assert_runner_a_succeeded(&info, token, before, after);
        assert_eq!(info.last_run, info.last_success, "after {when}");
    };

    // A plain release by a later holder.
    let b = other_process(&store);
    take(&b, &key, opts(&b)).await.release().await.unwrap();
    check(store.inspect(&key).await.unwrap(), "a later release");

    // A break of a later holder.
    let held = take(&b, &key, opts(&b)).await;
    store.break_lease(&key).await.unwrap();
    check(store.inspect(&key).await.unwrap(), "a break");
    drop(held);

    // An expiry: a lease nobody renews, taken over after its TTL.
    let ttl = test_ttl(&store);
    let stale = raw_lease(store.backend().as_ref(), &key, ttl).await;
    let c = other_process(&store);
    let taken = c
        .lock_with(&key, opts(&c))
        .unwrap()
        .acquire_timeout(expiry_wait(&store))
        .await
        .unwrap();
    assert!(taken.fencing_token() > stale.fencing_token);
    check(store.inspect(&key).await.unwrap(), "an expiry and takeover");
    taken.release().await.unwrap();
    check(store.inspect(&key).await.unwrap(), "the takeover's release");
}

/// A failed run is the last run, with its exit code, but not the last
/// success: that stays the earlier successful run.
pub async fn failed_run_is_not_a_success(store: Store) {
    let key = unique_key("run-failed");
    let lock = store
        .lock_with(&key, opts(&store).owner_label("runner-a"))
        .unwrap();
    let before = started_now();
    let g = lock.try_acquire().await.unwrap();
    let good = g.fencing_token();
    g.release_with(RunReport::succeeded(before)).await.unwrap();
    let mid = started_now();
    let g = lock.try_acquire().await.unwrap();
    let bad = g.fencing_token();
    g.release_with(RunReport::failed(mid).exit_code(Some(3)))
        .await
        .unwrap();
    let after = started_now();

    let info = other_process(&store).inspect(&key).await.unwrap();
    assert_run(
        info.last_success.as_ref(),
        RunOutcome::Succeeded,
        good,
        "runner-a",
        before,
        mid,
    );
    assert_run(
        info.last_run.as_ref(),
        RunOutcome::Failed,
        bad,
        "runner-a",
        mid,
        after,
    );
    assert_eq!(info.last_run.as_ref().unwrap().exit_code, Some(3));

    // A key that never succeeded has a last run and no success.
    let key2 = unique_key("run-failed-only");
    let g = take(&store, &key2, opts(&store)).await;
    g.release_with(RunReport::failed(started_now()))
        .await
        .unwrap();
    let info = store.inspect(&key2).await.unwrap();
    assert!(info.last_success.is_none(), "{:?}", info.last_success);
    assert_eq!(info.last_run.unwrap().outcome, RunOutcome::Failed);
    assert!(store
        .last_success_within(&key2, Duration::from_secs(3600))
        .await
        .unwrap()
        .is_none());
}

/// A holder whose lease was broken and granted to another reports its
/// run as a success: `release_with` answers the loss, no success of its
/// is recorded, and the later holder's records are not replaced by the
/// earlier run's.
pub async fn lost_run_records_no_success(store: Store) {
    let key = unique_key("run-lost");
    let a = take(&store, &key, opts(&store).owner_label("runner-a")).await;
    store.break_lease(&key).await.unwrap();
    let b_store = other_process(&store);
    let before = started_now();
    let b = take(&b_store, &key, opts(&b_store).owner_label("runner-b")).await;
    let b_token = b.fencing_token();
    b.release_with(RunReport::succeeded(before)).await.unwrap();
    let after = started_now();

    let err = a
        .release_with(RunReport::succeeded(before))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = store.inspect(&key).await.unwrap();
    assert_run(
        info.last_success.as_ref(),
        RunOutcome::Succeeded,
        b_token,
        "runner-b",
        before,
        after,
    );
    assert_eq!(
        info.last_run, info.last_success,
        "an earlier run replaced a later one's record"
    );

    // Lost with nobody after it: never a success; if the store kept the
    // attempt, it says the lease was lost.
    let key2 = unique_key("run-lost-alone");
    let a = take(&store, &key2, opts(&store).owner_label("runner-a")).await;
    let a_token = a.fencing_token();
    store.break_lease(&key2).await.unwrap();
    let err = a
        .release_with(RunReport::succeeded(started_now()))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = store.inspect(&key2).await.unwrap();
    assert!(
        info.last_success.is_none(),
        "a lost run was recorded as a success: {:?}",
        info.last_success
    );
    if let Some(run) = &info.last_run {
        assert_eq!(run.outcome, RunOutcome::LeaseLost, "{run:?}");
        assert_eq!(run.fencing_token, a_token);
    }
}

/// The backend contract directly: `record_run` with a lease that is not
/// the key's (released, or taken by another) answers `LeaseLost` and
/// writes no success; with the key's lease it writes both records.
pub async fn record_run_by_non_holder_records_no_success(store: Store) {
    let backend = store.backend().clone();
    let key = unique_key("run-contract");
    let ttl = test_ttl(&store);
    let now = started_now();
    let run = |lease: &Lease, outcome| {
        RunRecord::new(outcome, now, now, Owner::current(), lease.fencing_token)
    };
    let first = raw_lease(backend.as_ref(), &key, ttl).await;
    backend.release(&first).await.unwrap();
    let err = backend
        .record_run(&first, &run(&first, RunOutcome::Succeeded))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = backend.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert!(
        info.last_success.is_none(),
        "a released lease recorded a success"
    );

    let second = raw_lease(backend.as_ref(), &key, ttl).await;
    let err = backend
        .record_run(&first, &run(&first, RunOutcome::Succeeded))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    backend
        .record_run(&second, &run(&second, RunOutcome::Succeeded))
        .await
        .unwrap();
    // A retry of the same write is harmless.
    backend
        .record_run(&second, &run(&second, RunOutcome::Succeeded))
        .await
        .unwrap();
    let info = backend.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert_eq!(
        info.last_success.as_ref().unwrap().fencing_token,
        second.fencing_token
    );
    assert_eq!(info.last_run, info.last_success);
    assert_eq!(
        info.holder.as_ref().map(|h| h.fencing_token),
        Some(second.fencing_token),
        "record_run left the lease held"
    );
    // A stale holder's failure does not replace the later run.
    let _ = backend
        .record_run(&first, &run(&first, RunOutcome::Failed))
        .await;
    let info = backend.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert_eq!(
        info.last_run.as_ref().unwrap().fencing_token,
        second.fencing_token
    );
    backend.release(&second).await.unwrap();
}
