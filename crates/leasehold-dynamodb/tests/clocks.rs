//! Skewed clocks against DynamoDB Local: the default mode never lets two
//! holders in at once, whatever the clocks say; the clock-trusting mode is
//! as safe as its stated skew bound.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use leasehold::{
    backend::{Backend, Clock, SharedClock, SystemClock},
    LockOptions, Store,
};
use leasehold_dynamodb::{TakeoverMode, WallClock};

/// A monotonic clock with an offset and a rate error.
#[derive(Debug)]
struct SkewedClock {
    origin: Duration,
    offset: Duration,
    rate_ppm: i64,
}

impl SkewedClock {
    fn shared(offset: Duration, rate_ppm: i64) -> SharedClock {
        Arc::new(SkewedClock {
            origin: SystemClock.now(),
            offset,
            rate_ppm,
        })
    }
}

impl Clock for SkewedClock {
    fn now(&self) -> Duration {
        let elapsed = SystemClock.now() - self.origin;
        let skew = elapsed.as_nanos() as i128 * self.rate_ppm as i128 / 1_000_000;
        self.offset + Duration::from_nanos((elapsed.as_nanos() as i128 + skew) as u64)
    }
}

fn wall(offset_secs: i64) -> WallClock {
    Arc::new(move || {
        let now = SystemTime::now();
        if offset_secs >= 0 {
            now + Duration::from_secs(offset_secs as u64)
        } else {
            now - Duration::from_secs(offset_secs.unsigned_abs())
        }
    })
}

/// Machine A: monotonic clock hours ahead and fast, wall clock 10 min slow.
fn machine_a() -> Option<(SharedClock, leasehold_dynamodb::DynamoDbBackendBuilder)> {
    let clock = SkewedClock::shared(Duration::from_secs(3 * 3600), 400);
    let b = common::builder()?
        .clock(clock.clone())
        .wall_clock(wall(-600));
    Some((clock, b))
}

/// Machine B: monotonic clock at zero and slow, wall clock 10 min fast.
fn machine_b() -> Option<(SharedClock, leasehold_dynamodb::DynamoDbBackendBuilder)> {
    let clock = SkewedClock::shared(Duration::ZERO, -400);
    let b = common::builder()?
        .clock(clock.clone())
        .wall_clock(wall(600));
    Some((clock, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn skewed_clocks_never_both_hold_a_lock() {
    // The run\'s table out of quarantine first.
    if common::backend().await.is_none() {
        return;
    }
    let Some((clock_a, a)) = machine_a() else {
        return;
    };
    let (clock_b, b) = machine_b().unwrap();
    let store_a = leasehold_testkit::with_test_window(&Store::with_clock(
        Arc::new(a.build().await.unwrap()),
        clock_a,
    ));
    let store_b = leasehold_testkit::with_test_window(&Store::with_clock(
        Arc::new(b.build().await.unwrap()),
        clock_b,
    ));
    let key = common::unique_key("skew");
    let ttl = Duration::from_secs(1);
    let mut locks = Vec::new();
    for store in [&store_a, &store_b] {
        for _ in 0..2 {
            let options = LockOptions::new()
                .ttl(ttl)
                .poll_interval(Duration::from_millis(20), Duration::from_millis(60));
            locks.push(store.lock_with(&key, options).unwrap());
        }
    }
    // 2 machines of 2 tasks, 2 rounds each: 8 grants.
    leasehold_testkit::conformance::take_turns(locks, 2, move |guard| async move {
        // Longer than the TTL: only renewals keep the lease, and a
        // wrongful takeover would land inside this section.
        tokio::select! {
            _ = tokio::time::sleep(ttl * 3 / 2) => {}
            reason = guard.lost() => panic!("lease lost while renewing: {reason}"),
        }
        guard
    })
    .await;
}

/// A holder that stops renewing is taken over only after its whole TTL has
/// passed in real time, though the waiter's clocks say it expired long ago.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_holder_taken_over_only_after_its_ttl_despite_skew() {
    // The run\'s table out of quarantine first.
    if common::backend().await.is_none() {
        return;
    }
    let Some((_, a)) = machine_a() else { return };
    let (clock_b, b) = machine_b().unwrap();
    let a = a.build().await.unwrap();
    let key = common::unique_key("skew-dead");
    let ttl = Duration::from_secs(2);
    let started = tokio::time::Instant::now();
    let lease = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    let store_b = leasehold_testkit::with_test_window(&Store::with_clock(
        Arc::new(b.build().await.unwrap()),
        clock_b,
    ));
    let guard = store_b
        .lock_with(
            &key,
            LockOptions::new()
                .ttl(ttl)
                .poll_interval(Duration::from_millis(20), Duration::from_millis(60)),
        )
        .unwrap()
        .acquire_timeout(Duration::from_secs(30))
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= ttl,
        "taken over after {elapsed:?}, within the TTL of {ttl:?}"
    );
    assert!(
        elapsed < ttl * 2 + Duration::from_secs(2),
        "took {elapsed:?}"
    );
    assert!(guard.fencing_token() > lease.fencing_token);
    assert!(a.renew(&lease).await.unwrap_err().is_lease_lost());
    guard.release().await.unwrap();
}

/// The same skew breaks the clock-trusting mode when it exceeds the stated
/// bound (which is why it is opt-in), and with clocks within the bound that
/// mode takes over from the stored expiry at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusting_clocks_is_only_as_safe_as_the_stated_skew() {
    // The run\'s table out of quarantine first.
    if common::backend().await.is_none() {
        return;
    }
    let Some((_, a)) = machine_a() else { return };
    let a = a.build().await.unwrap();
    let ttl = Duration::from_secs(5);

    // B's wall clock is 20 minutes ahead of A's, far beyond the stated 1 s:
    // B takes A's live lease at once. The default mode above never does.
    let (_, b) = machine_b().unwrap();
    let b = b
        .takeover(TakeoverMode::TrustClocks {
            max_skew: Duration::from_secs(1),
        })
        .build()
        .await
        .unwrap();
    assert!(!b.capabilities().takeover_needs_observation);
    let key = common::unique_key("trust-broken");
    let lease = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    let stolen = leasehold_testkit::conformance::raw_lease(&b, &key, ttl).await;
    assert!(stolen.fencing_token > lease.fencing_token);

    // With honest clocks, a waiter that first looks after expiry + skew
    // gets the lease on its first request.
    let honest = common::builder()
        .unwrap()
        .takeover(TakeoverMode::TrustClocks {
            max_skew: Duration::from_millis(200),
        })
        .build()
        .await
        .unwrap();
    let key = common::unique_key("trust-ok");
    let short = Duration::from_secs(1);
    let plain = common::backend().await.unwrap();
    let old = leasehold_testkit::conformance::raw_lease(&plain, &key, short).await;
    // Let the lease run out unrenewed: nothing to await but time itself.
    tokio::time::sleep(short + Duration::from_millis(400)).await;
    let before = honest.requests_sent();
    let new = leasehold_testkit::conformance::raw_lease(&honest, &key, short).await;
    assert_eq!(honest.requests_sent() - before, 1, "one request");
    assert!(new.fencing_token > old.fencing_token);
}
