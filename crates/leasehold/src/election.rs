//! [`Election`]: leader election on a key.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use serde::Serialize;

use crate::backend::{HolderInfo, Owner};
use crate::engine::Granted;
use crate::error::Result;
use crate::guard::LeaseGuard;
use crate::key::Key;
use crate::lock::Lock;
use crate::waits::Waits;

/// Leader election on one key. Made by [`Store::election`](crate::Store::election)
/// or [`Store::election_with`](crate::Store::election_with); cheap to clone.
///
/// ```
/// # async fn demo() -> leasehold::Result<()> {
/// use std::time::Duration;
/// use leasehold::LockOptions;
/// let store = leasehold::Store::open("memory:")?;
/// let election = store.election_with(
///     "services/scheduler",
///     LockOptions::new().owner_label("node-1").data("http://node-1:8080"),
/// )?;
/// let leadership = election.campaign().await?;
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.data.as_deref(), Some("http://node-1:8080"));
/// tokio::select! {
///     _ = async { /* lead */ } => {}
///     reason = leadership.lost() => eprintln!("no longer leader: {reason}"),
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
///
/// The leader is whoever holds the lease on the election's key: an election
/// on `KEY` *is* a [`Lock`] on `KEY` (so `inspect KEY` shows the leader, and
/// a plain lock on the same key competes with the candidates). Leadership is
/// a [`Leadership`] guard: a [`LeaseGuard`] underneath, renewed in the
/// background, that says when leadership is lost. Its fencing token is the
/// leader's *term*: every new leader's is strictly greater.
///
/// Anyone, candidate or not, can ask who leads ([`Election::leader`]): the
/// owner identity and the data the leader published (its
/// [`LockOptions::data`](crate::LockOptions::data)), and can follow changes
/// by polling ([`Election::observe`]).
#[derive(Debug, Clone)]
pub struct Election {
    lock: Lock,
}

/// Leadership of an [`Election`]: a held lease on its key. Resign with
/// [`resign`](Self::resign); dropping it resigns in the background (best
/// effort).
///
/// It derefs to the [`LeaseGuard`] on the election's key, whose methods it
/// shares ([`lost`](LeaseGuard::lost), [`is_lost`](LeaseGuard::is_lost),
/// [`valid_for`](LeaseGuard::valid_for), ...); its fencing token is the
/// [`term`](Self::term).
#[must_use = "leadership ends as soon as it is dropped"]
#[derive(Debug)]
pub struct Leadership {
    guard: LeaseGuard,
}

impl Election {
    pub(crate) fn new(lock: Lock) -> Self {
        Election { lock }
    }

    /// The election's key.
    pub fn key(&self) -> &Key {
        self.lock.key()
    }

    /// The owner identity this candidate publishes when it leads.
    pub fn owner(&self) -> &Owner {
        self.lock.owner()
    }

    /// The lease TTL: how long a dead leader can keep leadership.
    pub fn ttl(&self) -> Duration {
        self.lock.ttl()
    }

    /// Takes leadership if it is free now, with one attempt, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) with the current leader;
    /// [`Error::Quarantined`](crate::Error::Quarantined) while the
    /// store's data is new; backend failures.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped while a request is in
    /// flight and the backend grants the lease anyway, it is released
    /// in the background at once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let x = store.election("services/scheduler")?;
    /// let held = x.try_campaign().await?;
    /// // Another attempt, even from this process, finds it taken.
    /// let again = x.try_campaign().await;
    /// assert!(matches!(again, Err(leasehold::Error::Held { .. })));
    /// held.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_campaign(&self) -> Result<Leadership> {
        self.waits().once().await
    }

    /// Takes leadership, waiting as long as it takes (see
    /// [`campaign_timeout`](Self::campaign_timeout) for how waiting works).
    ///
    /// # Errors
    /// Non-retryable backend failures (retryable ones are retried).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future never leaves a lease behind (a
    /// lease granted to a request in flight is released in the
    /// background), and gives up this task's place in the local queue.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.election("services/scheduler")?.campaign().await?;
    /// println!("fencing token {}", held.fencing_token());
    /// held.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self) -> Result<Leadership> {
        self.waits().forever().await
    }

    /// Takes leadership, waiting up to `timeout` for it to come free.
    ///
    /// Waiting works as it does for a lock (see
    /// [`Lock::acquire_timeout`](crate::Lock::acquire_timeout)): the backend is
    /// polled after a random pause between the poll bounds, a release by a
    /// guard of this same process wakes the first local waiter at once, and
    /// tasks of one process queue in FIFO order. A zero timeout is one attempt,
    /// as [`try_campaign`](Self::try_campaign) makes, that ends in
    /// [`Error::TimedOut`](crate::Error::TimedOut) if it gets nothing.
    ///
    /// # Errors
    /// [`Error::TimedOut`](crate::Error::TimedOut) when the wait runs
    /// out; non-retryable backend failures (retryable ones are retried
    /// while the wait lasts).
    ///
    /// # Cancel safety
    /// As [`campaign`](Self::campaign).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let x = store.election("services/scheduler")?;
    /// let held = x.campaign_timeout(Duration::from_secs(60)).await?;
    /// let waited = x.campaign_timeout(Duration::from_millis(50)).await;
    /// assert!(matches!(waited, Err(leasehold::Error::TimedOut { .. })));
    /// held.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign_timeout(&self, timeout: Duration) -> Result<Leadership> {
        self.waits().timeout(timeout).await
    }

    /// Takes leadership, waiting as `wait` says
    /// ([`Wait::Forever`](crate::Wait::Forever), as
    /// [`campaign`](Self::campaign), or
    /// [`Wait::Timeout`](crate::Wait::Timeout), as
    /// [`campaign_timeout`](Self::campaign_timeout)), and calls `on_wait` with
    /// the reason every time an attempt gets nothing: it is held
    /// ([`WaitReason::Held`](crate::WaitReason::Held), with the holders the
    /// backend described), or the store's data is new and in quarantine (see
    /// [`Error::Quarantined`](crate::Error::Quarantined)). For status lines.
    ///
    /// # Errors
    /// As [`campaign_timeout`](Self::campaign_timeout).
    ///
    /// # Cancel safety
    /// As [`campaign`](Self::campaign).
    ///
    /// # Examples
    /// ```
    /// use leasehold::{Wait, WaitReason};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = leasehold::Store::open(&format!("sqlite:{}", dir.path().join("l.db").display()))?;
    /// let held = store.election("services/scheduler")?
    ///     .campaign_reporting(Wait::Forever, |reason| {
    ///         if let WaitReason::Held([holder, ..]) = reason {
    ///             eprintln!("waiting for {}", holder.owner.host);
    ///         }
    ///     })
    ///     .await?;
    /// held.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign_reporting(
        &self,
        wait: impl Into<crate::Wait>,
        on_wait: impl FnMut(crate::WaitReason<'_>),
    ) -> Result<Leadership> {
        self.waits().reporting(wait.into(), on_wait).await
    }

    /// This election's waits: a grant is leadership.
    fn waits(&self) -> Waits<'_, impl FnOnce(Granted) -> Leadership + '_> {
        Waits::new(self.lock.engine(), |granted| self.grant(granted))
    }

    fn grant(&self, granted: Granted) -> Leadership {
        let guard = granted.guard;
        tracing::info!(key = %self.key(), term = guard.fencing_token(), "became leader");
        Leadership { guard }
    }

    /// Who leads now, as the backend sees it: owner identity, published
    /// data, term ([`fencing_token`](HolderInfo::fencing_token)), since
    /// when. `None` when nobody does. A leader that died is shown until its
    /// lease runs out (on backends whose capabilities say
    /// `takeover_needs_observation`, until a candidate takes over).
    ///
    /// # Errors
    /// Backend failures.
    pub async fn leader(&self) -> Result<Option<HolderInfo>> {
        Ok(self.lock.inspect().await?.holder)
    }

    /// Follows leader changes by asking the store every `every` (at least
    /// 1 ms; one `inspect` request each), and at once where the store tells
    /// of releases (SQLite, PostgreSQL, Redis, etcd; and a release in this
    /// process on every store): a leader that resigns or is broken is seen
    /// gone at most [`OBSERVER_AFTER_WAKE`] later, and while nobody leads
    /// it asks again every [`OBSERVER_AFTER_WAKE`] (up to
    /// [`OBSERVER_POLLS_AFTER_WAKE`] times; `every` if shorter), in time
    /// to see a waiting candidate take over. The observer's first
    /// [`next`](LeaderObserver::next) returns the current state at once. A
    /// leader that lasted longer than `every` is always seen; changes made
    /// and undone between two polls are not, but the terms they began are
    /// counted ([`LeaderChange::missed_terms`]).
    pub fn observe(&self, every: Duration) -> LeaderObserver {
        LeaderObserver {
            lock: self.lock.clone(),
            every: every.max(Duration::from_millis(1)),
            last: None,
            watch: None,
            woke: false,
            woke_polls: 0,
        }
    }
}

impl std::ops::Deref for Leadership {
    type Target = LeaseGuard;

    fn deref(&self) -> &LeaseGuard {
        &self.guard
    }
}

impl Leadership {
    /// This leadership's term: its fencing token, strictly greater than
    /// every earlier leader's.
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// The lease guard underneath.
    pub fn into_guard(self) -> LeaseGuard {
        self.guard
    }

    /// Steps down: releases the lease so that a waiting candidate takes
    /// over at its next poll (at once if it is in this process).
    ///
    /// # Errors
    /// As [`LeaseGuard::release`]: [`Error::LeaseLost`](crate::Error::LeaseLost)
    /// if leadership was already lost.
    ///
    /// # Cancel safety
    /// The release goes on in the background if this future is dropped.
    pub async fn resign(self) -> Result<()> {
        let key = self.key().clone();
        let term = self.term();
        let result = self.guard.release().await;
        tracing::info!(%key, term, ok = result.is_ok(), "resigned");
        result
    }
}

/// A change of leader seen by a [`LeaderObserver`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LeaderChange {
    /// Who leads now (`None`: nobody).
    pub leader: Option<HolderInfo>,
    /// The last term ever begun on the key (its last fencing token; 0 if
    /// nobody ever led).
    pub last_term: u64,
    /// How many terms began and ended between this observation and the
    /// previous one, unseen (polling can miss short terms; this says so).
    /// Terms are counted within a store epoch: across a loss of the store's
    /// data, only the new epoch's terms count.
    pub missed_terms: u64,
}

/// How long after a release woke a [`LeaderObserver`] it asks the store
/// again: time for a waiting candidate to take over, so that the next
/// leader is seen then rather than a whole poll interval later (and a
/// bound on how often a store's spurious wake-ups make it ask).
pub const OBSERVER_AFTER_WAKE: Duration = Duration::from_millis(50);

/// Follows an election's leader by polling, woken by releases where the
/// store tells of them; made by [`Election::observe`]. Also a
/// [`Stream`](futures_core::Stream) through [`into_stream`](Self::into_stream).
pub struct LeaderObserver {
    lock: Lock,
    every: Duration,
    /// (current holder's term, last term issued) at the last observation.
    last: Option<(Option<u64>, u64)>,
    /// Completes when the key may have been released (registered before
    /// the last poll, so that no release after it is missed).
    watch: Option<crate::backend::ReleaseWatch>,
    /// Whether the next pause is a short one (after a wake).
    woke: bool,
    /// Short polls left after the last wake while nobody leads.
    woke_polls: u8,
}

/// How many short polls ([`OBSERVER_AFTER_WAKE`] apart) a
/// [`LeaderObserver`] makes after a release woke it, while nobody leads.
pub const OBSERVER_POLLS_AFTER_WAKE: u8 = 4;

impl std::fmt::Debug for LeaderObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderObserver")
            .field("key", self.lock.key())
            .field("every", &self.every)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl LeaderObserver {
    /// The next change of leader: at once on the first call (the current
    /// state), then whenever a poll finds the leader (or its term) changed,
    /// or finds that terms began since the last poll.
    ///
    /// # Errors
    /// Backend failures of a poll; the observer stays usable, and the next
    /// call polls again after the interval.
    ///
    /// # Cancel safety
    /// Cancel safe: a change is only consumed when it is returned.
    pub async fn next(&mut self) -> Result<LeaderChange> {
        loop {
            if self.last.is_some() {
                let pause = match std::mem::take(&mut self.woke) {
                    true => self.every.min(OBSERVER_AFTER_WAKE),
                    false => self.every,
                };
                match self.watch.as_mut() {
                    Some(watch) if pause > OBSERVER_AFTER_WAKE => tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = watch => {
                            self.watch = None;
                            self.woke = true;
                            self.woke_polls = OBSERVER_POLLS_AFTER_WAKE;
                            continue;
                        }
                    },
                    _ => tokio::time::sleep(pause).await,
                }
            }
            if self.watch.is_none() {
                let key = std::slice::from_ref(self.lock.key());
                let local = self.lock.engine().store().local_key(self.lock.key());
                let store_watch = self.lock.engine().store().backend().watch_release(key);
                // Both registered now, before the poll: a `Notified` hears
                // `notify_waiters` from its creation on.
                let released = local.released.clone().notified_owned();
                self.watch = Some(Box::pin(async move {
                    match store_watch {
                        Some(w) => tokio::select! { _ = w => {}, _ = released => {} },
                        None => released.await,
                    }
                }));
            }
            let info = self.lock.inspect().await?;
            let now = (
                info.holder.as_ref().map(|h| h.fencing_token),
                info.fencing_token,
            );
            // Woken by a release and nobody leads yet: look again soon, in
            // case a candidate takes over (up to a few short polls).
            if self.woke_polls > 0 && now.0.is_none() {
                self.woke_polls -= 1;
                self.woke = self.woke_polls > 0;
            } else {
                self.woke_polls = 0;
            }
            let missed_terms = match self.last {
                None => 0,
                Some(last) if last == now => continue,
                Some((_, last_issued)) => {
                    // Terms of a new store epoch count from its base (the
                    // first term of a key, or the first after the store's
                    // data was lost, is not preceded by 2^22 * epoch terms).
                    let bits = crate::backend::TOKEN_COUNTER_BITS;
                    let block = (info.fencing_token >> bits) << bits;
                    let begun = info.fencing_token.saturating_sub(last_issued.max(block));
                    let seen_new = now.0.is_some_and(|t| t > last_issued);
                    begun.saturating_sub(seen_new as u64)
                }
            };
            self.last = Some(now);
            return Ok(LeaderChange {
                leader: info.holder,
                last_term: info.fencing_token,
                missed_terms,
            });
        }
    }

    /// The observer as a stream of changes (never ending; errors are items).
    pub fn into_stream(self) -> LeaderStream {
        LeaderStream {
            next: Box::pin(step(self)),
        }
    }
}

type Step = Pin<Box<dyn Future<Output = (LeaderObserver, Result<LeaderChange>)> + Send>>;

async fn step(mut observer: LeaderObserver) -> (LeaderObserver, Result<LeaderChange>) {
    let item = observer.next().await;
    (observer, item)
}

/// A [`LeaderObserver`] as a [`Stream`](futures_core::Stream) of changes.
pub struct LeaderStream {
    next: Step,
}

impl std::fmt::Debug for LeaderStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderStream").finish_non_exhaustive()
    }
}

impl futures_core::Stream for LeaderStream {
    type Item = Result<LeaderChange>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let (observer, item) = ready!(self.next.as_mut().poll(cx));
        self.next = Box::pin(step(observer));
        Poll::Ready(Some(item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::LockOptions;
    use crate::store::Store;

    fn opts(label: &str) -> LockOptions {
        LockOptions::new()
            .ttl(Duration::from_secs(5))
            .poll_interval(Duration::from_millis(5), Duration::from_millis(10))
            .owner_label(label)
            .data(format!("{label}-data"))
    }

    #[tokio::test]
    async fn leader_shows_owner_and_data_and_resign_clears_it() {
        let store = Store::open("memory:").unwrap();
        let e = store.election_with("lead", opts("a")).unwrap();
        assert_eq!(e.leader().await.unwrap(), None);
        let l = e.campaign().await.unwrap();
        let leader = e.leader().await.unwrap().unwrap();
        assert_eq!(leader.owner.label.as_deref(), Some("a"));
        assert_eq!(leader.data.as_deref(), Some("a-data"));
        assert_eq!(leader.fencing_token, l.term());
        let other = store.election_with("lead", opts("b")).unwrap();
        assert!(matches!(
            other.try_campaign().await.unwrap_err(),
            crate::Error::Held { .. }
        ));
        l.resign().await.unwrap();
        assert_eq!(e.leader().await.unwrap(), None);
    }

    /// A resignation is seen at once, not at the next poll a minute away
    /// (this process's release wakes the observer), and the candidate that
    /// takes over right after is seen within the short poll after a wake.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn observer_is_woken_by_a_release() {
        let store = Store::open("memory:").unwrap();
        let e = store.election_with("woken", opts("a")).unwrap();
        let first = e.campaign().await.unwrap();
        let mut observer = e.observe(Duration::from_secs(60));
        let now = observer.next().await.unwrap();
        assert_eq!(now.leader.map(|h| h.fencing_token), Some(first.term()));
        first.resign().await.unwrap();
        let gone = tokio::time::timeout(Duration::from_secs(5), observer.next())
            .await
            .expect("woken by the release, not a minute later")
            .unwrap();
        assert_eq!(gone.leader, None);
        let second = e.campaign().await.unwrap();
        second.resign().await.unwrap();
        let third = e.campaign().await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), observer.next())
            .await
            .expect("the next leader seen within the short poll after a wake")
            .unwrap();
        assert_eq!(next.leader.map(|h| h.fencing_token), Some(third.term()));
        third.resign().await.unwrap();
    }

    /// A candidate that takes over a while after the release (more than
    /// one short poll) is still seen soon, not a minute later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn observer_sees_a_late_successor_after_a_release() {
        let store = Store::open("memory:").unwrap();
        let e = store.election_with("late", opts("a")).unwrap();
        let first = e.campaign().await.unwrap();
        let mut observer = e.observe(Duration::from_secs(60));
        observer.next().await.unwrap();
        first.resign().await.unwrap();
        let later = e.clone();
        let successor = tokio::spawn(async move {
            tokio::time::sleep(OBSERVER_AFTER_WAKE * 2 + Duration::from_millis(20)).await;
            later.campaign().await.unwrap()
        });
        let mut seen = observer.next().await.unwrap();
        if seen.leader.is_none() {
            seen = tokio::time::timeout(Duration::from_secs(5), observer.next())
                .await
                .expect("the successor seen by the short polls after the wake")
                .unwrap();
        }
        let successor = successor.await.unwrap();
        assert_eq!(seen.leader.map(|h| h.fencing_token), Some(successor.term()));
        successor.resign().await.unwrap();
    }

    #[tokio::test]
    async fn observer_counts_missed_terms_and_streams() {
        use std::future::poll_fn;
        let store = Store::open("memory:").unwrap();
        let e = store.election_with("obs", opts("a")).unwrap();
        use futures_core::Stream;
        async fn next_of(stream: &mut LeaderStream) -> Option<Result<LeaderChange>> {
            poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
        }
        let mut stream = e.observe(Duration::from_millis(10)).into_stream();
        let first = next_of(&mut stream).await.unwrap().unwrap();
        assert_eq!(
            (first.leader, first.last_term, first.missed_terms),
            (None, 0, 0)
        );
        // Two whole terms come and go; the third stays.
        e.campaign().await.unwrap().resign().await.unwrap();
        e.campaign().await.unwrap().resign().await.unwrap();
        let third = e.campaign().await.unwrap();
        let change = next_of(&mut stream).await.unwrap().unwrap();
        assert_eq!(change.leader.map(|h| h.fencing_token), Some(third.term()));
        assert_eq!(change.missed_terms, 2);
        third.resign().await.unwrap();
        let change = next_of(&mut stream).await.unwrap().unwrap();
        assert_eq!((change.leader, change.missed_terms), (None, 0));
    }
}
