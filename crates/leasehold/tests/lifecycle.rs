//! A program's life with the library (issue 49): a guard that outlives its
//! runtime is still told of its loss; work run under a lock is cancelled
//! when the lease is lost; read and write holds are two types; "held"
//! says who holds, when that is this very process or a crowd of readers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::{Error, LockOptions, ReadGuard, Store, WriteGuard};

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(20))
}

/// `lost()` completes (and agrees with `is_lost()`) when the runtime that
/// granted the lease, and with it the renewal task, is gone.
#[test]
fn lost_completes_once_the_granting_runtime_is_gone() {
    let first = tokio::runtime::Runtime::new().unwrap();
    let guard = first.block_on(async {
        let store = Store::open("memory:").unwrap();
        store
            .lock_with("k", opts(300))
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
    });
    drop(first);
    let second = tokio::runtime::Runtime::new().unwrap();
    let reason = second
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), guard.lost()).await })
        .expect("lost() never completed once the runtime that granted the lease was gone");
    assert!(guard.is_lost(), "{reason}");
    // And at once, when it is already lost.
    second
        .block_on(async { tokio::time::timeout(Duration::from_millis(100), guard.lost()).await })
        .unwrap();
    drop(guard);
}

/// A current-thread runtime that is dropped while the guard lives on in
/// another thread: the guard is told at its deadline too.
#[test]
fn lost_completes_on_another_runtime_while_the_first_sleeps_no_more() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let guard = rt.block_on(async {
        Store::open("memory:")
            .unwrap()
            .lock_with("k", opts(200))
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
    });
    drop(rt);
    assert!(!guard.is_lost(), "lost at once");
    let other = tokio::runtime::Runtime::new().unwrap();
    other
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), guard.lost()).await })
        .expect("lost() did not complete at the deadline");
}

/// `Lock::run` runs the work under the lock and releases it after.
#[tokio::test(flavor = "multi_thread")]
async fn run_runs_the_work_under_the_lock_then_releases_it() {
    let store = Store::open("memory:").unwrap();
    let lock = store.lock_with("k", opts(1000)).unwrap();
    let (token, held_meanwhile) = lock
        .run(Duration::from_secs(5), |held| {
            let store = store.clone();
            async move {
                let info = store.inspect("k").await.unwrap();
                (held.fencing_token(), info.holder.is_some())
            }
        })
        .await
        .unwrap();
    assert!(held_meanwhile);
    let info = store.inspect("k").await.unwrap();
    assert!(info.holder.is_none(), "not released: {info:?}");
    assert_eq!(info.fencing_token, token);
    store.close().await.unwrap();
}

/// When the lease is lost (broken by someone else) while the work runs,
/// the work is dropped and `run` says the lease was lost.
#[tokio::test(flavor = "multi_thread")]
async fn run_cancels_the_work_when_the_lease_is_lost() {
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let store = Store::open("memory:").unwrap();
    let lock = store.lock_with("k", opts(300)).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let work_dropped = dropped.clone();
    let breaker = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            store.break_lease("k").await.unwrap()
        })
    };
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        lock.run(Duration::from_secs(5), |_held| async move {
            let _dropped = Dropped(work_dropped);
            std::future::pending::<()>().await
        }),
    )
    .await
    .expect("the work was not cancelled on loss");
    assert!(breaker.await.unwrap().is_some());
    assert!(
        matches!(result, Err(Error::LeaseLost { ref key, .. }) if key == "k"),
        "{result:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the work was not dropped");
}

/// A reader and a writer get guards of two types.
#[tokio::test]
async fn read_and_write_holds_are_two_types() {
    let store = Store::open("memory:").unwrap();
    let rw = store.rw_lock_with("cfg", 4, opts(1000)).unwrap();
    let w: WriteGuard = rw.try_write().await.unwrap();
    assert_eq!(w.key().as_str(), "cfg");
    w.release().await.unwrap();
    let r: ReadGuard = rw.try_read().await.unwrap();
    assert_eq!(r.key().as_str(), format!("cfg/:read:{}", r.slot()));
    let _guard: leasehold::LeaseGuard = r.into_guard();
}

/// "Held by another holder" when the holder is this process's own earlier
/// guard: the message says it is this process.
#[tokio::test]
async fn held_by_this_process_says_so() {
    let store = Store::open("memory:").unwrap();
    let lock = store.lock_with("k", opts(1000)).unwrap();
    let first = lock.try_acquire().await.unwrap();
    let err = lock.try_acquire().await.unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("k is held by this process ("), "{text}");
    assert!(!text.contains("another holder"), "{text}");
    match &err {
        Error::Held {
            holder: Some(h), ..
        } => assert!(h.owner.is_this_process()),
        other => panic!("{other:?}"),
    }
    first.release().await.unwrap();
}

/// A full semaphore whose permits this process holds says so too.
#[tokio::test]
async fn a_semaphore_full_of_this_process_says_so() {
    let store = Store::open("memory:").unwrap();
    let sem = store.semaphore_with("sem", 2, opts(1000)).unwrap();
    let held = (
        sem.try_acquire().await.unwrap(),
        sem.try_acquire().await.unwrap(),
    );
    let text = sem.try_acquire().await.unwrap_err().to_string();
    assert!(text.starts_with("sem is held by this process ("), "{text}");
    drop(held);
}

/// A writer kept out by readers is told it is held by readers, not by one
/// of them as if it were an exclusive holder.
#[tokio::test]
async fn a_writer_refused_by_readers_is_told_of_readers() {
    let store = Store::open("memory:").unwrap();
    let rw = store.rw_lock_with("cfg", 4, opts(1000)).unwrap();
    let a = rw.try_read().await.unwrap();
    let b = rw.try_read().await.unwrap();
    let other = leasehold_testkit::test_store_from(store.backend().clone());
    let err = other
        .rw_lock_with("cfg", 4, opts(1000))
        .unwrap()
        .try_write()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Held { readers: 2, .. }), "{err:?}");
    assert!(text.starts_with("cfg is held by 2 readers"), "{text}");
    drop((a, b));
    // A writer holding: one exclusive holder.
    let w = rw.try_write().await;
    let w = match w {
        Ok(w) => w,
        Err(_) => rw.write_timeout(Duration::from_secs(5)).await.unwrap(),
    };
    let err = other
        .rw_lock_with("cfg", 4, opts(1000))
        .unwrap()
        .try_write()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Held { readers: 0, .. }), "{err:?}");
    w.release().await.unwrap();
}

/// A closed store refuses further use, in every clone, with a clear
/// error; closing waits for the releases of guards dropped before.
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_store_refuses_further_use() {
    let store = Store::open("memory:").unwrap();
    let clone = store.clone();
    let lock = store.lock_with("k", opts(1000)).unwrap();
    let guard = lock.try_acquire().await.unwrap();
    drop(guard);
    store.close().await.unwrap();
    assert!(clone.is_closed());
    let err = lock.try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::Closed), "{err}");
    assert!(err.to_string().contains("closed"), "{err}");
    assert!(matches!(clone.lock("j"), Err(Error::Closed)));
    assert!(matches!(clone.inspect("k").await, Err(Error::Closed)));
    assert!(matches!(clone.list("").await, Err(Error::Closed)));
    assert!(matches!(clone.break_lease("k").await, Err(Error::Closed)));
    // The release went through before close returned: a store on the same
    // backend finds the key free.
    let again = leasehold_testkit::test_store_from(store.backend().clone());
    assert!(again.inspect("k").await.unwrap().holder.is_none());
    store.close().await.unwrap();
}
