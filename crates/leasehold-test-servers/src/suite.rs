//! Tests every server store runs, written once: a holder over lost
//! connections, a quick restart and a long outage of its server, expiry
//! decided by the server's clock, and a password kept out of messages.
//! Each is a function that takes the stores (and what breaks the server,
//! the store's own way) and panics on a violation; a store's test files
//! call them from their `#[tokio::test]`s.

use std::future::Future;
use std::time::{Duration, Instant};

use super::store::ServerStore;
use super::unique_name;
use leasehold::backend::{Backend, StoreEpoch};
use leasehold::Key;
use leasehold::LeaseGuard;
use leasehold::LockOptions;
use leasehold::Store;
use leasehold::{Error, LossReason};
use leasehold_testkit::{test_store, test_store_from};

/// Lock options with `ttl` and polls 20-60 ms apart.
pub fn quick_polls(ttl: Duration) -> LockOptions {
    LockOptions::new()
        .ttl(ttl)
        .poll_interval(Duration::from_millis(20), Duration::from_millis(60))
}

/// Every connection of the holder's client lost, `cuts` times over twice
/// its TTL (`cut` loses them, and checks that it did): the holder's next
/// renewals reconnect, it keeps its lease past its TTL, and `other` does
/// not get the key meanwhile; once it is released, `other` does, with a
/// greater token.
pub async fn holder_survives_lost_connections<F, Fut>(
    store: Store,
    other: Store,
    ttl: Duration,
    cuts: u32,
    mut cut: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let key = unique_name("conn-loss/");
    let guard = leasehold_testkit::conformance::take(
        &store,
        &key,
        quick_polls(ttl).renew_interval(ttl / 5),
    )
    .await;
    for _ in 0..cuts {
        cut().await;
        // Longer than the TTL in all: only renewals over new connections
        // keep it.
        tokio::time::sleep(ttl * 2 / cuts).await;
    }
    assert!(
        !guard.is_lost(),
        "the holder lost its lease to a connection loss"
    );
    assert_held(&other, &key, quick_polls(ttl)).await;
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let g2 = leasehold_testkit::conformance::take(&other, &key, quick_polls(ttl)).await;
    assert!(g2.fencing_token() > token);
    g2.release().await.unwrap();
}

/// Two stores, over a backend `open` opens each: as two processes on the
/// same store would have.
pub async fn two_stores<B: Backend, F: Future<Output = B>>(open: impl Fn() -> F) -> (Store, Store) {
    (test_store(open().await), test_store(open().await))
}

/// `store`'s one attempt at `key` with `options` is refused: it is held.
async fn assert_held(store: &Store, key: &str, options: LockOptions) {
    let attempt = store.lock_with(key, options).unwrap().try_acquire().await;
    assert!(matches!(attempt, Err(Error::Held { .. })), "{attempt:?}");
}

/// Lock options for the restart tests: `ttl`, renewed 8 times a TTL.
pub fn restart_opts(ttl: Duration) -> LockOptions {
    quick_polls(ttl).renew_interval(ttl / 8)
}

/// `holder`'s lock on `key` with [`restart_opts`], acquired.
pub async fn hold(holder: &Store, key: &str, ttl: Duration) -> LeaseGuard {
    holder
        .lock_with(key, restart_opts(ttl))
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap()
}

/// A quick restart of the server (`restart`, shorter than the TTL) under
/// the holder of `guard` on `key` ([`hold`]): the holder renews over new
/// connections and keeps its lease; `other` is not granted the key
/// meanwhile.
pub async fn holder_survives_a_quick_restart(
    guard: &LeaseGuard,
    other: &Store,
    key: &str,
    ttl: Duration,
    restart: impl Future<Output = ()>,
) {
    let started = Instant::now();
    restart.await;
    let took = started.elapsed();
    // Past the TTL since the restart began: only renewals after it count.
    tokio::time::sleep((ttl + Duration::from_millis(500)).saturating_sub(took)).await;
    assert!(
        !guard.is_lost(),
        "the holder lost its lease over a restart of {took:?} (TTL {ttl:?})"
    );
    assert_held(other, key, restart_opts(ttl)).await;
}

/// A long outage (`stop`, then `start` once the holder was told lost)
/// under the holder of `guard` on `key` ([`hold`]), `other` waiting for the
/// key: the holder is told lost by its own clock, and only then, once the
/// server is back, does `other` get the key, with a greater token.
pub async fn long_outage_tells_the_holder_first<S, Fut>(
    guard: LeaseGuard,
    other: &Store,
    key: &str,
    ttl: Duration,
    stop: impl Future<Output = ()>,
    start: S,
) where
    S: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let first = guard.fencing_token();
    assert_held(other, key, restart_opts(ttl)).await;
    let waiter = tokio::spawn({
        let other = other.clone();
        let key = key.to_string();
        async move {
            other
                .lock_with(&key, restart_opts(ttl))
                .unwrap()
                .acquire_timeout(Duration::from_secs(60))
                .await
                .map(|g| (Instant::now(), g))
        }
    });
    stop.await;
    let reason = tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("the holder was not told lost during a long outage");
    assert_eq!(reason, LossReason::Expired);
    let lost_at = Instant::now();
    // The waiter can only be granted once the server is back, after the
    // holder was told lost.
    start().await;
    let (granted_at, g2) = waiter.await.unwrap().unwrap();
    assert!(granted_at > lost_at);
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}

/// What [`expiry_is_decided_by_the_server_clock`] asks the server to write
/// as a lease's expiry, by the server's own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerExpiry {
    /// A millisecond ago: as if the server's clock had run ahead.
    JustPast,
    /// An hour from now: as if the server's clock stood still.
    InAnHour,
}

/// Expiry is decided by the server's clock alone: a lease whose expiry
/// the server finds past is free at once, whatever the TTL the client
/// asked for; one the server finds in the future stays held past its TTL
/// by any client's clock. `set_expiry(key, when)` writes the key's
/// expiry on the server, as an administrator would; `a` and `b` are two
/// backends on one store.
pub async fn expiry_is_decided_by_the_server_clock<B, F, Fut>(a: B, b: B, mut set_expiry: F)
where
    B: Backend,
    F: FnMut(String, ServerExpiry) -> Fut,
    Fut: Future<Output = ()>,
{
    let ttl = Duration::from_secs(4);
    let key = unique_name("server-clock/");
    let lease = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    // As if the server's clock had run 4 s ahead: expired now.
    set_expiry(key.clone(), ServerExpiry::JustPast).await;
    let info = b.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert!(info.holder.is_none(), "{info:?}");
    let taken = leasehold_testkit::conformance::raw_lease(&b, &key, ttl).await;
    assert!(taken.fencing_token > lease.fencing_token);
    let err = a.renew(&lease).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");

    // As if the server's clock stood still: held long after the TTL.
    let key = unique_name("server-clock/");
    let lease = leasehold_testkit::conformance::raw_lease(&a, &key, Duration::from_secs(1)).await;
    set_expiry(key.clone(), ServerExpiry::InAnHour).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let store_b = test_store(b);
    assert_held(&store_b, &key, quick_polls(Duration::from_secs(1))).await;
    let info = store_b.inspect(&key).await.unwrap();
    let left = info.holder.unwrap().expires_in.unwrap();
    assert!(left > Duration::from_secs(3000), "{left:?}");
    a.release(&lease).await.unwrap();
}

/// The password of `url` (which must have one) shows nowhere: not in the
/// `Debug` of `backend` (opened on `url`) or of the builder, not in the
/// error of a login with a wrong one, not in the error of a URL with the
/// wrong one and `bad_param` (`&x=nope`), which the store refuses. Returns
/// the refused login's error (and the password) for the store's own
/// checks.
pub async fn password_is_never_printed<S: ServerStore>(
    backend: &S::Backend,
    url: &str,
    bad_param: &str,
) -> (Error, String) {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, pw)| pw.to_string())
        .expect("the test URL has a password");
    let shown = format!("{backend:?} {:?}", S::from_url(url).unwrap());
    assert!(!shown.contains(&password), "{shown}");

    let wrong = "Wr0ng-pa55word-in-url";
    let bad_url = url.replacen(&password, wrong, 1);
    let err = S::build(S::from_url(&bad_url).unwrap()).await.unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(matches!(err, Error::Backend { .. }), "{shown}");
    assert!(!shown.contains(wrong), "{shown}");
    let refused = S::from_url(&format!("{bad_url}{bad_param}")).unwrap_err();
    assert!(
        !format!("{refused} {refused:?}").contains(wrong),
        "{refused}"
    );
    (err, password)
}

/// After the store was replaced under a lease with token `above` (its
/// epoch `before`, now `after` as `backend` reads it): `after` is a newer
/// epoch, still in its quarantine, and `key`, asked of `backend` through
/// the core (TTL `ttl`, waiting up to `wait`), is granted with a greater
/// token.
pub async fn new_epoch_grants_above<B: Backend>(
    backend: B,
    key: &str,
    (before, after): (&StoreEpoch, &StoreEpoch),
    ttl: Duration,
    wait: Duration,
    above: u64,
) {
    assert!(after.epoch > before.epoch, "{after:?} vs {before:?}");
    assert!(after.age.unwrap() < after.max_ttl, "{after:?}");
    let guard = test_store(backend)
        .lock_with(key, quick_polls(ttl))
        .unwrap()
        .acquire_timeout(wait)
        .await
        .unwrap();
    assert!(
        guard.fencing_token() > above,
        "token {} in the new epoch is not above {above}",
        guard.fencing_token()
    );
    guard.release().await.unwrap();
}

/// When the holder of a restored table's lease is told it is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreTold {
    /// At its next renewal, before anyone asks for a lease (its renewal
    /// checks the table's identity).
    AtItsRenewal,
    /// Once the next acquirer has started a new epoch, which voids every
    /// lease (its renewal does not check the table's identity).
    AfterTheNextAcquire,
}

/// A table restored from a dump (`restore` copies the table `S` keeps its
/// store in, `table`, into a new one under the same name, as loading a
/// dump does) is a new store: the holder of a lease in it is told lost
/// (`told` says when), a raw acquire in the old epoch is refused and
/// starts a new one, and through the core the key is granted after the
/// quarantine with a token above every earlier one.
pub async fn restored_table_starts_a_new_epoch<S: ServerStore, Fut>(
    table: &str,
    restore: impl FnOnce() -> Fut,
    told: RestoreTold,
) where
    Fut: Future<Output = ()>,
{
    let open = || async {
        S::build(S::builder_for(table).expect("a test server"))
            .await
            .expect("open")
    };
    let a = open().await;
    S::settled(&a).await;
    let before = S::epoch(&a).await.unwrap();
    let key = unique_name("restored/");
    let ttl = Duration::from_secs(2);
    let holder = test_store(a)
        .lock_with(&key, quick_polls(ttl).renew_interval(ttl / 5))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let first = holder.fencing_token();
    restore().await;
    if told == RestoreTold::AtItsRenewal {
        told_lost(&holder, ttl * 2).await;
    }
    let b = open().await;
    let req = leasehold_testkit::conformance::acquire_request(&key, ttl, Some(before.epoch));
    let outcome = b.try_acquire(&req).await.unwrap();
    let leasehold::backend::AcquireOutcome::OtherEpoch(after) = outcome else {
        panic!("granted on restored data: {outcome:?}");
    };
    told_lost(&holder, ttl * 2).await;
    new_epoch_grants_above(b, &key, (&before, &after), ttl, S::MAX_TTL * 3, first).await;
}

/// The holder of `guard` is told its lease was revoked within `within`.
async fn told_lost(guard: &LeaseGuard, within: Duration) {
    let reason = tokio::time::timeout(within, guard.lost())
        .await
        .expect("the holder was not told lost");
    assert!(matches!(reason, LossReason::Revoked(_)), "{reason:?}");
}

/// Opening `S`'s backend on `url(port)`, a port where nothing listens,
/// with a request timeout of a second: a retryable error, within `within`.
/// Returns the error for the store's own checks.
pub async fn unreachable_server_fails_retryably<S: ServerStore>(
    url: impl FnOnce(u16) -> String,
    within: Duration,
) -> Error {
    let url = url(super::free_port());
    let started = Instant::now();
    let builder = S::request_timeout(S::from_url(&url).unwrap(), Duration::from_secs(1));
    let err = S::build(builder).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(started.elapsed() < within, "{err}");
    err
}

/// The token of a grant of key `k` to `store` (TTL 2 s, waiting up to
/// 20 s: longer than a new epoch's quarantine on the test servers),
/// released at once.
pub async fn next_token(store: &Store) -> u64 {
    let lock = store
        .lock_with("k", LockOptions::new().ttl(Duration::from_secs(2)))
        .unwrap();
    let guard = lock
        .acquire_timeout(Duration::from_secs(20))
        .await
        .expect("granted");
    let token = guard.fencing_token();
    guard.release().await.expect("released");
    token
}

/// Whether `err` says the lease was revoked (taken over, broken, or never
/// this lease's), not expired; panics if not.
pub fn assert_revoked(err: Error) {
    assert!(
        matches!(
            &err,
            Error::LeaseLost {
                reason: LossReason::Revoked(_),
                ..
            }
        ),
        "{err}"
    );
}

/// Request counts on `backend` (`requests_sent` reads its counter): an
/// uncontended acquire and release of a key this process released last
/// costs `acquire_release` requests; a failed try-acquire costs one and
/// names the holder, its label, data, pid, token and TTL.
pub async fn request_counts<B: Backend>(
    backend: std::sync::Arc<B>,
    requests_sent: impl Fn(&B) -> u64,
    ttl: Duration,
    acquire_release: u64,
) {
    let store = test_store_from(backend.clone());
    let other = test_store_from(backend.clone());
    let key = unique_name("count/");
    // The key's first grant creates its record (and may read more).
    let warm = leasehold_testkit::conformance::raw_lease(backend.as_ref(), &key, ttl).await;
    backend.release(&warm).await.unwrap();

    let before = requests_sent(&backend);
    let guard = leasehold_testkit::conformance::take(&store, &key, quick_polls(ttl)).await;
    guard.release().await.unwrap();
    assert_eq!(
        requests_sent(&backend) - before,
        acquire_release,
        "acquire + release"
    );

    let labelled = quick_polls(ttl).owner_label("counter").data("d1");
    let guard = leasehold_testkit::conformance::take(&store, &key, labelled).await;
    let before = requests_sent(&backend);
    let err = other
        .lock_with(&key, quick_polls(ttl))
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(requests_sent(&backend) - before, 1, "failed try-acquire");
    match err {
        Error::Held {
            holder: Some(h), ..
        } => {
            assert_eq!(h.owner.label.as_deref(), Some("counter"));
            assert_eq!(h.owner.pid, std::process::id());
            assert_eq!(h.data.as_deref(), Some("d1"));
            assert_eq!(h.fencing_token, guard.fencing_token());
            assert_eq!(h.ttl, Some(ttl));
        }
        other => panic!("expected Held with the holder, got {other}"),
    }
    guard.release().await.unwrap();
}

/// The two tests of a store lost and re-created by a process with the
/// default max TTL under a holder of a 30-minute lease (see
/// [`store_loss_quarantine_outlasts_every_holder`](leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder)
/// and [`store_recreated_at_once_issues_greater_tokens`](leasehold_testkit::conformance::store_recreated_at_once_issues_greater_tokens)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recreation {
    /// The new store's quarantine outlasts the holder's lease.
    QuarantineOutlastsHolder,
    /// The new store, made within the second the old one was, issues
    /// greater tokens.
    AtOnceGreaterTokens,
}

impl Recreation {
    /// Runs the test on `holder` (a backend with a 30-minute max TTL),
    /// `lose` (loses the store) and `reopen` (a backend with the default
    /// max TTL on the same store).
    pub async fn run(
        self,
        holder: std::sync::Arc<dyn Backend>,
        lose: impl AsyncFnOnce(),
        reopen: impl AsyncFnOnce() -> std::sync::Arc<dyn Backend>,
    ) {
        match self {
            Recreation::QuarantineOutlastsHolder => {
                leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder(
                    holder, lose, reopen,
                )
                .await
            }
            Recreation::AtOnceGreaterTokens => {
                leasehold_testkit::conformance::store_recreated_at_once_issues_greater_tokens(
                    holder, lose, reopen,
                )
                .await
            }
        }
    }
}

/// The two [`Recreation`] tests as `#[tokio::test]`s of the names the
/// conformance suite gives them, each calling `$run` (an
/// `async fn(Recreation)` that loses the store its own way) with its case.
#[macro_export]
macro_rules! recreation_tests {
    ($run:path) => {
        /// A holder of a 30-minute lease on a store opened with a max TTL of
        /// 30 minutes; the store lost; a process with the default max TTL
        /// re-creates it: it is not granted the key while the holder can
        /// still believe it holds (issue #28).
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn store_loss_quarantine_outlasts_a_longer_holder() {
            $run($crate::suite::Recreation::QuarantineOutlastsHolder).await;
        }

        /// The same, the store lost and re-created within the second it
        /// was created in: the re-created store's grant has a greater
        /// token than the holder's.
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn store_recreated_at_once_issues_greater_tokens() {
            $run($crate::suite::Recreation::AtOnceGreaterTokens).await;
        }
    };
}
