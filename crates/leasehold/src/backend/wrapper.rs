//! [`Wrapper`]: a backend that wraps another and changes only some of what
//! it does (fault injection in tests, request counting in the benchmarks,
//! seeded bugs in the torture harness); the rest is forwarded here, once,
//! instead of by hand in every wrapper.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    AcquireOutcome, AcquireRequest, Backend, BatchOutcome, Capabilities, HolderInfo, KeyInfo,
    Lease, ReleaseWatch, StoreEpoch,
};
use crate::{Key, Result, RunRecord};

/// A backend over another one ([`inner`](Self::inner)): every operation
/// it does not define is the inner backend's. Every `Wrapper` is a
/// [`Backend`]. A wrapper that defines [`renew`](Self::renew) but not
/// [`renew_ran`](Self::renew_ran) has its `renew_ran` forwarded to the
/// inner backend's, past its own `renew`: define both where renewals
/// matter.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use async_trait::async_trait;
/// use leasehold::backend::{AcquireOutcome, AcquireRequest, Backend, Wrapper};
/// use leasehold::memory::MemoryBackend;
///
/// /// Counts acquisition attempts.
/// #[derive(Debug, Default)]
/// struct Counting {
///     inner: MemoryBackend,
///     attempts: AtomicU64,
/// }
///
/// #[async_trait]
/// impl Wrapper for Counting {
///     fn inner(&self) -> &dyn Backend {
///         &self.inner
///     }
///     async fn try_acquire(&self, request: &AcquireRequest) -> leasehold::Result<AcquireOutcome> {
///         self.attempts.fetch_add(1, Ordering::Relaxed);
///         self.inner.try_acquire(request).await
///     }
/// }
///
/// let store = leasehold::Store::new(Counting::default());
/// ```
#[async_trait]
pub trait Wrapper: fmt::Debug + Send + Sync + 'static {
    /// The backend underneath.
    fn inner(&self) -> &dyn Backend;

    /// [`Backend::name`].
    fn name(&self) -> &'static str {
        self.inner().name()
    }

    /// [`Backend::capabilities`].
    fn capabilities(&self) -> Capabilities {
        self.inner().capabilities()
    }

    /// [`Backend::try_acquire`].
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        self.inner().try_acquire(request).await
    }

    /// [`Backend::try_acquire_all`]: not forwarded unless defined (the
    /// default answers [`BatchOutcome::Unsupported`]), so that a wrapper
    /// that changes [`try_acquire`](Self::try_acquire) sees every
    /// acquisition through it.
    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<BatchOutcome> {
        let _ = requests;
        Ok(BatchOutcome::Unsupported)
    }

    /// [`Backend::renew`].
    async fn renew(&self, lease: &Lease) -> Result<()> {
        self.inner().renew(lease).await
    }

    /// [`Backend::renew_ran`].
    async fn renew_ran(&self, lease: &Lease) -> Result<Duration> {
        self.inner().renew_ran(lease).await
    }

    /// [`Backend::release`].
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner().release(lease).await
    }

    /// [`Backend::inspect`].
    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        self.inner().inspect(key).await
    }

    /// [`Backend::break_lease`].
    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        self.inner().break_lease(key).await
    }

    /// [`Backend::list`].
    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        self.inner().list(prefix).await
    }

    /// [`Backend::record_run`].
    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        self.inner().record_run(lease, run).await
    }

    /// [`Backend::watch_release`].
    fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.inner().watch_release(keys)
    }

    /// [`Backend::epoch_at_open`].
    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.inner().epoch_at_open()
    }

    /// [`Backend::created_at_open`].
    fn created_at_open(&self) -> Option<bool> {
        self.inner().created_at_open()
    }
}

#[async_trait]
impl<W: Wrapper> Backend for W {
    fn name(&self) -> &'static str {
        Wrapper::name(self)
    }
    fn capabilities(&self) -> Capabilities {
        Wrapper::capabilities(self)
    }
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        Wrapper::try_acquire(self, request).await
    }
    async fn try_acquire_all(&self, requests: &[AcquireRequest]) -> Result<BatchOutcome> {
        Wrapper::try_acquire_all(self, requests).await
    }
    async fn renew(&self, lease: &Lease) -> Result<()> {
        Wrapper::renew(self, lease).await
    }
    async fn renew_ran(&self, lease: &Lease) -> Result<Duration> {
        Wrapper::renew_ran(self, lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        Wrapper::release(self, lease).await
    }
    async fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        Wrapper::inspect(self, key).await
    }
    async fn break_lease(&self, key: &Key) -> Result<Option<HolderInfo>> {
        Wrapper::break_lease(self, key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        Wrapper::list(self, prefix).await
    }
    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        Wrapper::record_run(self, lease, run).await
    }
    fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        Wrapper::watch_release(self, keys)
    }
    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        Wrapper::epoch_at_open(self)
    }
    fn created_at_open(&self) -> Option<bool> {
        Wrapper::created_at_open(self)
    }
}
