//! The conformance suite on the in-memory backend, with store loss
//! simulated by [`MemoryBackend::lose_data`]; and again through a
//! [`Wrapper`](leasehold::backend::Wrapper) that changes nothing, which
//! must forward every operation (a run record or an epoch it dropped would
//! fail the suite).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::memory::MemoryBackend;
use leasehold::{
    backend::{Backend, SystemClock},
    Store,
};

/// The backends made here, by the address of the store's backend.
static BACKENDS: Mutex<Vec<(usize, MemoryBackend)>> = Mutex::new(Vec::new());

fn address(backend: &Arc<dyn Backend>) -> usize {
    Arc::as_ptr(backend) as *const () as usize
}

async fn store() -> Option<Store> {
    Some(store_over(leasehold_testkit::test_store))
}

/// A store over a new memory backend (as `wrap` puts it in a store),
/// registered for [`lose`].
fn store_over(wrap: impl FnOnce(MemoryBackend) -> Store) -> Store {
    // A max TTL short enough for the store-loss test's quarantine, long
    // enough for the suite's longest lease.
    let backend =
        MemoryBackend::with_clock_and_max_ttl(Arc::new(SystemClock), Duration::from_secs(20));
    let store = wrap(backend.clone());
    BACKENDS
        .lock()
        .unwrap()
        .push((address(store.backend()), backend));
    store
}

async fn lose(store: Store) {
    let backends = BACKENDS.lock().unwrap();
    let (_, backend) = backends
        .iter()
        // The newest first: a finished test's address may be reused.
        .rev()
        .find(|(a, _)| *a == address(store.backend()))
        .expect("a store made by store()");
    backend.lose_data();
}

leasehold_testkit::conformance_tests!(store, lose = lose);

mod through_a_wrapper {
    use leasehold::backend::{Backend, Wrapper};
    use leasehold::memory::MemoryBackend;
    use leasehold::Store;

    /// Changes nothing: every operation is the default forwarding.
    #[derive(Debug)]
    struct Plain(MemoryBackend);

    impl Wrapper for Plain {
        fn inner(&self) -> &dyn Backend {
            &self.0
        }
    }

    async fn store() -> Option<Store> {
        Some(super::store_over(|backend| {
            leasehold_testkit::test_store(Plain(backend))
        }))
    }

    use super::lose;
    leasehold_testkit::conformance_tests!(store, lose = lose);
}

/// `memory:` stores start in an epoch that needs no quarantine.
#[tokio::test]
async fn a_new_memory_store_grants_at_once() {
    let store = Store::open("memory:").unwrap();
    let guard = store.lock("k").unwrap().try_acquire().await.unwrap();
    assert!(guard.fencing_token() > leasehold::backend::epoch_token_base(1));
    guard.release().await.unwrap();
}
