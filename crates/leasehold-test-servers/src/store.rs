//! A server store's test set-up, written once for every store that talks
//! to a server by URL (PostgreSQL, Redis, etcd): the shared test server's
//! URL and whether it is there, a store of each test binary run's own on
//! it (a table, a key prefix), backends out of quarantine, and waiters
//! ready for wake-ups. A store's tests implement [`ServerStore`] for a
//! type of theirs, naming its builder's few methods, and
//! [`server_store_helpers!`](crate::server_store_helpers) writes the
//! `common::url()`, `common::backend()`, ... their test files call.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{reachable, server_url, unique_name, with_params};
use leasehold::backend::{Backend, StoreEpoch};
use leasehold::Result;
use leasehold::Store;
use leasehold_testkit::conformance::skip;
use leasehold_testkit::test_store;

/// A store whose tests run against a server (see the module's docs): what
/// it is called, where its test server is, and the builder methods the
/// shared set-up uses.
pub trait ServerStore: Sized + 'static {
    /// The store's backend.
    type Backend: Backend;
    /// Its builder.
    type Builder: fmt::Debug + Send;

    /// How "SKIPPED ..." lines name it, and its script: `scripts/{NAME}.sh`.
    const NAME: &'static str;
    /// How messages name its server (`PostgreSQL`).
    const SERVER: &'static str;
    /// The variable that names the shared test server's URL.
    const URL_VAR: &'static str;
    /// The URL when the variable is not set: what `scripts/{NAME}.sh url`
    /// prints.
    const DEFAULT_URL: &'static str;
    /// The server's port when a URL names none.
    const DEFAULT_PORT: u16;
    /// The URL parameter that gives a store of its own on the server
    /// (`table`, `prefix`).
    const NAMESPACE: &'static str;
    /// The test stores' max TTL: above every TTL the tests use, and the
    /// quarantine of a new store (see [`settled`](Self::settled)).
    const MAX_TTL: Duration = Duration::from_secs(5);

    /// A store name (the [`NAMESPACE`](Self::NAMESPACE) parameter's value)
    /// no other test run uses.
    fn unique_namespace() -> String;
    /// The builder for `url`.
    fn from_url(url: &str) -> Result<Self::Builder>;
    /// The builder with wake-ups on or off.
    fn wake_ups(builder: Self::Builder, on: bool) -> Self::Builder;
    /// The builder with a request timeout.
    fn request_timeout(builder: Self::Builder, timeout: Duration) -> Self::Builder;
    /// The backend the builder opens.
    fn build(builder: Self::Builder) -> impl Future<Output = Result<Self::Backend>> + Send;
    /// The store's epoch, as the backend reads it.
    fn epoch(backend: &Self::Backend) -> impl Future<Output = Result<StoreEpoch>> + Send;
    /// Returns once the backend hears other processes' releases.
    fn listening(backend: &Self::Backend) -> impl Future<Output = ()> + Send;

    /// The shared test server's URL: `$URL_VAR`, else the default.
    fn url() -> String {
        server_url(Self::URL_VAR, Self::DEFAULT_URL)
    }

    /// [`url`](Self::url) on the store `namespace`, max TTL
    /// [`MAX_TTL`](Self::MAX_TTL).
    fn url_for(namespace: &str) -> String {
        with_params(
            &Self::url(),
            &format!(
                "{}={namespace}&max_ttl={}s",
                Self::NAMESPACE,
                Self::MAX_TTL.as_secs()
            ),
        )
    }

    /// Whether something accepts TCP connections at the URL's (first)
    /// host and port (a URL the store refuses is said first).
    fn reachable() -> std::result::Result<(), String> {
        let url = Self::url();
        Self::from_url(&url).map_err(|e| e.to_string())?;
        reachable(
            &url,
            Self::DEFAULT_PORT,
            Self::SERVER,
            Self::NAME,
            Self::URL_VAR,
        )
    }

    /// `make()` when the server is there; if not, `None` after saying so
    /// (or a failed test under `LEASEHOLD_REQUIRE_EMULATORS=1`, see
    /// [`skip`]).
    fn or_skip<T>(make: impl FnOnce() -> T) -> Option<T> {
        match Self::reachable() {
            Ok(()) => Some(make()),
            Err(why) => skip(Self::NAME, &why),
        }
    }

    /// Whether the server is there (see [`or_skip`](Self::or_skip)).
    fn available() -> bool {
        Self::or_skip(|| ()).is_some()
    }

    /// The store of this test binary run: made once, unique, so runs never
    /// see each other.
    fn namespace() -> &'static str {
        static NAMESPACES: Mutex<Option<HashMap<TypeId, &'static str>>> = Mutex::new(None);
        let mut names = NAMESPACES.lock().unwrap_or_else(|e| e.into_inner());
        names
            .get_or_insert_with(HashMap::new)
            .entry(TypeId::of::<Self>())
            .or_insert_with(|| Box::leak(Self::unique_namespace().into_boxed_str()))
    }

    /// A builder on the store `namespace`, or `None` (skipped) when there
    /// is no server.
    fn builder_for(namespace: &str) -> Option<Self::Builder> {
        Self::or_skip(|| Self::from_url(&Self::url_for(namespace)).expect("test URL"))
    }

    /// A backend on the run's store, or `None` (skipped), once the store
    /// is out of quarantine.
    fn backend() -> impl Future<Output = Option<Self::Backend>> + Send {
        Self::backend_on(Self::namespace())
    }

    /// A backend on the store `namespace`, or `None` (skipped), once the
    /// store is out of quarantine.
    fn backend_on(namespace: &str) -> impl Future<Output = Option<Self::Backend>> + Send {
        let builder = Self::builder_for(namespace);
        async {
            let backend = Self::build(builder?)
                .await
                .unwrap_or_else(|e| panic!("open {}: {e:?}", Self::SERVER));
            Self::settled(&backend).await;
            Some(backend)
        }
    }

    /// A [`Store`] over [`backend`](Self::backend).
    fn store() -> impl Future<Output = Option<Store>> + Send {
        async { Some(test_store(Self::backend().await?)) }
    }

    /// Waits until a new store's quarantine is over (one fresh store per
    /// test binary run: every test would otherwise start with that wait).
    fn settled(backend: &Self::Backend) -> impl Future<Output = ()> + Send {
        async move {
            // A new epoch may begin at the server clock's next second (Redis):
            // until then its age reads 0, so ask again until it is old enough.
            loop {
                let epoch = Self::epoch(backend).await.expect("read the epoch");
                let full = epoch.max_ttl + epoch.max_ttl / 1000 + Duration::from_millis(50);
                let age = epoch.age.unwrap_or_default();
                if age >= full {
                    return;
                }
                tokio::time::sleep(full - age).await;
            }
        }
    }

    /// For [`wake_up_tests!`](leasehold_testkit::wake_up_tests): a holder on the run's
    /// store, and a waiter over a backend of its own (its own connections
    /// and wake-up channel, as another machine would have), listening, both
    /// past the store's quarantine; `None` (skipped) when there is no
    /// server.
    fn wake_up_stores(wake_ups: bool) -> impl Future<Output = Option<(Store, Store)>> + Send {
        async move {
            let holder = Self::backend().await?;
            let builder = Self::wake_ups(Self::builder_for(Self::namespace())?, wake_ups);
            let waiter = Self::build(builder).await.unwrap();
            Self::listening(&waiter).await;
            // The waiter may read the epoch's age in whole seconds, rounded
            // down (etcd): just after the holder's quarantine it may see a
            // few milliseconds of it left, and wait them out plus a whole
            // (10 s) poll, not for a wake-up.
            Self::settled(&waiter).await;
            Some((test_store(holder), test_store(waiter)))
        }
    }

    /// A backend on the shared server's store `namespace` with more URL
    /// parameters (`&max_ttl=30m`), not waiting out any quarantine.
    fn open(namespace: &str, params: &str) -> impl Future<Output = Arc<dyn Backend>> + Send {
        let url = with_params(
            &Self::url(),
            &format!("{}={namespace}{params}", Self::NAMESPACE),
        );
        async move { Self::open_url(&url).await }
    }

    /// A backend on `url` (a private server's), as [`open`](Self::open).
    fn open_url(url: &str) -> impl Future<Output = Arc<dyn Backend>> + Send {
        let builder = Self::from_url(url).unwrap();
        async move { Arc::new(Self::build(builder).await.unwrap()) as Arc<dyn Backend> }
    }

    /// A backend on `url` (a private server's) that gives up on a request
    /// after a second, not waiting out any quarantine.
    fn private_backend(url: &str) -> impl Future<Output = Self::Backend> + Send {
        let builder = Self::request_timeout(Self::from_url(url).unwrap(), Duration::from_secs(1));
        async move { Self::build(builder).await.unwrap() }
    }
}

/// A fresh store name made of `prefix`, 12 random hex digits and `suffix`.
pub fn unique_namespace(prefix: &str, suffix: &str) -> String {
    format!("{}{suffix}", unique_name(prefix))
}

/// In an `impl ServerStore`, its `Backend` and `Builder` types and the
/// builder methods for a store whose builder has the usual `from_url`,
/// `wake_ups`, `request_timeout` and async `build`, and whose backend has
/// async `epoch` and `listening`.
#[macro_export]
macro_rules! server_store_methods {
    ($backend:ty, $builder:ty) => {
        type Backend = $backend;
        type Builder = $builder;

        fn from_url(url: &str) -> $crate::leasehold::Result<$builder> {
            <$builder>::from_url(url)
        }
        fn wake_ups(builder: $builder, on: bool) -> $builder {
            builder.wake_ups(on)
        }
        fn request_timeout(builder: $builder, t: std::time::Duration) -> $builder {
            builder.request_timeout(t)
        }
        async fn build(builder: $builder) -> $crate::leasehold::Result<$backend> {
            builder.build().await
        }
        async fn epoch(
            backend: &$backend,
        ) -> $crate::leasehold::Result<$crate::leasehold::backend::StoreEpoch> {
            backend.epoch().await
        }
        async fn listening(backend: &$backend) {
            backend.listening().await
        }
    };
}

/// Writes, in a store's `tests/common/mod.rs`, the helpers its test files
/// call (`url()`, `url_for(ns)`, `available()`, `builder_for(ns)`,
/// `backend()`, `store()`, `settled(&b)`, `unique_key(test)`, `MAX_TTL`,
/// the run's store as `$namespace()` and a fresh one as `$unique()`), each
/// the [`ServerStore`] method of `$store` of the same name.
#[macro_export]
macro_rules! server_store_helpers {
    ($store:ty, $namespace:ident, $unique:ident) => {
        use $crate::store::ServerStore as _;

        /// The test stores' max TTL.
        pub const MAX_TTL: std::time::Duration = <$store>::MAX_TTL;

        /// The shared test server's URL.
        pub fn url() -> String {
            <$store>::url()
        }

        /// [`url`] on the store `namespace`, max TTL [`MAX_TTL`].
        pub fn url_for(namespace: &str) -> String {
            <$store>::url_for(namespace)
        }

        /// Whether the server is there; if not, says so (or fails the test
        /// under `LEASEHOLD_REQUIRE_EMULATORS=1`).
        pub fn available() -> bool {
            <$store>::available()
        }

        /// The store of this test binary run.
        pub fn $namespace() -> &'static str {
            <$store>::namespace()
        }

        /// A store name no other test run uses.
        pub fn $unique() -> String {
            <$store>::unique_namespace()
        }

        /// A builder on `namespace`, or `None` (skipped).
        pub fn builder_for(
            namespace: &str,
        ) -> Option<<$store as $crate::store::ServerStore>::Builder> {
            <$store>::builder_for(namespace)
        }

        /// A backend on the run's store, or `None` (skipped), once the
        /// store is out of quarantine.
        pub async fn backend() -> Option<<$store as $crate::store::ServerStore>::Backend> {
            <$store>::backend().await
        }

        /// A store over [`backend`], or `None` (skipped).
        pub async fn store() -> Option<$crate::leasehold::Store> {
            <$store>::store().await
        }

        /// A store on a namespace of its own (for a test that loses its
        /// data), out of quarantine, and that namespace; or `None`
        /// (skipped).
        pub async fn store_of_its_own() -> Option<($crate::leasehold::Store, String)> {
            let namespace = <$store>::unique_namespace();
            let backend = <$store>::backend_on(&namespace).await?;
            Some(($crate::leasehold_testkit::test_store(backend), namespace))
        }

        /// Waits until a new store's quarantine is over.
        pub async fn settled(backend: &<$store as $crate::store::ServerStore>::Backend) {
            <$store>::settled(backend).await
        }

        /// A key no other test uses.
        pub fn unique_key(test: &str) -> String {
            $crate::unique_name(&format!("{test}/"))
        }
    };
}
