//! Behaviour of the layer above the backend: in-process waiting, loss
//! detection under network faults, retries, and the abort policy. The
//! backend is the real memory backend, wrapped to count requests or to stop
//! answering like a partitioned network would.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    backend::{AcquireOutcome, AcquireRequest, Backend, Lease, Wrapper},
    Error, Key, LockOptions, LossPolicy, LossReason, Result, Store, Wait,
};
use leasehold_testkit::conformance::take;

/// The memory backend, with a request counter and injectable faults.
#[derive(Debug, Default)]
struct Faulty {
    inner: leasehold::memory::MemoryBackend,
    acquires: AtomicU32,
    renewals: AtomicU32,
    /// Renewals never answer (a blackholed connection).
    partitioned: AtomicBool,
    /// Acquisitions fail with a retryable error (an unreachable store).
    unreachable: AtomicBool,
    /// Acquisitions never answer (a blackholed connection).
    silent: AtomicBool,
    /// This many renewals fail with a retryable error first.
    transient_failures: AtomicU32,
    /// Acquire attempts answer only after this long (a slow store).
    acquire_delay: std::sync::Mutex<Duration>,
    /// Renewals are answered only once this is notified (a renewal in
    /// flight across the safety deadline).
    hold_renewals: AtomicBool,
    renewal_gate: tokio::sync::Notify,
    /// Notified when a held renewal has been sent.
    renewal_sent: tokio::sync::Notify,
    releases: AtomicU32,
    /// Notified (one stored permit) when a release is answered.
    released: tokio::sync::Notify,
    /// When the last release was answered.
    last_release: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Grants that came at least this long after the last release...
    long_gap: std::sync::Mutex<Duration>,
    /// ... counted here.
    long_gaps: AtomicU32,
    /// Offers release watches (that never fire, like a watch that misses
    /// a release) ...
    watchable: AtomicBool,
    /// ... and counts those asked for.
    watches: AtomicU32,
    /// The key is freed (broken) right after the next "held" answer, as
    /// if its holder released it at once.
    free_after_held: AtomicBool,
    /// Grants say this much of their TTL had run out at the send (a lease
    /// shared with keys granted earlier, as etcd's sessions are).
    ran: std::sync::Mutex<Duration>,
    /// Renewals (through `renew_ran`) say the same.
    renewal_ran: std::sync::Mutex<Duration>,
}

#[async_trait]
impl Wrapper for Faulty {
    fn inner(&self) -> &dyn Backend {
        &self.inner
    }
    fn name(&self) -> &'static str {
        "faulty-memory"
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        if self.silent.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.unreachable.load(Ordering::SeqCst) {
            return Err(Error::backend(
                "faulty-memory",
                "acquire",
                true,
                "injected connection refused",
            ));
        }
        let outcome = self.inner.try_acquire(req).await?;
        if matches!(outcome, AcquireOutcome::Held(_))
            && self.free_after_held.swap(false, Ordering::SeqCst)
        {
            self.inner.break_lease(&req.key).await?;
        }
        let delay = *self.acquire_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        if let AcquireOutcome::Acquired(grant) = outcome {
            let since = self.last_release.lock().unwrap().map(|t| t.elapsed());
            if since.is_some_and(|d| d >= *self.long_gap.lock().unwrap()) {
                self.long_gaps.fetch_add(1, Ordering::SeqCst);
            }
            let ran = *self.ran.lock().unwrap();
            return Ok(AcquireOutcome::Acquired(grant.ran(ran)));
        }
        Ok(outcome)
    }
    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self.partitioned.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.hold_renewals.load(Ordering::SeqCst) {
            self.renewal_sent.notify_one();
            self.renewal_gate.notified().await;
        }
        let left = self.transient_failures.load(Ordering::SeqCst);
        if left > 0 {
            self.transient_failures.store(left - 1, Ordering::SeqCst);
            return Err(Error::backend(
                "faulty-memory",
                "renew",
                true,
                "injected 503",
            ));
        }
        self.inner.renew(lease).await
    }
    async fn renew_ran(&self, lease: &Lease) -> Result<Duration> {
        Wrapper::renew(self, lease).await?;
        Ok(*self.renewal_ran.lock().unwrap())
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(lease).await?;
        self.released.notify_one();
        *self.last_release.lock().unwrap() = Some(tokio::time::Instant::now());
        Ok(())
    }
    fn watch_release(&self, _keys: &[Key]) -> Option<leasehold::backend::ReleaseWatch> {
        if !self.watchable.load(Ordering::SeqCst) {
            return None;
        }
        self.watches.fetch_add(1, Ordering::SeqCst);
        Some(Box::pin(std::future::pending()))
    }
}

/// Tokio's clock, so that guards time their deadlines on the paused clock
/// of a test.
#[derive(Debug)]
struct TokioClock(tokio::time::Instant);

impl leasehold::backend::Clock for TokioClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// [`faulty`], its guards on tokio's clock.
fn faulty_on_tokio_time() -> (Arc<Faulty>, Store) {
    let backend = Arc::new(Faulty::default());
    let clock = Arc::new(TokioClock(tokio::time::Instant::now()));
    let store = leasehold_testkit::with_test_window(&Store::with_clock(backend.clone(), clock));
    (backend, store)
}

fn faulty() -> (Arc<Faulty>, Store) {
    let backend = Arc::new(Faulty::default());
    let store = leasehold_testkit::test_store_from(backend.clone());
    (backend, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_on_one_key_poll_the_backend_as_one() {
    let (backend, store) = faulty();
    let poll = Duration::from_millis(50);
    let opts = LockOptions::new().poll_interval(poll, poll);
    let holder = take(&store, "k", opts.clone()).await;
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let lock = store.lock_with("k", opts.clone()).unwrap();
            tokio::spawn(async move { lock.acquire().await.map(|g| g.fencing_token()) })
        })
        .collect();
    let before = backend.acquires.load(Ordering::SeqCst);
    let window = Duration::from_secs(1);
    tokio::time::sleep(window).await;
    let polls = backend.acquires.load(Ordering::SeqCst) - before;
    // One waiter polls about window/poll = 20 times; eight would poll ~160.
    assert!(
        polls <= 30,
        "{polls} backend attempts in {window:?} from 8 local waiters"
    );
    holder.release().await.unwrap();
    let mut tokens = Vec::new();
    for w in waiters {
        tokens.push(w.await.unwrap().unwrap());
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 8, "every waiter got its own turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_release_wakes_a_local_waiter_without_waiting_for_its_poll() {
    let (_backend, store) = faulty();
    // Polls so rare that only the in-process wake-up can meet the deadline.
    let slow = LockOptions::new().poll_interval(Duration::from_secs(60), Duration::from_secs(60));
    let lock = store.lock_with("k", slow.clone()).unwrap();
    for explicit_release in [true, false] {
        let guard = lock.try_acquire().await.unwrap();
        let waiter = store.lock_with("k", slow.clone()).unwrap();
        let task =
            tokio::spawn(async move { waiter.acquire_timeout(Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        if explicit_release {
            guard.release().await.unwrap();
        } else {
            drop(guard); // released in the background
        }
        let next = task.await.unwrap().expect("woken by the local release");
        next.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_is_lost_before_anyone_else_can_acquire() {
    let (backend, store) = faulty();
    let ttl = Duration::from_secs(1);
    let opts = LockOptions::new()
        .ttl(ttl)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(20));
    let guard = take(&store, "k", opts.clone()).await;
    backend.partitioned.store(true, Ordering::SeqCst);
    // Another "process" waits for the key; the memory backend hands it over
    // once the holder's TTL has run out.
    let other = leasehold_testkit::test_store_from(backend.clone());
    let next = other
        .lock_with("k", opts)
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        guard.is_lost(),
        "the partitioned holder must know it is lost by the time another holds the key"
    );
    assert_eq!(guard.loss_reason(), Some(LossReason::Expired));
    assert_eq!(guard.valid_for(), Duration::ZERO);
    // And the lost() future had already completed.
    tokio::time::timeout(Duration::ZERO, guard.lost())
        .await
        .unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(guard.release().await.unwrap_err().is_lease_lost());
    backend.partitioned.store(false, Ordering::SeqCst);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_renewal_errors_are_retried_until_one_succeeds() {
    let (backend, store) = faulty();
    let ttl = Duration::from_secs(2);
    let opts = LockOptions::new()
        .ttl(ttl)
        .renew_interval(Duration::from_millis(200));
    backend.transient_failures.store(3, Ordering::SeqCst);
    let guard = take(&store, "k", opts).await;
    // Three failures, then the retry that succeeds, then one more renewal.
    while backend.renewals.load(Ordering::SeqCst) < 5 {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            reason = guard.lost() => panic!("lost despite retries: {reason}"),
        }
    }
    assert_eq!(backend.transient_failures.load(Ordering::SeqCst), 0);
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_lease_lost_while_held_is_reported_by_release() {
    let (_backend, store) = faulty();
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(500))
        .renew_interval(Duration::from_millis(50));
    let guard = take(&store, "k", opts).await;
    store.break_lease("k").await.unwrap();
    let reason = guard.lost().await;
    assert!(matches!(reason, LossReason::Revoked(_)), "{reason:?}");
    match guard.release().await {
        Err(Error::LeaseLost { key, .. }) => assert_eq!(key, "k"),
        other => panic!("{other:?}"),
    }
}

/// With `LossPolicy::Abort`, a lost lease aborts the process. Runs itself in
/// a child process (the same test binary) to watch it die.
#[test]
fn abort_policy_aborts_the_process_on_loss() {
    if std::env::var("LEASEHOLD_TEST_ABORT_CHILD").is_ok() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = Store::open("memory:").unwrap();
            let opts = LockOptions::new()
                .ttl(Duration::from_millis(500))
                .renew_interval(Duration::from_millis(50))
                .loss_policy(LossPolicy::Abort);
            let guard = take(&store, "k", opts).await;
            store.break_lease("k").await.unwrap();
            guard.lost().await;
        });
        // Only reached if the policy did not abort.
        std::process::exit(0);
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "abort_policy_aborts_the_process_on_loss",
            "--nocapture",
        ])
        .env("LEASEHOLD_TEST_ABORT_CHILD", "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc_sigabrt()), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("aborting the process"));
}

fn libc_sigabrt() -> i32 {
    6
}

/// Tasks looping on one lock (or a semaphore of one) through `store`:
/// acquire, hold 1 ms, release, pause `between`, until `stop`. Answers how
/// many passes they got and the longest single wait.
fn loopers(
    store: &Store,
    tasks: usize,
    (semaphore, between): (bool, Duration),
    opts: &LockOptions,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<(u32, Duration)>> {
    (0..tasks)
        .map(|_| {
            let lock = store.lock_with("k", opts.clone()).unwrap();
            let sem = store.semaphore_with("s", 1, opts.clone()).unwrap();
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut passes, mut longest) = (0, Duration::ZERO);
                while !stop.load(Ordering::SeqCst) {
                    let asked = tokio::time::Instant::now();
                    if semaphore {
                        let p = sem.acquire().await.unwrap();
                        longest = longest.max(asked.elapsed());
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        p.release().await.unwrap();
                    } else {
                        let g = lock.acquire().await.unwrap();
                        longest = longest.max(asked.elapsed());
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        g.release().await.unwrap();
                    }
                    passes += 1;
                    tokio::time::sleep(between).await;
                }
                (passes, longest)
            })
        })
        .collect()
}

async fn totals(tasks: Vec<tokio::task::JoinHandle<(u32, Duration)>>) -> (u32, Duration) {
    let mut sum = (0, Duration::ZERO);
    for t in tasks {
        let (passes, longest) = t.await.unwrap();
        sum = (sum.0 + passes, sum.1.max(longest));
    }
    sum
}

/// A process whose tasks keep handing a key to each other gives way to
/// other processes once it has seen one of them hold the key (here: another
/// `Store` on the same backend, which took the key once): from then on, at
/// every local handoff it leaves the key free for a poll interval (the
/// backend wakes no one elsewhere), so that a waiter elsewhere gets a try.
/// The same engine does it for a semaphore's slots. On tokio's paused
/// clock, so the count does not depend on how busy the machine is.
#[tokio::test(start_paused = true)]
async fn a_process_that_saw_another_hold_the_key_gives_way_at_every_handoff() {
    for semaphore in [false, true] {
        let (backend, here) = faulty();
        let elsewhere = leasehold_testkit::test_store_from(backend.clone());
        let poll_max = Duration::from_millis(10);
        let opts = LockOptions::new().poll_interval(Duration::from_millis(5), poll_max);
        // Another process holds the key for a moment while this one waits.
        let other = if semaphore {
            let sem = elsewhere.semaphore_with("s", 1, opts.clone()).unwrap();
            either(None, Some(sem.try_acquire().await.unwrap()))
        } else {
            let lock = elsewhere.lock_with("k", opts.clone()).unwrap();
            either(Some(lock.try_acquire().await.unwrap()), None)
        };
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = loopers(&here, 2, (semaphore, Duration::ZERO), &opts, &stop);
        tokio::time::sleep(Duration::from_millis(3)).await;
        other.release().await;
        *backend.long_gap.lock().unwrap() = poll_max;
        // Within 2 s of seeing the other holder: every handoff gives way.
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::SeqCst);
        let (passes, _) = totals(tasks).await;
        let gaps = backend.long_gaps.load(Ordering::SeqCst);
        assert!(
            gaps + 2 >= passes && passes >= 30,
            "{}: {gaps} of {passes} grants came a poll interval after the last release; expected all",
            if semaphore { "semaphore" } else { "lock" },
        );
    }
}

/// A lock guard or a semaphore permit, to release either.
struct Either(
    Option<leasehold::LeaseGuard>,
    Option<leasehold::SemaphorePermit>,
);

fn either(lock: Option<leasehold::LeaseGuard>, sem: Option<leasehold::SemaphorePermit>) -> Either {
    Either(lock, sem)
}

impl Either {
    async fn release(self) {
        if let Some(g) = self.0 {
            g.release().await.unwrap();
        }
        if let Some(p) = self.1 {
            p.release().await.unwrap();
        }
    }
}

/// A key that only one process uses is passed between its tasks without a
/// pause, except once every 10 poll intervals, when the process gives way
/// in case another process waits unseen.
#[tokio::test(start_paused = true)]
async fn a_key_only_one_process_uses_pauses_only_to_probe() {
    for semaphore in [false, true] {
        let (backend, store) = faulty();
        let poll_max = Duration::from_millis(10);
        let opts = LockOptions::new().poll_interval(Duration::from_millis(5), poll_max);
        *backend.long_gap.lock().unwrap() = poll_max;
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = loopers(&store, 4, (semaphore, Duration::ZERO), &opts, &stop);
        // Probes come about every 110 ms: 100 ms of handoffs, 10 ms free.
        tokio::time::sleep(Duration::from_millis(700)).await;
        stop.store(true, Ordering::SeqCst);
        let (passes, _) = totals(tasks).await;
        let gaps = backend.long_gaps.load(Ordering::SeqCst);
        assert!(
            (5..=7).contains(&gaps),
            "{}: the key was left free for a poll interval {gaps} times in 700 ms ({passes} passes); expected once per 100 ms of handoffs",
            if semaphore { "semaphore" } else { "lock" },
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_arrives_after_its_safety_deadline_is_released() {
    let (backend, store) = faulty();
    let ttl = Duration::from_secs(1);
    let lock = store.lock_with("k", LockOptions::new().ttl(ttl)).unwrap();
    // A first, prompt acquisition gets the store's epoch cleared (and its
    // release noticed) before the store turns slow.
    lock.try_acquire().await.unwrap().release().await.unwrap();
    backend.released.notified().await;
    // The store grants at once but answers after TTL − margin (0.9 s).
    *backend.acquire_delay.lock().unwrap() = Duration::from_millis(950);
    let released = || async {
        tokio::time::timeout(Duration::from_secs(3), backend.released.notified())
            .await
            .expect("a late grant was not released");
    };
    let waited = lock.acquire_timeout(Duration::from_millis(500)).await;
    assert!(waited.is_err(), "a grant past the wait is no guard");
    released().await;
    let tried = lock.try_acquire().await;
    assert!(
        tried.is_err(),
        "a grant past its safety deadline is no guard"
    );
    released().await;
    *backend.acquire_delay.lock().unwrap() = Duration::ZERO;
    let guard = lock.try_acquire().await.expect("the key is free again");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_semaphore_grant_is_not_returned_lost() {
    let (backend, store) = faulty();
    let sem = store
        .semaphore_with("s", 1, LockOptions::new().ttl(Duration::from_secs(1)))
        .unwrap();
    // Clear the store's epoch while it is prompt; then it turns slow.
    sem.try_acquire().await.unwrap().release().await.unwrap();
    *backend.acquire_delay.lock().unwrap() = Duration::from_millis(950);
    match sem.try_acquire().await {
        Ok(permit) => panic!(
            "a permit granted past its safety deadline was returned (lost: {})",
            permit.is_lost()
        ),
        Err(e) => assert!(!e.is_lease_lost(), "{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_is_final_even_if_a_renewal_is_answered_after_the_deadline() {
    // The guard's clock is moved by hand; the store's TTL runs in real time
    // and does not run out during the test.
    let backend = Arc::new(Faulty::default());
    let clock = Arc::new(leasehold::backend::ManualClock::new(Duration::from_secs(
        100,
    )));
    let store =
        leasehold_testkit::with_test_window(&Store::with_clock(backend.clone(), clock.clone()));
    let guard = take(&store, "k", LockOptions::new().ttl(Duration::from_secs(10))).await;
    // Deadline: 100 s + 10 s − 1 s. The renewal due at 103.3 s is sent and
    // held in flight.
    backend.hold_renewals.store(true, Ordering::SeqCst);
    clock.advance(Duration::from_secs(4));
    backend.renewal_sent.notified().await;
    // The clock passes the deadline while the renewal is in flight...
    clock.advance(Duration::from_secs(6));
    assert!(guard.is_lost());
    // ... and then the store says yes.
    backend.hold_renewals.store(false, Ordering::SeqCst);
    backend.renewal_gate.notify_one();
    let _ = tokio::time::timeout(Duration::from_secs(2), guard.lost()).await;
    assert!(
        guard.is_lost(),
        "is_lost went back to false after a late renewal"
    );
    assert_eq!(guard.valid_for(), Duration::ZERO);
    assert!(guard.release().await.unwrap_err().is_lease_lost());
}

/// A store that fails every attempt is not a holder: a wait that runs out
/// ends with the store's error (after retrying), for locks and semaphores,
/// and a store that never answers ends the wait on time with an error that
/// says so, not with "held".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_an_unreachable_store_ends_with_the_error_not_timed_out() {
    let (backend, store) = faulty();
    backend.unreachable.store(true, Ordering::SeqCst);
    let wait = Wait::Timeout(Duration::from_millis(600));
    let err = store
        .lock("k")
        .unwrap()
        .acquire_reporting(wait, |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert!(
        err.to_string().contains("injected connection refused"),
        "{err}"
    );
    assert!(
        backend.acquires.load(Ordering::SeqCst) >= 2,
        "retried within the wait"
    );
    let err = store
        .semaphore("s", 2)
        .unwrap()
        .acquire_reporting(wait, |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");

    backend.unreachable.store(false, Ordering::SeqCst);
    backend.silent.store(true, Ordering::SeqCst);
    for err in [
        store
            .lock("k")
            .unwrap()
            .acquire_reporting(wait, |_| {})
            .await
            .unwrap_err(),
        store
            .semaphore("s", 2)
            .unwrap()
            .acquire_reporting(wait, |_| {})
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::Backend { .. }), "{err}");
        assert!(
            err.to_string().contains("did not answer within the wait"),
            "{err}"
        );
    }
}

/// Tasks of one process queued behind the one that polls, on a key another
/// process holds, end with `TimedOut`, even the one let through the queue
/// just before its deadline whose first attempt outlives it: the store
/// answered this process's poller during its wait. (They ended with "the
/// store did not answer within the wait", a store failure, in the
/// benchmarks.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_on_a_held_key_time_out_as_held_not_as_store_failures() {
    let (backend, store) = faulty();
    let other = leasehold_testkit::test_store_from(store.backend().clone());
    let _held = other.lock("k").unwrap().try_acquire().await.unwrap();
    // Each attempt takes 60 ms; the waiters' deadlines are 20 ms apart, so
    // each one after the first is let through the queue 20 ms before its
    // own deadline, inside which its first attempt cannot finish.
    *backend.acquire_delay.lock().unwrap() = Duration::from_millis(60);
    let mut waiters = Vec::new();
    for i in 0..4u64 {
        let lock = store.lock("k").unwrap();
        waiters.push(tokio::spawn(async move {
            lock.acquire_timeout(Duration::from_millis(300 + 20 * i))
                .await
        }));
        tokio::task::yield_now().await;
    }
    for (i, w) in waiters.into_iter().enumerate() {
        let err = w.await.unwrap().unwrap_err();
        assert!(matches!(err, Error::TimedOut { .. }), "waiter {i}: {err}");
    }
}

/// Tasks of one process that all wait until the same deadline on a key
/// another process holds cost the store what one such task costs. Each is
/// let through the local queue as the one before it gives up, at the
/// deadline they share, and must not start an attempt then, whose answer
/// nobody would wait for. (Each did, so a process with 64 waiting tasks
/// sent twice the requests of one with a single task: docs/benchmarks.md,
/// figure 2, PostgreSQL.) The poll interval is longer than the wait, so one
/// waiter sends exactly one attempt (its first), however busy the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_sharing_a_deadline_send_what_one_waiter_sends() {
    /// Attempts sent by `tasks` tasks of one store waiting until the same
    /// instant, 200 ms from now, on a key held by another store.
    async fn attempts(tasks: usize, semaphore: bool) -> u32 {
        let (backend, here) = faulty();
        let elsewhere = leasehold_testkit::test_store_from(backend.clone());
        let poll = Duration::from_secs(10);
        let opts = LockOptions::new().poll_interval(poll, poll);
        let _held = if semaphore {
            let sem = elsewhere.semaphore_with("s", 1, opts.clone()).unwrap();
            either(None, Some(sem.try_acquire().await.unwrap()))
        } else {
            let lock = elsewhere.lock_with("k", opts.clone()).unwrap();
            either(Some(lock.try_acquire().await.unwrap()), None)
        };
        // This store learns the store's epoch (one more request) first.
        drop(here.lock("warm-up").unwrap().try_acquire().await.unwrap());
        let before = backend.acquires.load(Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
        let waiters: Vec<_> = (0..tasks)
            .map(|_| {
                let here = here.clone();
                let opts = opts.clone();
                tokio::spawn(async move {
                    let wait = Wait::Timeout(deadline - tokio::time::Instant::now());
                    if semaphore {
                        let sem = here.semaphore_with("s", 1, opts).unwrap();
                        sem.acquire_reporting(wait, |_| {}).await.map(drop)
                    } else {
                        let lock = here.lock_with("k", opts).unwrap();
                        lock.acquire_reporting(wait, |_| {}).await.map(drop)
                    }
                })
            })
            .collect();
        for w in waiters {
            let err = w.await.unwrap().unwrap_err();
            assert!(matches!(err, Error::TimedOut { .. }), "{err}");
        }
        backend.acquires.load(Ordering::SeqCst) - before
    }
    for semaphore in [false, true] {
        let what = if semaphore { "semaphore" } else { "lock" };
        let one = attempts(1, semaphore).await;
        let many = attempts(64, semaphore).await;
        assert!(
            many <= one + 1,
            "{what}: 64 waiting tasks sent {many} attempts, one sent {one}"
        );
    }
}

/// A task let through the local queue after its wait ran out (the task
/// before it gave up as late as it, or was dropped, on a busy runtime)
/// gives up too, without an attempt whose answer nobody would wait for.
/// On tokio's paused clock, so that the order of events is fixed.
#[tokio::test(start_paused = true)]
async fn a_waiter_let_through_the_queue_after_its_deadline_sends_nothing() {
    let (backend, here) = faulty();
    let elsewhere = leasehold_testkit::test_store_from(backend.clone());
    let _held = elsewhere.lock("k").unwrap().try_acquire().await.unwrap();
    // This store learns the store's epoch (one more request) first.
    drop(here.lock("warm-up").unwrap().try_acquire().await.unwrap());
    let lock = here.lock("k").unwrap();
    let before = backend.acquires.load(Ordering::SeqCst);
    let poller = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await.map(drop) })
    };
    // The poller has the queue once it has sent its first attempt.
    while backend.acquires.load(Ordering::SeqCst) == before {
        tokio::task::yield_now().await;
    }
    let polled = backend.acquires.load(Ordering::SeqCst);
    let queued = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(1)).await.map(drop) })
    };
    tokio::task::yield_now().await;
    // The poller goes, and the queued task's turn comes after its deadline.
    poller.abort();
    tokio::time::advance(Duration::from_secs(2)).await;
    let err = queued.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err}");
    assert_eq!(
        backend.acquires.load(Ordering::SeqCst),
        polled,
        "the task let through after its deadline sent an attempt"
    );
}

/// A wait longer than the clock can represent is a wait for ever, not a
/// panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_wait_is_forever_not_an_overflow() {
    let (_backend, store) = faulty();
    let huge = Wait::Timeout(Duration::from_secs(u64::MAX));
    let guard = store
        .lock("k")
        .unwrap()
        .acquire_reporting(huge, |_| {})
        .await
        .unwrap();
    let other = leasehold_testkit::test_store_from(store.backend().clone());
    let waiting = other.lock("k").unwrap();
    let waiter = tokio::spawn(async move {
        waiting
            .acquire_reporting(huge, |_| {})
            .await
            .map(|g| g.fencing_token())
    });
    let sem = store.semaphore("s", 1).unwrap();
    let permit = sem.acquire_reporting(huge, |_| {}).await.unwrap();
    guard.release().await.unwrap();
    assert!(waiter.await.unwrap().unwrap() >= 2);
    permit.release().await.unwrap();
}

/// A `try_acquire` that finds the key held by a guard of its own process
/// is no sign of another process: the local waiter that takes over from
/// that guard's release does so at once, without giving way.
#[tokio::test(start_paused = true)]
async fn a_try_acquire_told_of_a_local_guard_does_not_make_waiters_give_way() {
    let (backend, store) = faulty();
    let opts =
        LockOptions::new().poll_interval(Duration::from_millis(5), Duration::from_millis(10));
    let lock = store.lock_with("k", opts).unwrap();
    let held = lock.try_acquire().await.unwrap();
    assert!(matches!(lock.try_acquire().await, Err(Error::Held { .. })));
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire().await.unwrap() })
    };
    tokio::task::yield_now().await;
    *backend.long_gap.lock().unwrap() = Duration::from_millis(1);
    held.release().await.unwrap();
    let next = waiter.await.unwrap();
    assert_eq!(
        backend.long_gaps.load(Ordering::SeqCst),
        0,
        "the local waiter gave way after its own process's release"
    );
    next.release().await.unwrap();
}

/// A wait shorter than the store's round trip, on a key another process
/// holds, ends with `TimedOut` when the store answered this process on the
/// key just before: it is slow, not unreachable. (It ended with "the store
/// did not answer within the wait" in the benchmarks, for a task whose turn
/// came 11 ms before the end of the run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_shorter_than_a_round_trip_on_a_held_key_times_out() {
    let (backend, store) = faulty();
    let other = leasehold_testkit::test_store_from(store.backend().clone());
    let _held = other.lock("k").unwrap().try_acquire().await.unwrap();
    let lock = store.lock("k").unwrap();
    let err = lock.try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::Held { .. }), "{err}");
    *backend.acquire_delay.lock().unwrap() = Duration::from_millis(60);
    let err = lock
        .acquire_timeout(Duration::from_millis(10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err}");
}

/// An acquisition that finds the key free never asks the backend for a
/// release watch (a backend's watcher would hear every release of this
/// process); a waiter that finds it held does.
#[tokio::test(start_paused = true)]
async fn only_a_waiter_that_found_the_key_held_watches_for_releases() {
    let (backend, store) = faulty();
    backend.watchable.store(true, Ordering::SeqCst);
    let lock = store.lock("k").unwrap();
    for _ in 0..5 {
        let guard = lock.acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    assert_eq!(backend.watches.load(Ordering::SeqCst), 0);

    let other = leasehold_testkit::test_store_from(store.backend().clone());
    let _held = other.lock("k").unwrap().try_acquire().await.unwrap();
    let err = lock
        .acquire_timeout(Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err}");
    assert!(backend.watches.load(Ordering::SeqCst) >= 1);
}

/// A waiter starts watching for releases only after its first round found
/// the key held; a release in between is not missed: it asks once more at
/// once, instead of sleeping until its next poll.
#[tokio::test(start_paused = true)]
async fn a_release_before_the_watch_is_registered_is_not_missed() {
    let (backend, store) = faulty();
    backend.watchable.store(true, Ordering::SeqCst);
    let other = leasehold_testkit::test_store_from(store.backend().clone());
    let _held = other.lock("k").unwrap().try_acquire().await.unwrap();
    backend.free_after_held.store(true, Ordering::SeqCst);
    let slow_polls =
        LockOptions::new().poll_interval(Duration::from_secs(10), Duration::from_secs(10));
    let lock = store.lock_with("k", slow_polls).unwrap();
    let started = tokio::time::Instant::now();
    let guard = lock.acquire_timeout(Duration::from_secs(5)).await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO);
    guard.release().await.unwrap();
}

/// A guard's renewal task starts when its first renewal is due, not at the
/// grant: holding many leases briefly spawns no task per lease, and a lease
/// held longer is renewed all the same.
#[tokio::test(start_paused = true)]
async fn renewal_tasks_start_when_the_first_renewal_is_due() {
    let (backend, store) = faulty_on_tokio_time();
    let opts = LockOptions::new().ttl(Duration::from_secs(3));
    let first = store
        .lock_with("k0", opts.clone())
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let mut guards = Vec::new();
    for i in 1..100 {
        let lock = store.lock_with(&format!("k{i}"), opts.clone()).unwrap();
        guards.push(lock.acquire().await.unwrap());
    }
    assert_eq!(
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        tasks,
        "a task per lease before its first renewal"
    );
    assert_eq!(backend.renewals.load(Ordering::SeqCst), 0);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!first.is_lost() && guards.iter().all(|g| !g.is_lost()));
    assert!(backend.renewals.load(Ordering::SeqCst) >= 200);
    for g in guards {
        g.release().await.unwrap();
    }
    first.release().await.unwrap();
}

/// Renewal loops are started on the runtime that granted the lease: a
/// store used from a second runtime after the first shut down still
/// renews its leases.
#[test]
fn leases_are_renewed_on_a_runtime_started_after_another_shut_down() {
    let (backend, store) = faulty_on_tokio_time();
    let opts = LockOptions::new().ttl(Duration::from_secs(3));
    let lock = store.lock_with("k", opts).unwrap();
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    paused().block_on(async {
        let guard = lock.acquire().await.unwrap();
        guard.release().await.unwrap();
    });
    paused().block_on(async {
        let guard = lock.acquire().await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!guard.is_lost());
        assert!(backend.renewals.load(Ordering::SeqCst) >= 2);
        guard.release().await.unwrap();
    });
}

/// A zero wait is one attempt, as `try_acquire` makes, not a wait that has
/// run out before it sends anything: a free key is taken; a held one costs
/// one attempt and ends the wait, with the reason reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_wait_is_one_whole_attempt() {
    let (backend, store) = faulty();
    let lock = store.lock("k").unwrap();
    // Free: taken, as try_acquire would.
    let guard = lock.acquire_timeout(Duration::ZERO).await.unwrap();
    // Held: one attempt, then the wait has run out.
    let other = store.lock("k").unwrap();
    let before = backend.acquires.load(Ordering::SeqCst);
    let mut told = 0;
    let err = other
        .acquire_reporting(Duration::ZERO, |_| told += 1)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
    assert_eq!(backend.acquires.load(Ordering::SeqCst), before + 1);
    assert_eq!(told, 1, "the caller hears why");
    guard.release().await.unwrap();
}

/// A store whose guards time their deadlines on a clock moved by hand, as
/// `CLOCK_BOOTTIME` moves across a suspend: it jumps while tokio's clock
/// (monotonic, which stands still in a suspend) does not. The store's own
/// TTL runs in real time and does not run out during these tests.
fn faulty_on_a_manual_clock() -> (Arc<Faulty>, Arc<leasehold::backend::ManualClock>, Store) {
    let backend = Arc::new(Faulty::default());
    let clock = Arc::new(leasehold::backend::ManualClock::new(Duration::from_secs(
        100,
    )));
    let store =
        leasehold_testkit::with_test_window(&Store::with_clock(backend.clone(), clock.clone()));
    (backend, clock, store)
}

/// How long a loss may take to be noticed once the clock is past the
/// deadline: far less than the renew interval (20 s at a 60 s TTL), which
/// is how late a timer on tokio's clock would act.
const PROMPTLY: Duration = Duration::from_secs(3);

/// A suspend longer than the lease, before its first renewal (its renewal
/// task still waits in the scheduler's queue): on resume the loss is
/// signalled at once, not a renew interval of tokio's clock later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspend_before_the_first_renewal_is_noticed_on_resume() {
    let (backend, clock, store) = faulty_on_a_manual_clock();
    let opts = LockOptions::new().ttl(Duration::from_secs(60));
    let guard = take(&store, "k", opts).await;
    assert!(!guard.is_lost());
    // Deadline: 100 s + 60 s − 6 s; the first renewal is due at 120 s.
    clock.advance(Duration::from_secs(120));
    let reason = tokio::time::timeout(PROMPTLY, guard.lost())
        .await
        .expect("the loss was not signalled on resume");
    assert_eq!(reason, LossReason::Expired);
    assert_eq!(backend.renewals.load(Ordering::SeqCst), 0);
    assert!(guard.release().await.unwrap_err().is_lease_lost());
}

/// The same with the renewal task started and asleep until its next
/// renewal: the first renewal falls due on the lease's clock (and is made
/// at once), then a suspend longer than the lease is noticed on resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspend_between_renewals_is_noticed_on_resume() {
    let (backend, clock, store) = faulty_on_a_manual_clock();
    let opts = LockOptions::new().ttl(Duration::from_secs(60));
    let guard = take(&store, "k", opts).await;
    let mut deadlines = guard.deadline_watch();
    // Past the first renewal (due at 120 s), well before the deadline.
    clock.advance(Duration::from_secs(21));
    tokio::time::timeout(PROMPTLY, deadlines.changed())
        .await
        .expect("the renewal due on the lease's clock was not made")
        .unwrap();
    assert_eq!(backend.renewals.load(Ordering::SeqCst), 1);
    assert_eq!(*deadlines.borrow(), Duration::from_secs(121 + 54));
    // Asleep until the next renewal (141 s); the machine sleeps past the
    // new deadline (175 s).
    clock.advance(Duration::from_secs(120));
    let reason = tokio::time::timeout(PROMPTLY, guard.lost())
        .await
        .expect("the loss was not signalled on resume");
    assert_eq!(reason, LossReason::Expired);
    assert!(guard.release().await.unwrap_err().is_lease_lost());
}

/// A renewal in flight when the machine sleeps, whose answer never comes:
/// the guard is lost at the deadline on the lease's clock, not when a
/// timeout on tokio's clock runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspend_during_a_renewal_is_noticed_on_resume() {
    let (backend, clock, store) = faulty_on_a_manual_clock();
    let opts = LockOptions::new().ttl(Duration::from_secs(60));
    let guard = take(&store, "k", opts).await;
    backend.hold_renewals.store(true, Ordering::SeqCst);
    let sent = backend.renewal_sent.notified();
    clock.advance(Duration::from_secs(21));
    tokio::time::timeout(PROMPTLY, sent)
        .await
        .expect("the renewal due on the lease's clock was not sent");
    clock.advance(Duration::from_secs(120));
    let reason = tokio::time::timeout(PROMPTLY, guard.lost())
        .await
        .expect("the loss was not signalled on resume");
    assert_eq!(reason, LossReason::Expired);
    backend.renewal_gate.notify_one();
    assert!(guard.release().await.unwrap_err().is_lease_lost());
}

/// The scheduler waits on each clock its queued leases are timed on: a
/// lease on the system clock queued first (due much later) does not keep
/// the scheduler from noticing that one on another clock fell due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspend_is_noticed_with_leases_on_other_clocks_queued() {
    let (_, system) = faulty();
    let (_, clock, store) = faulty_on_a_manual_clock();
    let opts = LockOptions::new().ttl(Duration::from_secs(60));
    let steady = system.lock_with("k", opts.clone()).unwrap();
    let steady = steady.try_acquire().await.unwrap();
    let guard = take(&store, "k", opts).await;
    clock.advance(Duration::from_secs(120));
    tokio::time::timeout(PROMPTLY, guard.lost())
        .await
        .expect("the loss was not signalled on resume");
    assert!(!steady.is_lost());
    steady.release().await.unwrap();
    assert!(guard.release().await.unwrap_err().is_lease_lost());
}

/// A grant that says part of its TTL had already run out at the send (the
/// key hangs on a lease granted earlier: etcd's sessions) leaves its holder
/// that much less: the safety deadline counts from then, so the holder
/// never trusts the key longer than the store keeps it.
#[tokio::test(start_paused = true)]
async fn a_grant_whose_ttl_had_partly_run_shortens_the_holders_deadline() {
    let (backend, store) = faulty_on_tokio_time();
    // The store's clock starts at zero: past the part that ran first.
    tokio::time::advance(Duration::from_secs(60)).await;
    let ttl = Duration::from_secs(10);
    let opts = LockOptions::new().ttl(ttl);
    let fresh = take(&store, "fresh", opts.clone()).await;
    *backend.ran.lock().unwrap() = Duration::from_secs(3);
    let shared = take(&store, "shared", opts).await;
    // Paused time: both were granted at the same instant.
    assert_eq!(
        fresh.valid_for() - shared.valid_for(),
        Duration::from_secs(3),
        "the grant's TTL that had run out was not taken off its deadline"
    );
    assert!(shared.valid_for() <= ttl - Duration::from_secs(3));
    fresh.release().await.unwrap();
    shared.release().await.unwrap();
}

/// The same for a renewal: one that says part of the TTL had already run
/// out (`Backend::renew_ran`: etcd moves the key onto a lease granted
/// shortly before) moves the holder's deadline that much less far.
#[tokio::test(start_paused = true)]
async fn a_renewal_whose_ttl_had_partly_run_moves_the_deadline_less_far() {
    let (backend, store) = faulty_on_tokio_time();
    tokio::time::advance(Duration::from_secs(60)).await;
    let ttl = Duration::from_secs(9);
    let guard = take(&store, "k", LockOptions::new().ttl(ttl)).await;
    let fresh = guard.valid_for();
    *backend.renewal_ran.lock().unwrap() = Duration::from_secs(2);
    let mut deadline = guard.deadline_watch();
    let before = backend.renewals.load(Ordering::SeqCst);
    // Paused time: the first renewal (a third of the TTL in) is answered
    // at once, at its send.
    while backend.renewals.load(Ordering::SeqCst) == before {
        deadline.changed().await.unwrap();
    }
    assert_eq!(
        guard.valid_for(),
        fresh - Duration::from_secs(2),
        "the renewal's TTL that had run out was not taken off the deadline"
    );
    guard.release().await.unwrap();
}

/// A wait shorter than one answer of the store is still one whole attempt,
/// as a zero wait is: a free key is granted, a held one is `TimedOut`. (A
/// `--wait 1ms` on a free key ended "the store did not answer within the
/// wait", a store failure, on SQLite and PostgreSQL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_shorter_than_one_answer_still_gets_the_answer() {
    let (backend, store) = faulty();
    let lock = store.lock("k").unwrap();
    // Clear the store's epoch while it is prompt; then it turns slow.
    lock.try_acquire().await.unwrap().release().await.unwrap();
    *backend.acquire_delay.lock().unwrap() = Duration::from_millis(50);
    let guard = lock
        .acquire_timeout(Duration::from_millis(1))
        .await
        .expect("a free key, answered after the wait ran out, is granted");
    let err = leasehold_testkit::test_store_from(store.backend().clone())
        .lock("k")
        .unwrap()
        .acquire_timeout(Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err}");
    guard.release().await.unwrap();
    let sem = store.semaphore("s", 1).unwrap();
    let permit = sem
        .acquire_timeout(Duration::from_millis(1))
        .await
        .expect("a free permit, answered after the wait ran out, is granted");
    permit.release().await.unwrap();
}

/// Two stores (two processes) on one [`Faulty`] memory backend, the
/// backend's leases and both stores' guards on tokio's paused clock.
fn two_processes_on_tokio_time() -> (Arc<Faulty>, Store, Store) {
    let clock = Arc::new(TokioClock(tokio::time::Instant::now()));
    let backend = Arc::new(Faulty {
        inner: leasehold::memory::MemoryBackend::with_clock(clock.clone()),
        ..Faulty::default()
    });
    let store =
        || leasehold_testkit::with_test_window(&Store::with_clock(backend.clone(), clock.clone()));
    let (here, elsewhere) = (store(), store());
    (backend, here, elsewhere)
}

/// A wait on a store that cannot tell of releases by other processes (a
/// pay-per-request store's case) polls quickly for its first 2 s, then,
/// while the same holder keeps the key, backs off to a pause of 1-2 s (the
/// default cap): over a 10-minute wait about 430 requests instead of about
/// 8,000, and the key is still taken within the cap of its release.
#[tokio::test(start_paused = true)]
async fn a_long_wait_backs_off_to_a_request_every_one_to_two_seconds() {
    let (backend, holder_side, waiter_side) = two_processes_on_tokio_time();
    let holder = take(&holder_side, "k", LockOptions::new()).await;
    let lock = waiter_side.lock("k").unwrap();
    let before = backend.acquires.load(Ordering::SeqCst);
    let waiting = tokio::spawn(async move {
        let g = lock.acquire().await.unwrap();
        (g, tokio::time::Instant::now())
    });
    let wait = Duration::from_secs(600);
    tokio::time::sleep(wait).await;
    let polls = backend.acquires.load(Ordering::SeqCst) - before;
    assert!(
        (300..=600).contains(&polls),
        "{polls} requests in a wait of {wait:?}: expected about 30 in the first 2 s, then one every 1-2 s"
    );
    let released = tokio::time::Instant::now();
    holder.release().await.unwrap();
    let (_g, taken) = waiting.await.unwrap();
    let after = taken - released;
    assert!(
        after <= leasehold::DEFAULT_POLL_CAP + Duration::from_millis(50),
        "taken {after:?} after the release; the cap is {:?}",
        leasehold::DEFAULT_POLL_CAP
    );
}

/// A wait that has backed off asks again right when the holder's lease
/// runs out by the store's account (here the holder is cut off and never
/// renews, as a dead one would): the key is taken within a moment of its
/// expiry, not up to a cap (10 s here) later.
#[tokio::test(start_paused = true)]
async fn a_backed_off_wait_takes_a_dead_holders_key_as_its_lease_runs_out() {
    let (backend, holder_side, waiter_side) = two_processes_on_tokio_time();
    let ttl = Duration::from_secs(20);
    let _holder = take(&holder_side, "k", LockOptions::new().ttl(ttl)).await;
    let granted = tokio::time::Instant::now();
    backend.partitioned.store(true, Ordering::SeqCst);
    let lock = waiter_side
        .lock_with("k", LockOptions::new().poll_cap(Duration::from_secs(10)))
        .unwrap();
    let g = lock.acquire().await.unwrap();
    let expired = granted + ttl;
    let late = tokio::time::Instant::now().saturating_duration_since(expired);
    assert!(
        late <= Duration::from_millis(150),
        "taken {late:?} after the dead holder's lease ran out (cap 10 s)"
    );
    assert!(g.fencing_token() > 1);
}

/// A cap shorter than the poll interval's max is refused, naming both.
#[test]
fn a_poll_cap_below_the_poll_interval_is_refused() {
    let store = leasehold_testkit::test_store_from(Arc::new(Faulty::default()));
    let err = store
        .lock_with(
            "k",
            LockOptions::new()
                .poll_interval(Duration::from_millis(50), Duration::from_millis(500))
                .poll_cap(Duration::from_millis(200)),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("poll cap") && err.contains("200ms") && err.contains("500ms"),
        "{err}"
    );
}
