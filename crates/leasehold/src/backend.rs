//! The backend trait: the few primitives a store must offer.
//!
//! Everything else (waiting, renewal, loss detection, in-process wake-ups,
//! cancel safety, semaphores, elections, and the store-epoch quarantine) is
//! written once above this trait, in the rest of the crate. A new store
//! implements [`Backend`] and passes the conformance suite (crate
//! `leasehold-testkit`, a dev-dependency of the store's crate: its docs
//! say how to run it on your backend) unchanged. Its
//! builder reads its store URL's query parameters through [`params`], the
//! same rules for every store.
//!
//! # Store epochs: tokens that survive the loss of the store's data
//!
//! A store's data can vanish while a lease is held: a SQLite file deleted or
//! replaced by a backup, an Azure container deleted, a DynamoDB table
//! dropped and re-created. Without care the next holder gets token 1 again
//! and runs while the old holder, which has not noticed yet, still runs.
//! Three rules keep the promise ("the old holder stops before anyone else
//! takes over, and every token is greater than every earlier one"):
//!
//! 1. **Every store has an epoch**, recorded when its file, container or
//!    table is created: the creation time in whole seconds since
//!    2024-01-01T00:00:00Z ([`EPOCH_ORIGIN_UNIX_SECS`]) on the clock the
//!    backend names in its protocol docs (the machine's for SQLite, the
//!    service's for the cloud stores). A later store at the same place has a
//!    later epoch. [`StoreEpoch`] describes it.
//! 2. **Token layout.** A fencing token is `epoch << 22` plus a per-key
//!    counter ([`TOKEN_COUNTER_BITS`]): a grant's token is
//!    [`next_token`]`(last token of the key, epoch)` = `max(last, epoch <<
//!    22) + 1`. The counter is allowed to carry into the epoch bits, so
//!    there is no per-key limit; a token of a later epoch is greater than
//!    every token of an earlier one as long as no key was granted more than
//!    2^22 (about 4 million) times per second of the earlier store's life,
//!    far beyond any backend. Tokens stay below 2^53 (exact in JSON and
//!    JavaScript) until 2092 and below 2^63 (a signed 64-bit integer) for
//!    millennia.
//! 3. **Quarantine, one confirmation window.** A live holder trusts a lease
//!    it has not confirmed for at most the *confirmation window*
//!    W = [`CONFIRMATION_WINDOW`] (60 s), whatever its TTL: its guard's
//!    safety deadline is the send time of its last successful renewal +
//!    min(TTL, W) − safety margin, and it renews at least every W/3. A
//!    process that meets an epoch it has not cleared grants nothing in it
//!    until W (plus 0.1 % for clock rates) has passed on its own monotonic
//!    clock since it first saw the epoch, less the epoch's
//!    [`age`](StoreEpoch::age) where the store can vouch for one (less
//!    0.1 % of it, for a store clock that runs fast). A holder of the lost
//!    data had its last successful renewal before the data was lost, which
//!    was before the new epoch began, so its safety deadline has passed by
//!    then: it was told lost (and `leasehold run` stopped its command)
//!    before the first grant of the new epoch. Waiting callers see
//!    [`Error::Quarantined`](crate::Error::Quarantined) (and
//!    [`WaitReason::Quarantine`](crate::WaitReason)) with the time left.
//!
//!    W is the same for every store and every process: nothing a URL or a
//!    lock's options say changes it (only a test, building its stores with
//!    [`StoreBuilder::confirmation_window`](crate::StoreBuilder::confirmation_window),
//!    every one of them alike, should). The
//!    store's max TTL (a setting
//!    recorded with the epoch, 60 s by default, [`DEFAULT_STORE_MAX_TTL`];
//!    no lease may be longer) bounds how long a *dead* holder keeps a key
//!    from others; it plays no part in the quarantine, because it describes
//!    the new store, not the leases of the data that was lost (issue #28:
//!    a re-creator with the default max TTL used to grant after 60 s while a
//!    holder of the lost store, opened with `?max_ttl=30m`, trusted its
//!    20-minute lease for 18 minutes more). Tests: the conformance suite's
//!    `store_loss_quarantine_outlasts_every_holder` (a holder of the
//!    longest lease its store allows, a re-creator with the default or
//!    shortest max TTL), run by `tests/conformance_sqlite.rs` (file deleted,
//!    backup restored, and an epoch renewed with a shorter max TTL before
//!    the next loss) and by the Redis, PostgreSQL, DynamoDB and Azure
//!    store-loss tests; with real processes,
//!    `crates/leasehold-cli/tests/store_loss.rs` (a frozen holder of a
//!    4-minute lease: its watchdog stops the command before a re-creator
//!    with a 3 s max TTL runs).
//!
//! **Upgrading.** (Which versions may share a store at all is the store's
//! [protocol](protocol), recorded in its epoch marker.) Every process that
//! shares a store must run a version with the confirmation window: an older one still trusts a lease for its whole
//! TTL and quarantines for its store's max TTL, which is the failure above.
//! A SQLite epoch an older version began without proof is read as
//! beginning one window before it would have settled.
//!
//! **Why a confirmation window, and not a store-wide max TTL kept apart
//! from the data.** The other way to bound the quarantine is to record the
//! longest lease the store may hand out somewhere the loss of the lease
//! data does not reach, and quarantine a new epoch for that. But the losses
//! this guards against take everything the store has: `FLUSHALL` on Redis,
//! a replaced SQLite file, a deleted container, table or prefix, a restore
//! of an older copy (which brings back an older, possibly shorter setting).
//! There is no place that survives all of them on every store, and a
//! process that finds the record gone is back to guessing. W needs nothing
//! stored: it lives in the one engine above the backend trait, every
//! process agrees on it because it is a constant, and a re-creator only
//! needs to know it, not the lost store. What it costs: a holder with a
//! TTL above W renews every W/3 (at most one request every 20 s per lease,
//! where a 20-minute TTL used to renew every ~7 minutes) and gives up after
//! a window (less its margin) without confirmation, so a store outage of a
//! minute stops a long job that a long TTL used to ride out; the TTL still
//! says how long a dead holder blocks others. The first use of a store is
//! no slower: a brand-new store's quarantine is W = 60 s, as the default
//! max TTL made it, and none where the store proves no earlier lease is
//! live (below). A store opened with a max TTL below 60 s used to
//! quarantine for that max TTL and now quarantines 60 s: that shorter
//! quarantine was the very thing that let a longer holder of the lost data
//! overlap.
//!
//! Enforcement is split so that the rule is written once: a backend grants
//! only in the epoch the request names ([`AcquireRequest::epoch`]),
//! checked atomically with the grant, and otherwise answers
//! [`AcquireOutcome::OtherEpoch`] without granting; the core (one
//! `EpochGate` per [`Store`](crate::Store)) decides when an epoch is cleared.
//! A holder's renewal that finds another epoch, or no record, is a definitive
//! loss ([`LossReason::Revoked`](crate::LossReason::Revoked)).
//!
//! **When the quarantine is skipped, and why that is safe.** Only where the
//! store proves that no lease of an earlier epoch can be live: it reports an
//! [`age`](StoreEpoch::age) of at least W ([`Duration::MAX`] for a proof
//! that does not depend on time). The SQLite store proves it for a file it
//! creates (or finds replaced) when no process on the machine holds a lease
//! in that directory (a shared `flock` every holder keeps on the directory,
//! see [its docs](crate::sqlite)), and for an epoch whose creation time on
//! the shared boot clock is more than a window ago.
//! DynamoDB reports the table's age on the service's own clock (creation
//! time against the `Date` of a response); Azure the container's (its
//! epoch marker's and the container's `Last-Modified` against the `Date`
//! of a response; see its crate docs). And where the store's creator
//! *states* it: a store created with [`Creation::NewProven`] (`leasehold
//! init --new`: the operator says no store existed at that place before,
//! so no holder of lost data can be live) records in its epoch marker that
//! its epoch is proven, and every backend reports such an epoch as
//! [`StoreEpoch::proven`] (an age of [`Duration::MAX`], as SQLite's
//! directory-lock proof); a later epoch of the same store (its data lost
//! again) is quarantined as usual. Tests: leasehold-cli's
//! `tests/init_and_look.rs`, on every store. "The store was created
//! by this very process" is *not* enough on its own: another process (the
//! old holder) may still run on the lost data, which is exactly the failure
//! this guards against. The cost: after a store is re-created under a live
//! holder, grants wait up to one confirmation window.
//!
//! A process that has seen an epoch refuses an older one (the store went
//! back: a restored copy of an older store), since tokens could repeat.
//!
//! # The contract, operation by operation
//!
//! * [`try_acquire`](Backend::try_acquire): one attempt, no waiting. If the
//!   store's epoch is not [`request.epoch`](AcquireRequest::epoch) (or that
//!   is `None`), answer [`AcquireOutcome::OtherEpoch`] and change nothing
//!   (creating the store if it does not exist is allowed). If the key is
//!   free, or its lease has expired by the backend's own rule, grant it to
//!   the request's lease id with the token [`next_token`]`(last, epoch)`. If
//!   the key is already held by the *same* lease id (a retry after an
//!   ambiguous failure), answer `Acquired` again with the same token and
//!   extend the lease. Otherwise answer `Held`. A TTL above the store's
//!   max TTL is [`Error::InvalidInput`](crate::Error::InvalidInput).
//! * [`try_acquire_all`](Backend::try_acquire_all) (optional): the
//!   requests (at least two, their keys distinct and in byte order, every
//!   one naming the same epoch, none queued) in **one atomic request**: if
//!   every key could be granted by `try_acquire`'s rule (free, expired, or
//!   held by the same request's lease id), grant each one exactly as
//!   `try_acquire` would (its own token [`next_token`]`(last, epoch)`, its
//!   TTL counted from no earlier than the request's send), and answer
//!   [`BatchOutcome::Acquired`]; otherwise change nothing and answer
//!   [`BatchOutcome::Held`] naming the first held key, or
//!   [`BatchOutcome::OtherEpoch`]. A store that takes the keys in one
//!   transaction locks them in the order given, so two batches never wait
//!   for each other in a circle. Safety is `try_acquire`'s, key by key:
//!   each grant is written atomically with its own key's check, and the
//!   caller counts each lease's safety deadline from the batch's send, as
//!   it does for one key. What a batch adds is all-or-nothing in one round
//!   trip; [`MultiLock`](crate::MultiLock) uses it for its first attempt
//!   on plain locks, and takes the keys one by one after it finds one
//!   held. Tests: the conformance suite's `batch_*` (every store that
//!   offers it; the others answer [`BatchOutcome::Unsupported`]).
//! * [`renew`](Backend::renew): extend our lease by its TTL from now. A
//!   definitive "not yours" (someone else holds it, it was broken, the record
//!   is gone, the store's epoch is not the lease's) is
//!   [`Error::LeaseLost`](crate::Error::LeaseLost) with
//!   [`LossReason::Revoked`](crate::LossReason::Revoked); anything that may be
//!   transient is [`Error::Backend`](crate::Error::Backend) with `retryable`.
//! * [`release`](Backend::release): end our lease, keeping the key's fencing
//!   counter. Releasing a lease that is not ours changes nothing and is
//!   [`Error::LeaseLost`](crate::Error::LeaseLost).
//! * [`inspect`](Backend::inspect) and [`list`](Backend::list): what is stored
//!   for a key, including the last fencing token issued.
//! * [`break_lease`](Backend::break_lease): end whatever lease is on the key,
//!   whoever holds it (an administrator's tool). The fencing counter stays.
//!
//! * [`record_run`](Backend::record_run): store how a run under a lease
//!   ended; see [run records](#run-records).
//!
//! Fencing tokens are per key and never repeat or go back: a backend never
//! deletes the counter of a key it has issued tokens for, and a new epoch
//! starts every counter above every earlier token.
//!
//! # Run records
//!
//! A key's record also holds two [`RunRecord`]s: its **last success** and
//! its **last run** (the last attempt, successful or not), for jobs that
//! must run once per period across machines (`leasehold run --once-per`).
//! They are stored with the key's fencing counter, so like it they survive
//! releases, expiries and breaks of the lease; unlike it they are plain
//! data: a store that lost its data (a new epoch) has no record, so the job
//! runs again (at least once per period, never "skipped because of a
//! record that was lost"). A store restored from a copy shows the copy's
//! records: runs that did happen, if perhaps not the latest.
//!
//! [`record_run`](Backend::record_run)`(lease, run)` (`run.fencing_token`
//! is `lease.fencing_token`):
//!
//! 1. **If `lease` is still the key's lease**, by the condition
//!    [`release`](Backend::release) uses (the key carries `lease`'s lease id
//!    in `lease`'s epoch: nobody was granted the key and nobody broke the
//!    lease since; a TTL that ran out with nobody taking over may count
//!    either way, as the store's release has it), set, in **one atomic
//!    write** conditional on exactly that:
//!    last run := `run`, and when `run.outcome` is
//!    [`Succeeded`](crate::RunOutcome::Succeeded), last success := `run` too. The
//!    lease itself stays as it is (the caller releases it next). Answer
//!    `Ok(())`. Writing the same record again (a retry after an ambiguous
//!    failure) is harmless.
//! 2. **Otherwise** never write the last success, and answer
//!    [`Error::LeaseLost`](crate::Error::LeaseLost) (`Revoked`). A backend
//!    should still store a `run` whose outcome is not `Succeeded` as the
//!    last run, if the key has a record (never create one) and that
//!    record's last run has a lower fencing token or there is none (a later
//!    run's record is never replaced by an earlier one); a store that cannot
//!    write without the lease while another holds it may skip this.
//!
//! `ended_at` is stored as given, or replaced by the store's own clock at
//! the write where the store has one the backend can read (its protocol
//! docs say which). [`inspect`](Backend::inspect) and
//! [`list`](Backend::list) return both records
//! ([`KeyInfo::last_success`], [`KeyInfo::last_run`]), read as strongly as
//! the lease state.
//!
//! **Why "once per period" holds.** A success is written only while the
//! writer's lease is the key's lease, atomically with that check, and the
//! next holder is granted only after that lease ends (released, expired or
//! broken): every holder granted after the write reads the success after
//! its grant; a write that would land after another's grant changes
//! nothing. The core only reports `Succeeded` while the guard is not lost
//! (its safety deadline has not passed), so the job's work ended before
//! anyone else could be granted the key. Tests: the conformance suite's
//! `run_*`, `failed_run_is_not_a_success`, `lost_run_records_no_success`,
//! `record_run_by_non_holder_records_no_success` and
//! `store_loss_forgets_runs` (every backend), and with real processes
//! `crates/leasehold-cli/tests/once_per.rs` (five runs at once run the
//! command once, on every store).
//!
//! **Clocks.** "Succeeded less than a period ago" compares the recorded
//! `ended_at` with the reading machine's wall clock
//! ([`Store::last_success_within`](crate::Store::last_success_within)).
//! `ended_at` is stamped by the store's clock where it has one (SQLite: the
//! one machine's clock, so writer and reader agree; Azure: the service's
//! `Date` of the read just before the write, whole seconds), otherwise by
//! the writer's wall clock
//! (memory, DynamoDB). A reader whose clock is `d` ahead of the clock that
//! stamped `ended_at` sees the period end `d` early (a run up to `d` before
//! the period is over), one `d` behind sees it `d` late (a run due is
//! skipped if it comes within `d` of the boundary; the next attempt runs
//! it). So skew well under the period is harmless; NTP-synchronised clocks
//! (milliseconds) are far inside any sensible period. An `ended_at` in the
//! reader's future counts as "just now". Fencing and exclusion never depend
//! on these clocks.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::Serialize;

use crate::error::Result;
use crate::key::Key;
use crate::runs::RunRecord;

pub mod names;
mod observe;
pub mod params;
pub mod protocol;
pub mod shared_builder;
pub mod table_epoch;
mod wrapper;

pub use crate::error::error_chain;
pub use observe::Observations;
pub use wrapper::Wrapper;

pub use crate::listener::{Listener, Released, Subscribe};

pub use crate::clock::{
    Clock, ClockSleep, ManualClock, SharedClock, SystemClock, CLOCK_CHECK_STEP,
};
pub use crate::rwlock::READ_SEGMENT;
pub use crate::store::{default_sqlite_path, sqlite_url_path, BUILTIN_SCHEMES};

/// The primitives a lease store offers. See the [module docs](self) for the
/// contract of each operation.
#[async_trait]
pub trait Backend: fmt::Debug + Send + Sync + 'static {
    /// A short name for errors, logs and metrics ("sqlite", "memory", ...).
    fn name(&self) -> &'static str;

    /// What this backend can do and which TTLs it accepts.
    fn capabilities(&self) -> Capabilities;

    /// One attempt to take the lease described by `request`.
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome>;

    /// One attempt to take every lease of `requests` in one atomic request:
    /// all of them, or none (see [the contract](self#the-contract-operation-by-operation)).
    /// The default, and every [`Wrapper`]'s unless it defines it, is
    /// [`BatchOutcome::Unsupported`]: the caller then takes the keys one
    /// by one with [`try_acquire`](Self::try_acquire).
    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<BatchOutcome> {
        let _ = requests;
        Ok(BatchOutcome::Unsupported)
    }

    /// Extends `lease` by its TTL, counted from the send.
    async fn renew(&self, lease: &Lease) -> Result<()>;

    /// [`renew`](Self::renew), where the store may extend the lease by a
    /// little less: the answer is how much of the TTL had already run out
    /// at the send, as [`Grant::ran`] is for a grant, and the holder's
    /// safety deadline counts from that much earlier. The engine renews
    /// through this. The default is `renew`, with nothing run out; a store
    /// whose renewals can share work this way (etcd: keys moved onto a
    /// lease granted shortly before, instead of one granted for each
    /// renewal) overrides it. A wrapper that forwards only `renew` gets
    /// `renew`'s stricter answer, which is always safe.
    async fn renew_ran(&self, lease: &Lease) -> Result<Duration> {
        self.renew(lease).await.map(|()| Duration::ZERO)
    }

    /// Ends `lease`.
    async fn release(&self, lease: &Lease) -> Result<()>;

    /// What is stored for `key`.
    async fn inspect(&self, key: &Key) -> Result<KeyInfo>;

    /// Ends any lease on `key`; returns the holder it ended, if any.
    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>>;

    /// Every key the store has a record of whose name starts with `prefix`,
    /// in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>>;

    /// Records how a run under `lease` ended, as the key's last run and,
    /// if it succeeded while `lease` was still the key's lease, as its last
    /// success. See [run records](self#run-records) for the contract.
    ///
    /// The default answers [`Error::NotSupported`](crate::Error::NotSupported)
    /// (and fails the conformance suite's run-record tests).
    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        let _ = (lease, run);
        Err(crate::Error::NotSupported(format!(
            "the {} store does not record runs",
            self.name()
        )))
    }

    /// Optional wake-ups across processes: a future that completes when one
    /// of `keys` (a lock's key, a semaphore's slot keys) may have become
    /// free (released or broken by any process), so that a waiter tries
    /// again at once instead of at its next poll. It must be registered by
    /// the time this returns (a release after the call is not missed, even
    /// before the future is first polled). A hint only: it may complete
    /// spuriously or never (a lost connection), and waiters keep polling.
    /// The default, `None`, means polling only.
    fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        let _ = keys;
        None
    }

    /// The store's epoch as this backend read it (or started it) while
    /// opening, if it did. A [`Store`](crate::Store) over the backend starts
    /// from it, so that its first attempt names the epoch at once instead of
    /// first sending one that only learns it. It may be stale: an attempt
    /// naming an epoch the store no longer has is answered
    /// [`AcquireOutcome::OtherEpoch`] as usual. Keep it as an [`EpochRead`],
    /// so that its age is as of the call. The default, `None`.
    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        None
    }

    /// Whether opening this backend created the store: wrote the epoch
    /// row or marker that begins a new store (`Some(true)`), or found one,
    /// written by another process (`Some(false)`, also when it started a
    /// new epoch in a store that was there). Of several processes creating
    /// one new store at the same moment, exactly one is told `Some(true)`:
    /// its conditional write was the one that won. The default, `None`:
    /// the backend cannot tell.
    fn created_at_open(&self) -> Option<bool> {
        None
    }
}

/// What [`Backend::watch_release`] returns.
pub type ReleaseWatch = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;

/// What a backend can do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Shortest TTL the backend accepts.
    pub min_ttl: Duration,
    /// Longest TTL the backend accepts: the store's max TTL (see
    /// [store epochs](self#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)).
    pub max_ttl: Duration,
    /// Whether other processes (on this machine at least) see the same leases.
    pub shared_across_processes: bool,
    /// Whether processes on other machines see the same leases.
    pub shared_across_machines: bool,
    /// Whether an expired lease is only taken over after a waiter has watched
    /// it unchanged for a whole TTL on its own clock (clock-free takeover).
    /// With this, recovering a dead holder's lease can take up to two TTLs.
    pub takeover_needs_observation: bool,
    /// Whether a read ([`inspect`](Backend::inspect)) can show a key's next
    /// fencing token before it shows the key held: an acquisition that
    /// writes the token first and takes the key in a second request (Azure:
    /// the record, then the blob lease). A reader of a reader-writer lock
    /// that read such a key as free might take the token of a writer about
    /// to be granted; with this, it confirms a free key by taking it once
    /// (one attempt, given back at once), which fences that writer out:
    /// the writer starts over with a greater token.
    pub token_visible_before_holder: bool,
    /// Whether the backend queues waiters: an attempt whose
    /// [`AcquireRequest::queue`] is set and that finds the key held may
    /// leave a registration in the store, and the holder's release may
    /// grant the key to it in the same request (a handoff without a second
    /// write). The engine then sets `queue` on a lock's waits only, and
    /// ends a registration that did not get the key (a wait that timed
    /// out, was dropped, or got the key by another attempt) by calling
    /// [`release`](Backend::release) with its lease: the backend deletes
    /// the registration, and releases the key if it had already been
    /// handed it. A later attempt with the same lease id answers
    /// `Acquired` when the key was handed to it.
    pub queues_waiters: bool,
}

impl Capabilities {
    /// Capabilities with the given TTL range and everything else off.
    pub fn new(min_ttl: Duration, max_ttl: Duration) -> Self {
        Capabilities {
            min_ttl,
            max_ttl,
            shared_across_processes: false,
            shared_across_machines: false,
            takeover_needs_observation: false,
            token_visible_before_holder: false,
            queues_waiters: false,
        }
    }

    /// Sets [`shared_across_processes`](Self::shared_across_processes).
    pub fn shared_across_processes(mut self, shared_across_processes: bool) -> Self {
        self.shared_across_processes = shared_across_processes;
        self
    }

    /// Sets [`shared_across_machines`](Self::shared_across_machines).
    pub fn shared_across_machines(mut self, shared_across_machines: bool) -> Self {
        self.shared_across_machines = shared_across_machines;
        self
    }

    /// Sets [`takeover_needs_observation`](Self::takeover_needs_observation).
    pub fn takeover_needs_observation(mut self, takeover_needs_observation: bool) -> Self {
        self.takeover_needs_observation = takeover_needs_observation;
        self
    }

    /// Sets [`token_visible_before_holder`](Self::token_visible_before_holder).
    pub fn token_visible_before_holder(mut self, token_visible_before_holder: bool) -> Self {
        self.token_visible_before_holder = token_visible_before_holder;
        self
    }

    /// Sets [`queues_waiters`](Self::queues_waiters).
    pub fn queues_waiters(mut self, queues_waiters: bool) -> Self {
        self.queues_waiters = queues_waiters;
        self
    }
}

/// An opaque lease id, chosen by the requester before the first attempt so
/// that a retry after an ambiguous failure can be recognised as the same
/// request. It is a random UUID (Azure requires GUID-shaped lease ids).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseId(String);

impl LeaseId {
    /// A fresh random lease id.
    pub fn random() -> Self {
        LeaseId(uuid::Uuid::new_v4().hyphenated().to_string())
    }

    /// Wraps a lease id read back from a store.
    pub fn from_stored(id: impl Into<String>) -> Self {
        LeaseId(id.into())
    }

    /// The id as a string (a hyphenated lowercase UUID for ids made here).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only a prefix: the full id lets anyone renew or release the lease.
        write!(f, "LeaseId({}…)", &self.0[..self.0.len().min(8)])
    }
}

/// Who holds (or asks for) a lease: the machine, the process and an optional
/// label chosen by the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Owner {
    /// Host name of the holder's machine.
    pub host: String,
    /// Process id of the holder.
    pub pid: u32,
    /// Optional label (at most [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes).
    pub label: Option<String>,
}

impl Owner {
    /// This process on this host, without a label.
    pub fn current() -> Self {
        Owner {
            host: hostname(),
            pid: std::process::id(),
            label: None,
        }
    }

    /// Whether this owner is the calling process: the same host name and
    /// process id. A key held by this process is held by another lock or
    /// guard of it (an earlier guard still held, a clone of the lock in
    /// another task): no other process is in the way.
    pub fn is_this_process(&self) -> bool {
        self.pid == std::process::id() && self.host == hostname()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.label {
            Some(label) => write!(f, "{label} on {}, pid {}", self.host, self.pid),
            None => write!(f, "{}, pid {}", self.host, self.pid),
        }
    }
}

fn hostname() -> String {
    // std has no hostname API and one libc call does not justify a crate.
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // on success when the name fits, and we cap at the buffer length anyway.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown-host".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// One attempt to take a lease.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// The key to lease.
    pub key: Key,
    /// The id the new lease will carry.
    pub lease_id: LeaseId,
    /// How long the lease lasts without renewal, within the backend's range.
    pub ttl: Duration,
    /// Who asks.
    pub owner: Owner,
    /// Optional user data stored with the lease.
    pub data: Option<String>,
    /// The store epoch the caller has cleared: grant only if the store is in
    /// this epoch, checked atomically with the grant; otherwise (or when
    /// `None`) answer [`AcquireOutcome::OtherEpoch`] and grant nothing.
    pub epoch: Option<u64>,
    /// The caller waits for the key if it is held (a lock's wait, not a
    /// single attempt; set from the attempt after one answered "held", so
    /// that an uncontended acquisition sends nothing more): a backend that
    /// queues waiters (see [`Capabilities::queues_waiters`]) may register
    /// this request to be handed the key; others ignore it.
    pub queue: bool,
}

/// The answer to one [`Backend::try_acquire`].
#[derive(Debug, Clone)]
pub enum AcquireOutcome {
    /// The lease is ours.
    Acquired(Grant),
    /// Someone else holds the key; who, when the backend can tell.
    Held(Option<HolderInfo>),
    /// The store is not in the epoch the request named; nothing was granted.
    OtherEpoch(StoreEpoch),
}

/// The answer to one [`Backend::try_acquire_all`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BatchOutcome {
    /// Every lease is ours: one grant per request, in the requests' order.
    Acquired(Vec<Grant>),
    /// The key of request `index` is held by someone else (who, when the
    /// backend can tell); nothing was granted or changed.
    Held {
        /// The first request (in the requests' order) whose key is held.
        index: usize,
        /// Its holder, when the backend can tell.
        holder: Option<HolderInfo>,
    },
    /// The store is not in the epoch the requests named; nothing was
    /// granted.
    OtherEpoch(StoreEpoch),
    /// The backend takes keys only one at a time.
    Unsupported,
}

/// Seconds since the Unix epoch of store epoch 0: 2024-01-01T00:00:00Z.
pub const EPOCH_ORIGIN_UNIX_SECS: u64 = 1_704_067_200;

/// Low bits of a fencing token that count grants within an epoch (the
/// counter may carry into the epoch bits; see the [module docs](self)).
pub const TOKEN_COUNTER_BITS: u32 = 22;

/// The max TTL a store is created with unless told otherwise.
pub const DEFAULT_STORE_MAX_TTL: Duration = Duration::from_secs(60);

/// The confirmation window W: the longest a live holder trusts a lease it
/// has not confirmed, and the quarantine of a store epoch new to a
/// process. The same for every store and every process, whatever a URL or
/// a lock's TTL says (see
/// [store epochs](self#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)).
pub const CONFIRMATION_WINDOW: Duration = Duration::from_secs(60);

/// What opening a backend may do to its store: the one access mode every
/// backend's builder takes (`creation(...)`), and the store opener
/// (`leasehold-stores`) passes through.
///
/// The store is what a backend creates on first use: the SQLite file and
/// its tables, the PostgreSQL or DynamoDB table, the Azure container, and
/// in each the epoch marker (for Redis and etcd, the marker under the
/// prefix is all there is to create).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Creation {
    /// Create the store when it is missing (and start a new epoch where
    /// its epoch marker is missing or lost), as taking a lease needs. A new
    /// epoch is quarantined for one [`CONFIRMATION_WINDOW`] unless the
    /// store proves that no earlier lease can be live. The default.
    #[default]
    IfMissing,
    /// Never create or change anything, on opening or after: a store that
    /// does not exist is [`Error::NoStore`](crate::Error::NoStore), and an
    /// epoch marker that is missing or stale is reported, not renewed.
    /// For looking (`leasehold list`, `status`, `leader`) and breaking
    /// only: `inspect`, `list` and `break_lease` then write nothing but the
    /// break itself; taking leases needs [`IfMissing`](Self::IfMissing).
    Never,
    /// Create the store if it is missing, as [`IfMissing`](Self::IfMissing),
    /// and record its new epoch as **proven**: settled at once, in every
    /// process, with no quarantine ([`StoreEpoch::is_proven`]). This is the
    /// caller's statement that no store existed at this place before, so
    /// no holder of lost data can be live (`leasehold init --new`). Only an
    /// epoch this open creates is marked; a store that exists keeps its
    /// epoch as it is (check first, as `leasehold init --new` does, to
    /// refuse that case).
    NewProven,
}

impl Creation {
    /// Whether opening may create the store.
    pub fn creates(self) -> bool {
        !matches!(self, Creation::Never)
    }

    /// What a backend opened with `self` does after opening: the statement
    /// of [`NewProven`](Self::NewProven) is about the store as it was when
    /// opened, so a store created again later (its data lost under this
    /// backend) is created as with [`IfMissing`](Self::IfMissing), and
    /// quarantined.
    pub fn after_open(self) -> Creation {
        match self {
            Creation::NewProven => Creation::IfMissing,
            other => other,
        }
    }
}

/// A store's epoch, as a backend reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreEpoch {
    /// The epoch: the store's creation time in seconds since
    /// [`EPOCH_ORIGIN_UNIX_SECS`] (at least 1).
    pub epoch: u64,
    /// The store's max TTL, recorded with the epoch: no lease in this epoch
    /// is longer. It says nothing about the leases of an earlier epoch, so
    /// the quarantine does not depend on it (it lasts
    /// [`CONFIRMATION_WINDOW`]).
    pub max_ttl: Duration,
    /// How long ago the epoch began, at least, by a clock the store trusts;
    /// `None` when it cannot tell (then the whole quarantine applies from
    /// when this process first sees the epoch). A store that proved that no
    /// lease of an earlier epoch can be live reports [`Duration::MAX`].
    pub age: Option<Duration>,
}

impl StoreEpoch {
    /// An epoch of unknown age.
    pub fn new(epoch: u64, max_ttl: Duration) -> Self {
        StoreEpoch {
            epoch,
            max_ttl,
            age: None,
        }
    }

    /// Sets [`age`](Self::age).
    pub fn with_age(mut self, age: Option<Duration>) -> Self {
        self.age = age;
        self
    }

    /// The epoch marked proven: the store proved (or its creator stated,
    /// [`Creation::NewProven`]) that no lease of an earlier epoch can be
    /// live, so it is settled at once: an [`age`](Self::age) of
    /// [`Duration::MAX`], the one way every backend reports it.
    pub fn proven(self) -> Self {
        self.with_age(Some(Duration::MAX))
    }

    /// Whether the epoch is proven (see [`proven`](Self::proven)).
    pub fn is_proven(&self) -> bool {
        self.age == Some(Duration::MAX)
    }

    /// The first token of this epoch, less one: `epoch << 22`.
    pub fn token_base(&self) -> u64 {
        epoch_token_base(self.epoch)
    }
}

/// A store epoch as a backend read it, kept for
/// [`Backend::epoch_at_open`]: asked for later, its age has grown by the
/// time since the read (on this process's monotonic clock), so a process
/// that waited out a quarantine after opening does not wait it again.
#[derive(Debug, Clone)]
pub struct EpochRead {
    epoch: StoreEpoch,
    at: std::time::Instant,
}

impl EpochRead {
    /// `epoch`, read just now.
    pub fn now(epoch: StoreEpoch) -> Self {
        EpochRead {
            epoch,
            at: std::time::Instant::now(),
        }
    }

    /// The epoch, its age (where known) as of now.
    pub fn as_of_now(&self) -> StoreEpoch {
        let since = self.at.elapsed();
        let age = self.epoch.age.map(|a| a.saturating_add(since));
        self.epoch.clone().with_age(age)
    }
}

/// The epoch of a store created at `at`: whole seconds since
/// [`EPOCH_ORIGIN_UNIX_SECS`], at least 1.
pub fn epoch_at(at: SystemTime) -> u64 {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    secs.saturating_sub(EPOCH_ORIGIN_UNIX_SECS).max(1)
}

/// The epoch of a store created by a writer that saw no store at
/// `missing_at`, by the clock it writes with: the second after that one (or
/// a later one, `now`'s), with how long to wait, from `now`, for that
/// second to begin. A store deleted and created again within one second
/// thus still gets a later epoch than the one it replaced, whose marker was
/// written before it was seen missing (with `epoch_at(now)` alone, both had
/// the same epoch, and the new store's first tokens repeated the old one's).
/// A writer that waits before writing its marker keeps a store created
/// again after it, by the same clock, above its own as well.
pub fn epoch_after(missing_at: SystemTime, now: SystemTime) -> (u64, Duration) {
    let next = epoch_at(missing_at) + 1;
    let current = epoch_at(now);
    if current >= next {
        return (current, Duration::ZERO);
    }
    let begins = UNIX_EPOCH + Duration::from_secs(EPOCH_ORIGIN_UNIX_SECS + next);
    (next, begins.duration_since(now).unwrap_or_default())
}

/// `epoch << 22`: every token of `epoch` is above it.
pub fn epoch_token_base(epoch: u64) -> u64 {
    epoch.saturating_mul(1 << TOKEN_COUNTER_BITS)
}

/// The token of the next grant of a key whose last token was `last`, in
/// `epoch`: `max(last, epoch << 22) + 1`.
pub fn next_token(last: u64, epoch: u64) -> u64 {
    last.max(epoch_token_base(epoch)).saturating_add(1)
}

/// What a successful acquisition returns. Two grants are equal when their
/// tokens are: the same grant answered twice (a retry with the same lease
/// id) may have had different parts of its TTL run out at each answer.
#[derive(Debug, Clone, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The fencing token of this acquisition.
    pub fencing_token: u64,
    /// How much of the lease's TTL had already run out when the request was
    /// sent: zero where the store starts the TTL with the grant (every
    /// store but one). A store that attaches the key to a lease already
    /// running, which lives at least TTL − `ran` after the send (etcd's
    /// lease shared by a process's keys), says so here, and the holder's
    /// safety deadline counts from that much earlier, so that it never
    /// trusts the key longer than the store keeps it.
    pub ran: Duration,
}

impl PartialEq for Grant {
    fn eq(&self, other: &Self) -> bool {
        self.fencing_token == other.fencing_token
    }
}

impl Grant {
    /// A grant with the given fencing token, its TTL counted from the send.
    pub fn new(fencing_token: u64) -> Self {
        Grant {
            fencing_token,
            ran: Duration::ZERO,
        }
    }

    /// The grant with `ran` of its TTL already run out at the send (see
    /// [`ran`](Self::ran)).
    pub fn ran(mut self, ran: Duration) -> Self {
        self.ran = ran;
        self
    }
}

/// A lease we hold, as passed to [`Backend::renew`] and [`Backend::release`].
#[derive(Debug, Clone)]
pub struct Lease {
    /// The leased key.
    pub key: Key,
    /// Our lease id.
    pub lease_id: LeaseId,
    /// The TTL the lease was taken with.
    pub ttl: Duration,
    /// The fencing token it was granted with.
    pub fencing_token: u64,
    /// The store epoch it was granted in.
    pub epoch: u64,
}

/// The current holder of a key, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HolderInfo {
    /// Who holds it.
    pub owner: Owner,
    /// The data they stored with the lease.
    pub data: Option<String>,
    /// The fencing token of their acquisition.
    pub fencing_token: u64,
    /// When they acquired it (their wall clock), when known.
    #[serde(rename = "acquired_at_unix_ms", serialize_with = "ser_time")]
    pub acquired_at: Option<SystemTime>,
    /// How long until the lease runs out without renewal, on the backend's
    /// clock, when the backend can tell.
    #[serde(rename = "expires_in_ms", serialize_with = "ser_duration")]
    pub expires_in: Option<Duration>,
    /// The TTL they asked for, when known.
    #[serde(rename = "ttl_ms", serialize_with = "ser_duration")]
    pub ttl: Option<Duration>,
}

impl HolderInfo {
    /// Holder information with only the owner and token known.
    pub fn new(owner: Owner, fencing_token: u64) -> Self {
        HolderInfo {
            owner,
            data: None,
            fencing_token,
            acquired_at: None,
            expires_in: None,
            ttl: None,
        }
    }

    /// Sets the user data.
    pub fn with_data(mut self, data: Option<String>) -> Self {
        self.data = data;
        self
    }

    /// Sets the acquisition time.
    pub fn with_acquired_at(mut self, acquired_at: Option<SystemTime>) -> Self {
        self.acquired_at = acquired_at;
        self
    }

    /// Sets the remaining lease time.
    pub fn with_expires_in(mut self, expires_in: Option<Duration>) -> Self {
        self.expires_in = expires_in;
        self
    }

    /// Sets the TTL.
    pub fn with_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl;
        self
    }
}

/// What a store knows about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KeyInfo {
    /// The key.
    pub key: Key,
    /// The last fencing token issued for the key (0 if none ever was).
    pub fencing_token: u64,
    /// The current holder, if the key is held.
    pub holder: Option<HolderInfo>,
    /// The key's last successful run, if one was recorded (see
    /// [run records](self#run-records)).
    pub last_success: Option<RunRecord>,
    /// The key's last recorded run, successful or not.
    pub last_run: Option<RunRecord>,
}

impl KeyInfo {
    /// Builds a key description (with no run records).
    pub fn new(key: Key, fencing_token: u64, holder: Option<HolderInfo>) -> Self {
        KeyInfo {
            key,
            fencing_token,
            holder,
            last_success: None,
            last_run: None,
        }
    }

    /// Sets [`last_success`](Self::last_success) and
    /// [`last_run`](Self::last_run).
    pub fn with_runs(
        mut self,
        last_success: Option<RunRecord>,
        last_run: Option<RunRecord>,
    ) -> Self {
        self.last_success = last_success;
        self.last_run = last_run;
        self
    }
}

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

fn ser_time<S: serde::Serializer>(
    t: &Option<SystemTime>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
        // Milliseconds since the Unix epoch: unambiguous and easy for jq.
        Some(d) => s.serialize_some(&(d.as_millis() as u64)),
        None => s.serialize_none(),
    }
}

fn ser_duration<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&(d.as_millis() as u64)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_created_again_in_the_same_second_gets_a_later_epoch() {
        let origin = UNIX_EPOCH + Duration::from_secs(EPOCH_ORIGIN_UNIX_SECS);
        // Seen missing 0.3 s into second 100, written 0.1 s later: epoch
        // 101, 0.6 s from now.
        let missing = origin + Duration::from_millis(100_300);
        let now = origin + Duration::from_millis(100_400);
        assert_eq!(epoch_at(missing), 100);
        assert_eq!(epoch_after(missing, now), (101, Duration::from_millis(600)));
        // Written seconds later: that second's epoch, at once.
        let later = origin + Duration::from_millis(103_500);
        assert_eq!(epoch_after(missing, later), (103, Duration::ZERO));
        // Exactly at the next second: at once.
        let next = origin + Duration::from_secs(101);
        assert_eq!(epoch_after(missing, next), (101, Duration::ZERO));
    }

    #[test]
    fn an_epoch_read_earlier_is_older_by_the_time_since() {
        let known = StoreEpoch::new(7, Duration::from_secs(60)).with_age(Some(Duration::ZERO));
        let read = EpochRead::now(known);
        let unknown = EpochRead::now(StoreEpoch::new(7, Duration::from_secs(60)));
        let before = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let waited = before.elapsed();
        assert!(read.as_of_now().age.unwrap() >= waited);
        assert_eq!(
            unknown.as_of_now().age,
            None,
            "an unknown age stays unknown"
        );
    }

    #[test]
    fn tokens_of_a_later_epoch_are_above_every_earlier_one() {
        let e1 = epoch_at(UNIX_EPOCH + Duration::from_secs(EPOCH_ORIGIN_UNIX_SECS + 1_000));
        let e2 = epoch_at(UNIX_EPOCH + Duration::from_secs(EPOCH_ORIGIN_UNIX_SECS + 1_001));
        assert_eq!((e1, e2), (1_000, 1_001));
        assert_eq!(next_token(0, e1), (1_000 << 22) + 1);
        // Counters continue within an epoch, and may carry past its block.
        let mut t = next_token(0, e1);
        for _ in 0..5 {
            t = next_token(t, e1);
        }
        assert_eq!(t, (1_000 << 22) + 6);
        assert_eq!(next_token((1_001 << 22) - 1, e1), 1_001 << 22);
        // A later epoch starts above an earlier epoch's tokens (up to 2^22
        // grants per second of the earlier epoch's life).
        assert!(next_token(0, e2) > t);
        // An older counter (a store from before epochs) jumps to the base.
        assert_eq!(next_token(7, e2), (1_001 << 22) + 1);
        // Clocks before the origin still give epoch 1; tokens stay below
        // 2^53 until 2092.
        assert_eq!(epoch_at(UNIX_EPOCH), 1);
        let y2092 =
            epoch_at(UNIX_EPOCH + Duration::from_secs(EPOCH_ORIGIN_UNIX_SECS + 68 * 365 * 86_400));
        assert!(next_token(0, y2092) < 1 << 53);
    }
}
