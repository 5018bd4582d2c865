//! Bugs injected on purpose, to show that a short torture run catches them.
//!
//! [`GrantHeld`] wraps a real backend and, now and then, grants a key that
//! someone else holds (with the next fencing token, as a backend that lost a
//! race but believed it won would). It then keeps the bogus lease alive: its
//! renewals and release answer Ok without asking the store. The rightful
//! holder keeps working, so the two critical sections overlap; fencing
//! rejects the older holder's writes, and the checker must flag the overlap.
//!
//! `old-window` undoes the fix of issue 28 (item 8) in the holders'
//! environment: each holder's confirmation window becomes the max TTL its
//! own store URL gives, as every process behaved before the window existed
//! (a process's window was its backend's max TTL): a holder trusts an
//! unconfirmed lease for its whole TTL, and a process that meets a new
//! store epoch quarantines it for its own max TTL, not one window every
//! process shares. With mixed max TTLs and the `loss-partition` fault, a
//! holder of a long lease of the lost data, cut off from the store, works
//! on while a holder with the short max TTL already has the key in the
//! re-created store. (The bug once took the window away instead, leaving
//! a test build's fallback, the backend's max TTL: read at every use, it
//! followed the epoch a holder met last. Since the test kit (issue 51) a
//! store's window is fixed when it is opened, after the backend has read
//! the first epoch's long max TTL: every holder quarantined the second
//! epoch for 20 s too, the 30 s run ended before anyone got a lease in it,
//! and the bug went uncaught. The URL's max TTL keeps short and long
//! windows side by side whatever epoch a holder meets first.)
//!
//! `epochless-tokens` wraps a real backend and drops the store epoch from
//! every token it grants (the low 22 bits only: the count within the
//! epoch), as a store without epochs would: after a loss of the store's
//! data, tokens start again below the lost store's. Renewals and releases
//! still name the real token. The checker must flag the token order
//! across the loss.
//!
//! `readers-ignore-writer` wraps a real backend and describes every key
//! another process holds as free when read (`inspect`), as a store whose
//! reads miss other clients' recent writes would: a reader of a reader-writer lock
//! then passes its check of the writer's key while a writer holds it. The
//! checker must flag the reader and the writer working at once.
//!
//! Never used outside `leasehold-torture run --inject-bug`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use leasehold::backend::{AcquireOutcome, AcquireRequest, Backend, Grant, Lease, LeaseId, Wrapper};
use leasehold::{Result, Store};
use rand::Rng;

/// The bugs `--inject-bug` knows.
pub const BUGS: &[&str] = &[
    "grant-held",
    "old-window",
    "epochless-tokens",
    "readers-ignore-writer",
];

/// Whether `bug` wraps the library workers' backend (the others are made by
/// the coordinator, in the holders' environment).
pub fn wraps_backend(bug: &str) -> bool {
    matches!(
        bug,
        "grant-held" | "epochless-tokens" | "readers-ignore-writer"
    )
}

/// Whether `bug` gives each holder its own URL's max TTL as its
/// confirmation window (see the module docs).
pub fn removes_window(bug: &str) -> bool {
    bug == "old-window"
}

/// Wraps `store`'s backend in the named bug.
pub fn inject(store: Store, bug: &str) -> anyhow::Result<Store> {
    match bug {
        "grant-held" => Ok(tested(GrantHeld {
            inner: store.backend().clone(),
            one_in: 4,
            bogus: Arc::default(),
        })),
        "epochless-tokens" => Ok(tested(EpochlessTokens {
            inner: store.backend().clone(),
            real: Arc::default(),
        })),
        "readers-ignore-writer" => Ok(tested(ReadersIgnoreWriter {
            inner: store.backend().clone(),
        })),
        _ => anyhow::bail!("unknown bug {bug:?}; known: {}", BUGS.join(", ")),
    }
}

/// A store over `backend` with the window the store it wraps had (the
/// tests' window, in a build with the opener's `test-window` feature, as
/// torture's builds have).
fn tested(backend: impl Backend) -> Store {
    leasehold_stores::apply_test_window(Store::new(backend))
}

/// A backend that grants one in `one_in` attempts on a held key anyway.
#[derive(Debug)]
pub struct GrantHeld {
    inner: Arc<dyn Backend>,
    one_in: u32,
    bogus: Arc<Mutex<HashSet<LeaseId>>>,
}

impl GrantHeld {
    fn is_bogus(&self, lease: &Lease) -> bool {
        self.bogus.lock().unwrap().contains(&lease.lease_id)
    }
}

#[async_trait]
impl Wrapper for GrantHeld {
    fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        match self.inner.try_acquire(request).await? {
            AcquireOutcome::Held(holder) if rand::rng().random_ratio(1, self.one_in) => {
                let last = self.inner.inspect(&request.key).await?.fencing_token;
                self.bogus.lock().unwrap().insert(request.lease_id.clone());
                let _ = holder;
                Ok(AcquireOutcome::Acquired(Grant::new(last + 1)))
            }
            other => Ok(other),
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        if self.is_bogus(lease) {
            return Ok(());
        }
        self.inner.renew(lease).await
    }

    async fn renew_ran(&self, lease: &Lease) -> Result<std::time::Duration> {
        if self.is_bogus(lease) {
            return Ok(std::time::Duration::ZERO);
        }
        self.inner.renew_ran(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        if self.bogus.lock().unwrap().remove(&lease.lease_id) {
            return Ok(());
        }
        self.inner.release(lease).await
    }
}

/// A backend whose grants' tokens lack the store epoch (see the module
/// docs).
#[derive(Debug)]
pub struct EpochlessTokens {
    inner: Arc<dyn Backend>,
    /// The real token of each lease handed out with a cut one.
    real: Arc<Mutex<HashMap<LeaseId, u64>>>,
}

impl EpochlessTokens {
    /// `lease` as the store knows it: with its real token.
    fn real(&self, lease: &Lease) -> Lease {
        let mut lease = lease.clone();
        if let Some(token) = self.real.lock().unwrap().get(&lease.lease_id) {
            lease.fencing_token = *token;
        }
        lease
    }
}

#[async_trait]
impl Wrapper for EpochlessTokens {
    fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        match self.inner.try_acquire(request).await? {
            AcquireOutcome::Acquired(grant) => {
                let token = grant.fencing_token;
                self.real
                    .lock()
                    .unwrap()
                    .insert(request.lease_id.clone(), token);
                let cut = token & ((1 << leasehold::backend::TOKEN_COUNTER_BITS) - 1);
                Ok(AcquireOutcome::Acquired(Grant::new(cut)))
            }
            other => Ok(other),
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.inner.renew(&self.real(lease)).await
    }

    async fn renew_ran(&self, lease: &Lease) -> Result<std::time::Duration> {
        self.inner.renew_ran(&self.real(lease)).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let real = self.real(lease);
        self.real.lock().unwrap().remove(&lease.lease_id);
        self.inner.release(&real).await
    }

    async fn record_run(&self, lease: &Lease, run: &leasehold::RunRecord) -> Result<()> {
        self.inner.record_run(&self.real(lease), run).await
    }
}

/// A backend whose reads of a key show no holder (see the module docs).
#[derive(Debug)]
pub struct ReadersIgnoreWriter {
    inner: Arc<dyn Backend>,
}

#[async_trait]
impl Wrapper for ReadersIgnoreWriter {
    fn inner(&self) -> &dyn Backend {
        self.inner.as_ref()
    }

    async fn inspect(&self, key: &leasehold::Key) -> Result<leasehold::backend::KeyInfo> {
        let mut info = self.inner.inspect(key).await?;
        // Another process's holder only: a side's read of its own lease,
        // after its gate's read, still finds it (else no side would ever
        // pass its gate, and the run would hold nothing to check).
        if info
            .holder
            .as_ref()
            .is_some_and(|h| h.owner.pid != std::process::id())
        {
            info.holder = None;
        }
        Ok(info)
    }
}
