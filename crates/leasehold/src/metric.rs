//! Metrics, through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! leasehold records into whatever recorder the program installed (a
//! Prometheus exporter, `metrics-util`'s `DebuggingRecorder`, ...) and costs
//! next to nothing when none is. It installs none itself.
//!
//! Every metric carries two labels:
//! * `backend`: the store's [`Backend::name`](crate::backend::Backend::name)
//!   (`"memory"`, `"sqlite"`, `"azblob"`, `"dynamodb"`, ...);
//! * `kind`: what the lease is for: `"lock"` ([`Lock`](crate::Lock)),
//!   `"semaphore"` (a [`Semaphore`](crate::Semaphore) permit),
//!   `"election"` (an [`Election`](crate::Election) leadership), `"read"`
//!   and `"write"` (the sides of an [`RwLock`](crate::RwLock)).
//!
//! | name | type | extra label | what |
//! | --- | --- | --- | --- |
//! | [`leasehold_acquire_attempts_total`](ACQUIRE_ATTEMPTS) | counter | `outcome` = `acquired` / `held` / `error` | one per backend acquire request (a semaphore makes one per slot it tries) |
//! | [`leasehold_acquires_total`](ACQUIRES) | counter | `outcome` = `acquired` / `held` / `timed_out` / `error` | one per call of `try_acquire` / `acquire` / `campaign` that finished (`held`: a `try_` call found no room) |
//! | [`leasehold_acquire_wait_seconds`](ACQUIRE_WAIT) | histogram | | from the call to the granted lease, for calls that got one |
//! | [`leasehold_held`](HELD) | gauge | | leases this process holds now |
//! | [`leasehold_hold_seconds`](HOLD_TIME) | histogram | | from grant to release or loss |
//! | [`leasehold_renewals_total`](RENEWALS) | counter | `outcome` = `ok` / `error` / `lost` | one per renewal request (`error`: transient, retried; `lost`: definitive or past the deadline) |
//! | [`leasehold_losses_total`](LOSSES) | counter | `reason` = `expired` / `revoked` | leases lost while held |
//! | [`leasehold_releases_total`](RELEASES) | counter | `outcome` = `ok` / `error` / `lost` | one per release of a guard (explicit or on drop) |
//!
//! # A summary without an exporter
//! `metrics-util`'s `DebuggingRecorder` (feature `debugging`) collects
//! everything in memory; a program (the `leasehold` CLI with `-v`, say) can
//! install it, run, and print a snapshot at the end:
//!
//! ```ignore
//! let recorder = metrics_util::debugging::DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! recorder.install()?;
//! leasehold::metric::describe();
//! // ... use leasehold ...
//! for (key, unit, _description, value) in snapshotter.snapshot().into_vec() {
//!     eprintln!("{} {:?} = {value:?}", key.key(), unit);
//! }
//! ```
//!
//! This crate's own tests do exactly that.

use std::time::Duration;

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

/// Counter: backend acquire requests, by `outcome`.
pub const ACQUIRE_ATTEMPTS: &str = "leasehold_acquire_attempts_total";
/// Counter: finished acquire calls, by `outcome`.
pub const ACQUIRES: &str = "leasehold_acquires_total";
/// Histogram (seconds): time from an acquire call to its grant.
pub const ACQUIRE_WAIT: &str = "leasehold_acquire_wait_seconds";
/// Gauge: leases held by this process now.
pub const HELD: &str = "leasehold_held";
/// Histogram (seconds): time from grant to release or loss.
pub const HOLD_TIME: &str = "leasehold_hold_seconds";
/// Counter: renewal requests, by `outcome`.
pub const RENEWALS: &str = "leasehold_renewals_total";
/// Counter: leases lost while held, by `reason`.
pub const LOSSES: &str = "leasehold_losses_total";
/// Counter: guard releases, by `outcome`.
pub const RELEASES: &str = "leasehold_releases_total";

/// Every metric name above, for summaries.
pub const ALL: &[&str] = &[
    ACQUIRE_ATTEMPTS,
    ACQUIRES,
    ACQUIRE_WAIT,
    HELD,
    HOLD_TIME,
    RENEWALS,
    LOSSES,
    RELEASES,
];

/// Registers units and descriptions of every metric with the installed
/// recorder (optional; recorders that show descriptions use them).
pub fn describe() {
    use ::metrics::Unit;
    describe_counter!(
        ACQUIRE_ATTEMPTS,
        Unit::Count,
        "Backend acquire requests, by outcome"
    );
    describe_counter!(ACQUIRES, Unit::Count, "Finished acquire calls, by outcome");
    describe_histogram!(
        ACQUIRE_WAIT,
        Unit::Seconds,
        "Time from an acquire call to its grant"
    );
    describe_gauge!(HELD, Unit::Count, "Leases held by this process now");
    describe_histogram!(
        HOLD_TIME,
        Unit::Seconds,
        "Time from grant to release or loss"
    );
    describe_counter!(RENEWALS, Unit::Count, "Renewal requests, by outcome");
    describe_counter!(LOSSES, Unit::Count, "Leases lost while held, by reason");
    describe_counter!(RELEASES, Unit::Count, "Guard releases, by outcome");
}

/// What a lease is for: the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    Semaphore,
    Election,
    Read,
    Write,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Semaphore => "semaphore",
            Kind::Election => "election",
            Kind::Read => "read",
            Kind::Write => "write",
        }
    }
}

/// The labels every metric of one lease carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Labels {
    pub backend: &'static str,
    pub kind: Kind,
}

impl Labels {
    pub fn attempt(self, outcome: &'static str) {
        counter!(ACQUIRE_ATTEMPTS, "backend" => self.backend, "kind" => self.kind.as_str(), "outcome" => outcome).increment(1);
    }

    /// A finished acquire call; `waited` is recorded when it was granted.
    pub fn acquire<T>(self, result: &crate::Result<T>, waited: Duration) {
        use crate::Error;
        let outcome = match result {
            Ok(_) => "acquired",
            Err(Error::Held { .. }) => "held",
            Err(Error::TimedOut { .. }) => "timed_out",
            Err(_) => "error",
        };
        counter!(ACQUIRES, "backend" => self.backend, "kind" => self.kind.as_str(), "outcome" => outcome).increment(1);
        if result.is_ok() {
            histogram!(ACQUIRE_WAIT, "backend" => self.backend, "kind" => self.kind.as_str())
                .record(waited.as_secs_f64());
        }
    }

    pub fn held(self, delta: f64) {
        gauge!(HELD, "backend" => self.backend, "kind" => self.kind.as_str()).increment(delta);
    }

    pub fn hold_time(self, held_for: Duration) {
        histogram!(HOLD_TIME, "backend" => self.backend, "kind" => self.kind.as_str())
            .record(held_for.as_secs_f64());
    }

    pub fn renewal(self, outcome: &'static str) {
        counter!(RENEWALS, "backend" => self.backend, "kind" => self.kind.as_str(), "outcome" => outcome).increment(1);
    }

    pub fn loss(self, reason: &crate::LossReason) {
        let reason = match reason {
            crate::LossReason::Expired => "expired",
            crate::LossReason::Revoked(_) => "revoked",
        };
        counter!(LOSSES, "backend" => self.backend, "kind" => self.kind.as_str(), "reason" => reason).increment(1);
    }

    pub fn release(self, outcome: &'static str) {
        counter!(RELEASES, "backend" => self.backend, "kind" => self.kind.as_str(), "outcome" => outcome).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

    use super::*;
    use crate::{Error, LockOptions, LossReason, Store};

    /// Everything recorded so far, summed over snapshots (a snapshot of the
    /// debugging recorder drains what it reports).
    #[derive(Default)]
    struct Tally {
        counters: BTreeMap<String, u64>,
        gauges: BTreeMap<String, f64>,
        histograms: BTreeMap<String, Vec<f64>>,
    }

    impl Tally {
        fn take(&mut self, snapshotter: &Snapshotter) {
            for (key, _, _, value) in snapshotter.snapshot().into_vec() {
                let key = key.key();
                let mut id = key.name().to_string();
                let mut labels: Vec<_> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                labels.sort();
                id = format!("{id}{{{}}}", labels.join(","));
                match value {
                    DebugValue::Counter(n) => *self.counters.entry(id).or_default() += n,
                    DebugValue::Gauge(g) => *self.gauges.entry(id).or_default() += g.0,
                    DebugValue::Histogram(h) => self
                        .histograms
                        .entry(id)
                        .or_default()
                        .extend(h.into_iter().map(|v| v.0)),
                }
            }
        }

        fn counter(&self, name: &str, kind: &str, extra: &str) -> u64 {
            let id = format!("{name}{{backend=memory,kind={kind},{extra}}}");
            self.counters.get(&id).copied().unwrap_or(0)
        }

        fn gauge(&self, name: &str, kind: &str) -> f64 {
            let id = format!("{name}{{backend=memory,kind={kind}}}");
            self.gauges.get(&id).copied().unwrap_or(0.0)
        }

        fn samples(&self, name: &str, kind: &str) -> &[f64] {
            let id = format!("{name}{{backend=memory,kind={kind}}}");
            self.histograms.get(&id).map_or(&[], |v| v.as_slice())
        }
    }

    #[test]
    fn every_outcome_is_counted_per_backend_and_kind() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let mut tally = Tally::default();
        ::metrics::with_local_recorder(&recorder, || {
            describe();
            // A current-thread runtime: every task runs on this thread, under
            // the thread-local recorder.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let store = Store::open("memory:").unwrap();
                let opts = LockOptions::new()
                    .ttl(Duration::from_millis(600))
                    .renew_interval(Duration::from_millis(50))
                    .poll_interval(Duration::from_millis(5), Duration::from_millis(10));
                let lock = store.lock_with("m", opts.clone()).unwrap();
                let guard = lock.try_acquire().await.unwrap();
                let other = Store::from_backend(store.backend().clone())
                    .lock_with("m", opts.clone())
                    .unwrap();
                assert!(matches!(other.try_acquire().await, Err(Error::Held { .. })));
                assert!(matches!(
                    other.acquire_timeout(Duration::from_millis(30)).await,
                    Err(Error::TimedOut { .. })
                ));
                // Renewals happen in the background; wait until two did.
                tokio::time::timeout(Duration::from_secs(5), async {
                    while tally.counter(RENEWALS, "lock", "outcome=ok") < 2 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        tally.take(&snapshotter);
                    }
                })
                .await
                .expect("two renewals");
                guard.release().await.unwrap();

                // A broken lease: lost, counted as revoked.
                let guard = lock.acquire().await.unwrap();
                store.break_lease("m").await.unwrap();
                assert!(matches!(guard.lost().await, LossReason::Revoked(_)));
                assert!(guard.release().await.is_err());

                let sem = store.semaphore_with("s", 1, opts.clone()).unwrap();
                let permit = sem.try_acquire().await.unwrap();
                assert!(sem.try_acquire().await.is_err());
                permit.release().await.unwrap();

                let election = store.election_with("e", opts).unwrap();
                election.campaign().await.unwrap().resign().await.unwrap();
            });
        });
        tally.take(&snapshotter);

        let c = |name, kind, extra| tally.counter(name, kind, extra);
        assert_eq!(c(ACQUIRES, "lock", "outcome=acquired"), 2);
        assert_eq!(c(ACQUIRES, "lock", "outcome=held"), 1);
        assert_eq!(c(ACQUIRES, "lock", "outcome=timed_out"), 1);
        assert_eq!(c(ACQUIRE_ATTEMPTS, "lock", "outcome=acquired"), 2);
        assert!(c(ACQUIRE_ATTEMPTS, "lock", "outcome=held") >= 2);
        assert_eq!(tally.samples(ACQUIRE_WAIT, "lock").len(), 2);
        assert!(c(RENEWALS, "lock", "outcome=ok") >= 2);
        assert!(c(RENEWALS, "lock", "outcome=lost") >= 1);
        assert_eq!(c(LOSSES, "lock", "reason=revoked"), 1);
        assert_eq!(c(LOSSES, "lock", "reason=expired"), 0);
        assert_eq!(c(RELEASES, "lock", "outcome=ok"), 1);
        assert_eq!(c(RELEASES, "lock", "outcome=lost"), 1);
        assert_eq!(tally.samples(HOLD_TIME, "lock").len(), 2);
        assert_eq!(tally.gauge(HELD, "lock"), 0.0);

        assert_eq!(c(ACQUIRES, "semaphore", "outcome=acquired"), 1);
        assert_eq!(c(ACQUIRES, "semaphore", "outcome=held"), 1);
        assert_eq!(c(ACQUIRE_ATTEMPTS, "semaphore", "outcome=acquired"), 1);
        assert_eq!(c(RELEASES, "semaphore", "outcome=ok"), 1);
        assert_eq!(tally.gauge(HELD, "semaphore"), 0.0);

        assert_eq!(c(ACQUIRES, "election", "outcome=acquired"), 1);
        assert_eq!(c(RELEASES, "election", "outcome=ok"), 1);
        assert_eq!(tally.samples(HOLD_TIME, "election").len(), 1);
    }
}
