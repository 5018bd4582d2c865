//! Shared by the Azurite tests: where Azurite is and how to reach it.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use leasehold_azure::{AzureBackend, AzureBackendBuilder};

/// The tests' store max TTL: Azure's shortest lease, so that a new
/// container's quarantine (see the crate docs) is 15 s, not 60.
pub const MAX_TTL: Duration = Duration::from_secs(15);

/// Azurite's development account, as a connection string.
pub fn dev_connection_string() -> String {
    leasehold_azure::dev_connection_string(10000)
}

/// The connection string under test: `LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING`
/// or Azurite's development account.
pub fn connection_string() -> String {
    std::env::var("LEASEHOLD_TEST_AZBLOB_CONNECTION_STRING")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(dev_connection_string)
}

/// host:port of the blob endpoint in `cs`.
fn endpoint_addr(cs: &str) -> String {
    let endpoint = cs
        .split(';')
        .find_map(|p| p.strip_prefix("BlobEndpoint="))
        .unwrap_or("http://127.0.0.1:10000/");
    let rest = endpoint
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(endpoint);
    let host = rest.split('/').next().unwrap_or("127.0.0.1:10000");
    if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:443")
    }
}

/// Whether the blob endpoint accepts TCP connections; the reason if not.
pub async fn reachable() -> Result<(), String> {
    let addr = endpoint_addr(&connection_string());
    match tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(addr.as_str()),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "Azurite is not reachable at {addr} ({e}); run scripts/azurite.sh start"
        )),
        Err(_) => Err(format!("connecting to {addr} timed out")),
    }
}

/// A fresh container name, so tests never see each other's blobs.
pub fn fresh_container() -> String {
    format!("lh-{}", &uuid::Uuid::new_v4().simple().to_string()[..20])
}

/// A builder on a fresh container of the Azurite under test, with the
/// tests' max TTL.
pub fn builder() -> AzureBackendBuilder {
    AzureBackend::builder()
        .connection_string(connection_string())
        .container(fresh_container())
        .max_ttl(MAX_TTL)
}

/// The container this test binary's tests share (keys are unique per
/// test): one new container's quarantine per run instead of one per test.
pub fn shared_container() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(fresh_container)
}

/// A backend on the shared container once it is out of quarantine, or
/// `None` (after saying why) without Azurite.
pub async fn backend() -> Option<AzureBackend> {
    if let Err(why) = reachable().await {
        return leasehold_testkit::conformance::skip("azblob", &why);
    }
    let backend = builder()
        .container(shared_container())
        .prefix("tests")
        .build()
        .expect("backend builds");
    settled(&backend).await;
    Some(backend)
}

/// The keys `store` lists under `prefix`, in its order.
pub async fn listed_keys(store: &leasehold::Store, prefix: &str) -> Vec<String> {
    let listed = store.list(prefix).await.unwrap();
    listed
        .into_iter()
        .map(|i| i.key.as_str().to_string())
        .collect()
}

/// A prefix no other test uses.
pub fn unique_prefix() -> String {
    leasehold_test_servers::unique_name("t-")
}

/// A builder on the shared container, once it is out of quarantine, under
/// `prefix` (so that tests on it never see each other's keys).
pub async fn shared(prefix: &str) -> AzureBackendBuilder {
    let probe = builder()
        .container(shared_container())
        .build()
        .expect("backend builds");
    settled(&probe).await;
    builder().container(shared_container()).prefix(prefix)
}

/// Waits until the container's epoch is out of quarantine (learning it,
/// and creating the container, first), for other processes too: they
/// measure its age in whole seconds of the service's clock, up to two
/// seconds short; a second more (seen under the test command's load: a
/// test 30 ms inside the quarantine with 2 s allowed).
pub async fn settled(backend: &AzureBackend) {
    let epoch = leasehold_testkit::conformance::current_epoch(backend).await;
    let full = epoch.max_ttl + epoch.max_ttl / 1000 + Duration::from_secs(3);
    let age = epoch.age.unwrap_or_default();
    tokio::time::sleep(full.saturating_sub(age + age / 1000)).await;
}

/// `builder`, with a new `P` on every try of every request (for tests that
/// count or fault requests), and that `P`.
pub fn with_policy<P>(builder: AzureBackendBuilder) -> (AzureBackend, std::sync::Arc<P>)
where
    P: azure_core::http::policies::Policy + Default + 'static,
{
    let policy = std::sync::Arc::new(P::default());
    let backend = builder.per_try_policy(policy.clone()).build().unwrap();
    (backend, policy)
}

/// Skips the test (returns) when Azurite is not reachable, saying so (or
/// fails it under `LEASEHOLD_REQUIRE_EMULATORS=1`).
#[allow(unused_macros)]
macro_rules! require_azurite {
    () => {
        if let Err(why) = common::reachable().await {
            if leasehold_testkit::conformance::skip::<()>("azblob", &why).is_none() {
                return;
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use require_azurite;

/// What a test's fault injector does around each try of a request, as an
/// [`Injected`] pipeline policy.
#[async_trait::async_trait]
pub trait Around: std::fmt::Debug + Default + Send + Sync + 'static {
    /// What [`lose_answer`](Self::lose_answer) needs to know of the request.
    type Seen: Send;
    /// Before the request goes out (it may be changed, or held up).
    async fn before(&self, request: &mut azure_core::http::Request) -> Self::Seen;
    /// Once it was sent and answered: whether to lose the answer, as a
    /// connection reset then would.
    fn lose_answer(&self, seen: Self::Seen) -> bool;
}

/// The pipeline policy of an [`Around`] (which it derefs to).
#[derive(Debug, Default)]
pub struct Injected<A>(A);

impl<A> std::ops::Deref for Injected<A> {
    type Target = A;
    fn deref(&self) -> &A {
        &self.0
    }
}

// azure_core's trait takes `&Context` with its lifetime hidden, and
// async-trait cannot match an impl that names it (`Context<'_>`).
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl<A: Around> azure_core::http::policies::Policy for Injected<A> {
    async fn send(
        &self,
        ctx: &azure_core::http::Context,
        request: &mut azure_core::http::Request,
        next: &[std::sync::Arc<dyn azure_core::http::policies::Policy>],
    ) -> azure_core::http::policies::PolicyResult {
        let seen = self.0.before(request).await;
        let response = next[0].send(ctx, request, &next[1..]).await?;
        if self.0.lose_answer(seen) {
            return Err(azure_core::Error::with_message(
                azure_core::error::ErrorKind::Io,
                "injected fault: connection reset after the request was sent",
            ));
        }
        Ok(response)
    }
}
