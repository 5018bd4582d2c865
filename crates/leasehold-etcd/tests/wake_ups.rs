//! Wake-ups across processes: a waiter of another store (its own gRPC channel and
//! watch, as another machine would have) is woken by a release
//! through an etcd watch on the holder keys, long before its next poll; with wake-ups off it is not.

mod common;

use std::time::{Duration, Instant};

use leasehold::{LockOptions, Store};

/// Polls 10 s apart: only a wake-up gets the waiter in sooner.
fn slow_polls() -> LockOptions {
    LockOptions::new()
        .ttl(Duration::from_secs(4))
        .poll_interval(Duration::from_secs(10), Duration::from_secs(10))
}

/// How long after A's release B's waiting acquire got the key.
async fn handoff(wake_ups: bool) -> Option<Duration> {
    let holder = common::backend().await?;
    let waiter = common::builder_for(common::prefix())?
        .wake_ups(wake_ups)
        .build()
        .await
        .unwrap();
    waiter.listening().await;
    let (a, b) = (Store::new(holder), Store::new(waiter));
    let key = common::unique_key("wake");
    let guard = a
        .lock_with(&key, slow_polls())
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut waiting = Some(waiting_tx);
        b.lock_with(&key, slow_polls())
            .unwrap()
            .acquire_reporting(Duration::from_secs(5), |_| {
                if let Some(tx) = waiting.take() {
                    let _ = tx.send(());
                }
            })
            .await
            .map(|g| (Instant::now(), g))
    });
    waiting_rx.await.unwrap();
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (got_at, g) = task.await.unwrap().ok()?;
    g.release().await.unwrap();
    Some(got_at - released_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_elsewhere_wakes_the_waiter_before_its_poll() {
    let Some(took) = handoff(true).await else {
        if common::available() {
            panic!("the waiter was not woken within 5 s (polls are 10 s apart)");
        }
        return;
    };
    assert!(took < Duration::from_secs(2), "woken after {took:?}");
}

/// The control: without wake-ups the same waiter is not in before its
/// next poll, 10 s later (its 5 s wait runs out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_wake_ups_the_waiter_waits_for_its_poll() {
    if !common::available() {
        return;
    }
    assert_eq!(handoff(false).await, None);
}
