//! Lock options and how long to wait.

use std::time::Duration;

use crate::backend::Capabilities;
use crate::error::{Error, Result};

/// The longest user data stored with a lease, in bytes.
pub const MAX_DATA_LEN: usize = 1024;
/// The longest owner label, in bytes.
pub const MAX_LABEL_LEN: usize = 128;

/// What to do when a guard finds its lease lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LossPolicy {
    /// Mark the guard lost and wake [`LeaseGuard::lost`](crate::LeaseGuard::lost)
    /// waiters; the program decides what to do.
    #[default]
    Notify,
    /// Log the loss and abort the whole process at once (like
    /// `TerminateApplicationOnFailedRenew` in aws-distributed-mutex), for
    /// programs that must never run a critical section without the lease.
    Abort,
}

/// How long a wait may last: what the `*_reporting` waits take
/// ([`Lock::acquire_reporting`](crate::Lock::acquire_reporting) and its
/// kin on every lock type) and [`Lock::run`](crate::Lock::run). A
/// `Duration` converts into [`Wait::Timeout`]. (The named waits say it in
/// their names: [`Lock::acquire`](crate::Lock::acquire) waits for ever,
/// [`Lock::acquire_timeout`](crate::Lock::acquire_timeout) up to a time.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Until the lock is obtained.
    Forever,
    /// Up to this long; then [`Error::TimedOut`]. Zero is one attempt, as
    /// `try_acquire` makes, that ends in [`Error::TimedOut`] if it does not
    /// get the key.
    Timeout(Duration),
}

impl Wait {
    /// When a wait begun at `started` runs out; `None` for ever, and for a
    /// timeout so long that the clock cannot represent its end (which is
    /// for ever in practice).
    pub(crate) fn deadline(self, started: tokio::time::Instant) -> Option<tokio::time::Instant> {
        match self {
            Wait::Forever => None,
            Wait::Timeout(d) => started.checked_add(d),
        }
    }
}

impl From<Duration> for Wait {
    fn from(d: Duration) -> Self {
        Wait::Timeout(d)
    }
}

/// Options of a [`Lock`](crate::Lock). Every setter has a sensible default;
/// the combination is checked by [`Store::lock_with`](crate::Store::lock_with).
#[derive(Debug, Clone)]
pub struct LockOptions {
    pub(crate) ttl: Duration,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) safety_margin: Option<Duration>,
    pub(crate) poll_min: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) poll_cap: Option<Duration>,
    pub(crate) label: Option<String>,
    pub(crate) data: Option<String>,
    pub(crate) loss_policy: LossPolicy,
}

/// Default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The shortest safety margin accepted (see
/// [`LockOptions::safety_margin`]).
pub const MIN_SAFETY_MARGIN: Duration = Duration::from_millis(5);
/// Default shortest pause between two attempts while waiting.
pub const DEFAULT_POLL_MIN: Duration = Duration::from_millis(50);
/// Default longest pause between two attempts while waiting.
pub const DEFAULT_POLL_MAX: Duration = Duration::from_millis(100);
/// Default longest pause a long wait backs off to (see
/// [`LockOptions::poll_cap`]).
pub const DEFAULT_POLL_CAP: Duration = Duration::from_secs(2);

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: DEFAULT_TTL,
            renew_interval: None,
            safety_margin: None,
            poll_min: DEFAULT_POLL_MIN,
            poll_max: DEFAULT_POLL_MAX,
            poll_cap: None,
            label: None,
            data: None,
            loss_policy: LossPolicy::Notify,
        }
    }
}

impl LockOptions {
    /// Default options: TTL 30 s, renewal every TTL/3, safety margin TTL/10
    /// (for a TTL longer than the [confirmation window](crate::CONFIRMATION_WINDOW):
    /// every window/3 and window/10), polling every 50–100 ms (uniformly
    /// random) and backing off towards 1–2 s while a wait finds the same
    /// holders for more than 2 s, no label, no data, [`LossPolicy::Notify`].
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a lease lasts without renewal. Must lie in the backend's
    /// range ([`Capabilities::min_ttl`]..=[`Capabilities::max_ttl`]).
    ///
    /// The TTL is how long a holder that died keeps the key from others. A
    /// live holder trusts its lease for at most the
    /// [confirmation window](crate::CONFIRMATION_WINDOW) (60 s) after its
    /// last confirmed renewal, whatever the TTL: with a longer TTL it renews
    /// at least every window/3 and is told lost if the store cannot confirm
    /// the lease for a window (less the safety margin), because a store
    /// that lost its data grants again one window after the loss.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often the guard renews (default TTL/3, or a third of the
    /// confirmation window if that is shorter).
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.renew_interval = Some(every);
        self
    }

    /// How long before the backend could hand the lease to someone else the
    /// guard declares itself lost (default TTL/10; at least TTL/100 and at
    /// least [`MIN_SAFETY_MARGIN`], which cover clock-rate differences
    /// between machines and timer slack; for a TTL longer than the
    /// [confirmation window](crate::CONFIRMATION_WINDOW), the window takes
    /// the TTL's place in all three). The guard is lost once no renewal has
    /// succeeded by: send time of the last successful request + the TTL
    /// (at most the window) − this margin, so the margin must be shorter
    /// than the window. Make it at least as long as your code needs to stop
    /// its critical section after [`LeaseGuard::lost`](crate::LeaseGuard::lost)
    /// fires.
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// Bounds of the random pause between attempts while waiting
    /// (defaults 50 ms and 100 ms).
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max;
        self
    }

    /// The longest pause a long wait backs off to (default
    /// [`DEFAULT_POLL_CAP`], 2 s; no shorter than the poll interval's
    /// max).
    ///
    /// A wait polls within the [poll interval](Self::poll_interval) for
    /// its first 2 s, and again whenever it finds other holders than the
    /// round before (the key is changing hands: handoffs stay quick).
    /// While it keeps finding the same holders, each pause doubles, up to
    /// the poll interval scaled by `cap / max` (1–2 s with the defaults:
    /// the jitter is kept). A holder whose lease the store says runs out
    /// sooner is asked after again right then, so a dead holder's key is
    /// taken over as soon as its lease ends. A release in this process, or
    /// elsewhere where the store tells of releases (SQLite, PostgreSQL,
    /// Redis, etcd), wakes the wait at once, whatever the pause.
    ///
    /// On stores that bill by request (DynamoDB, Azure Blob, S3) this is
    /// what a wait costs: about 30 requests for its first 2 s, then one
    /// every 1–2 s (about 0.7 a second) with the defaults, against 13 a
    /// second without backing off. A shorter cap hands a long-held key
    /// over sooner and costs more.
    pub fn poll_cap(mut self, cap: Duration) -> Self {
        self.poll_cap = Some(cap);
        self
    }

    /// A label stored with the owner identity (at most [`MAX_LABEL_LEN`] bytes).
    pub fn owner_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// User data stored with the lease (at most [`MAX_DATA_LEN`] bytes).
    pub fn data(mut self, data: impl Into<String>) -> Self {
        self.data = Some(data.into());
        self
    }

    /// What a guard does when its lease is lost.
    pub fn loss_policy(mut self, policy: LossPolicy) -> Self {
        self.loss_policy = policy;
        self
    }

    /// Checks the options against a backend and fills in the defaults, for
    /// a store whose confirmation window is `window` (see
    /// [`CONFIRMATION_WINDOW`](crate::CONFIRMATION_WINDOW)).
    pub(crate) fn resolve(
        &self,
        caps: &Capabilities,
        backend: &str,
        window: Duration,
    ) -> Result<ResolvedOptions> {
        let ttl = self.ttl;
        if ttl > caps.max_ttl {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{} is outside the {backend} backend's range {}..={}: {} is this store's max TTL, set when the store is created (`?max_ttl=` in its URL, within what the store allows); an existing store keeps its own. To raise it, create a store with a larger one (SQLite: a new file, or this one removed, with `?max_ttl=`; see docs/sqlite.md, \"Raising the max TTL\", and the other stores' guides)",
                    fmt_duration(ttl),
                    fmt_duration(caps.min_ttl),
                    fmt_duration(caps.max_ttl),
                    fmt_duration(caps.max_ttl),
                ),
            ));
        }
        if ttl < caps.min_ttl || ttl > caps.max_ttl {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{} is outside the {backend} backend's range {}..={}",
                    fmt_duration(ttl),
                    fmt_duration(caps.min_ttl),
                    fmt_duration(caps.max_ttl)
                ),
            ));
        }
        // How long a renewal is trusted: the TTL, but never longer than the
        // confirmation window (a store re-created after losing its data
        // grants again one window after the loss, whatever this TTL).
        let trusted = ttl.min(window);
        let limit = if trusted < ttl {
            format!("the confirmation window ({})", fmt_duration(trusted))
        } else {
            format!("the TTL ({})", fmt_duration(ttl))
        };
        let margin = self.safety_margin.unwrap_or(trusted / 10);
        let interval = self.renew_interval.unwrap_or(trusted / 3);
        let min_margin = (trusted / 100).max(MIN_SAFETY_MARGIN);
        if margin < min_margin {
            return Err(Error::invalid(
                "safety margin",
                format!(
                    "{} is too short: it must be at least TTL/100 and at least {} ({} here), to cover clock-rate differences and timer slack",
                    fmt_duration(margin),
                    fmt_duration(MIN_SAFETY_MARGIN),
                    fmt_duration(min_margin)
                ),
            ));
        }
        if margin >= trusted {
            return Err(Error::invalid(
                "safety margin",
                format!("{} must be shorter than {limit}", fmt_duration(margin)),
            ));
        }
        if interval.is_zero() || interval >= trusted - margin {
            return Err(Error::invalid(
                "renew interval",
                format!(
                    "{} must be above zero and below {limit} − safety margin ({})",
                    fmt_duration(interval),
                    fmt_duration(trusted - margin)
                ),
            ));
        }
        if self.poll_min.is_zero() || self.poll_min > self.poll_max {
            return Err(Error::invalid(
                "poll interval",
                format!(
                    "bounds {}..{} must satisfy 0 < min <= max",
                    fmt_duration(self.poll_min),
                    fmt_duration(self.poll_max)
                ),
            ));
        }
        let poll_cap = match self.poll_cap {
            Some(cap) if cap < self.poll_max => {
                return Err(Error::invalid(
                    "poll cap",
                    format!(
                        "{} is shorter than the poll interval's max ({}): the cap is the longest pause a long wait backs off to",
                        fmt_duration(cap),
                        fmt_duration(self.poll_max)
                    ),
                ));
            }
            Some(cap) => cap,
            // Polls already slower than the default cap: no backing off.
            None => DEFAULT_POLL_CAP.max(self.poll_max),
        };
        check_len("owner label", self.label.as_deref(), MAX_LABEL_LEN)?;
        check_len("data", self.data.as_deref(), MAX_DATA_LEN)?;
        Ok(ResolvedOptions {
            ttl,
            trusted,
            renew_interval: interval,
            safety_margin: margin,
            poll_min: self.poll_min,
            poll_max: self.poll_max,
            poll_cap,
            label: self.label.clone(),
            data: self.data.clone(),
            loss_policy: self.loss_policy,
        })
    }
}

fn check_len(what: &'static str, value: Option<&str>, max: usize) -> Result<()> {
    match value {
        Some(v) if v.len() > max => Err(Error::invalid(
            what,
            format!("{} bytes is more than the limit of {max} bytes", v.len()),
        )),
        _ => Ok(()),
    }
}

/// Options after validation against a backend.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedOptions {
    pub ttl: Duration,
    /// How long after a renewal's send time the lease is trusted without
    /// another: the TTL, capped at the confirmation window. The safety
    /// deadline is that send time + this − the safety margin.
    pub trusted: Duration,
    pub renew_interval: Duration,
    pub safety_margin: Duration,
    pub poll_min: Duration,
    pub poll_max: Duration,
    /// The longest pause a long wait backs off to (at least `poll_max`).
    pub poll_cap: Duration,
    pub label: Option<String>,
    pub data: Option<String>,
    pub loss_policy: LossPolicy,
}

impl ResolvedOptions {
    /// A random pause between `poll_min` and `poll_max`.
    pub fn poll_pause(&self) -> Duration {
        use rand::Rng;
        if self.poll_min == self.poll_max {
            return self.poll_min;
        }
        rand::rng().random_range(self.poll_min..=self.poll_max)
    }
}

/// Formats a duration for messages: "30s", "1.5s", "250ms".
pub(crate) fn fmt_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) && d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:?}", d)
    }
}

/// Options for the crate's unit tests on the memory store: a short TTL and
/// polls 5-10 ms apart, so that waits end quickly.
#[cfg(test)]
pub(crate) fn fast_for_tests() -> LockOptions {
    LockOptions::new()
        .ttl(Duration::from_secs(5))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = crate::CONFIRMATION_WINDOW;

    fn caps() -> Capabilities {
        Capabilities::new(Duration::from_secs(15), Duration::from_secs(60))
    }

    #[test]
    fn defaults_derive_from_ttl() {
        let r = LockOptions::new().resolve(&caps(), "x", W).unwrap();
        assert_eq!(r.ttl, Duration::from_secs(30));
        assert_eq!(r.renew_interval, Duration::from_secs(10));
        assert_eq!(r.safety_margin, Duration::from_secs(3));
    }

    #[test]
    fn ttl_outside_range_names_the_range() {
        for ttl in [10, 90] {
            let err = LockOptions::new()
                .ttl(Duration::from_secs(ttl))
                .resolve(&caps(), "azblob", W)
                .unwrap_err();
            assert!(err.to_string().contains("15s..=60s"), "{err}");
        }
    }

    #[test]
    fn a_safety_margin_below_its_lower_bound_is_rejected() {
        let c = caps();
        for margin in [Duration::ZERO, Duration::from_millis(299)] {
            let err = LockOptions::new()
                .safety_margin(margin)
                .resolve(&c, "x", W)
                .unwrap_err();
            assert!(err.to_string().contains("TTL/100"), "{err}");
        }
        LockOptions::new()
            .safety_margin(Duration::from_millis(300))
            .resolve(&c, "x", W)
            .unwrap();
    }

    #[test]
    fn inconsistent_timings_are_rejected() {
        let c = caps();
        let o = LockOptions::new();
        assert!(o
            .clone()
            .safety_margin(Duration::from_secs(30))
            .resolve(&c, "x", W)
            .is_err());
        assert!(o
            .clone()
            .renew_interval(Duration::from_secs(28))
            .resolve(&c, "x", W)
            .is_err());
        assert!(o
            .clone()
            .renew_interval(Duration::ZERO)
            .resolve(&c, "x", W)
            .is_err());
        assert!(o
            .clone()
            .poll_interval(Duration::from_millis(10), Duration::from_millis(5))
            .resolve(&c, "x", W)
            .is_err());
    }

    #[test]
    fn oversized_label_and_data_are_rejected() {
        let c = caps();
        let err = LockOptions::new()
            .data("x".repeat(MAX_DATA_LEN + 1))
            .resolve(&c, "x", W)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { what: "data", .. }));
        LockOptions::new()
            .data("x".repeat(MAX_DATA_LEN))
            .resolve(&c, "x", W)
            .unwrap();
        let err = LockOptions::new()
            .owner_label("l".repeat(MAX_LABEL_LEN + 1))
            .resolve(&c, "x", W)
            .unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidInput {
                what: "owner label",
                ..
            }
        ));
    }

    /// A TTL longer than the confirmation window is trusted for the window
    /// only: renewals every window/3, a margin of window/10, and a safety
    /// margin as long as the window refused (issue #28).
    #[test]
    fn a_ttl_longer_than_the_window_is_trusted_for_the_window() {
        let long = Capabilities::new(Duration::from_secs(1), Duration::from_secs(86_400));
        let r = LockOptions::new()
            .ttl(Duration::from_secs(20 * 60))
            .resolve(&long, "x", W)
            .unwrap();
        assert_eq!(r.ttl, Duration::from_secs(20 * 60));
        assert_eq!(r.trusted, W);
        assert_eq!(r.renew_interval, W / 3);
        assert_eq!(r.safety_margin, W / 10);
        let err = LockOptions::new()
            .ttl(Duration::from_secs(20 * 60))
            .safety_margin(Duration::from_secs(120))
            .resolve(&long, "x", W)
            .unwrap_err();
        assert!(err.to_string().contains("confirmation window"), "{err}");
        let err = LockOptions::new()
            .ttl(Duration::from_secs(20 * 60))
            .renew_interval(Duration::from_secs(5 * 60))
            .resolve(&long, "x", W)
            .unwrap_err();
        assert!(err.to_string().contains("confirmation window"), "{err}");
    }
}
