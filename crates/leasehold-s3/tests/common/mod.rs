//! Shared set-up for the tests against an S3 emulator (moto).
//!
//! The endpoint is `LEASEHOLD_TEST_S3_ENDPOINT` (default
//! `http://127.0.0.1:45399`; `scripts/moto.sh start` runs one there).
//! Without it the tests are skipped, loudly, unless
//! `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes them fail instead.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use leasehold::Creation;
use leasehold_s3::aws_sdk_s3::config::Credentials;
use leasehold_s3::aws_sdk_s3::Client;
use leasehold_s3::{S3Backend, S3BackendBuilder};
use leasehold_test_servers as servers;

pub const REGION: &str = "us-east-1";
/// Dummy credentials: moto takes any.
pub const ACCESS_KEY: &str = "leaseholdtests";
pub const SECRET_KEY: &str = "leasehold-test-secret-5a4b3c2d";

/// The bucket the tests share; each test binary run keeps its store under
/// a prefix of its own.
pub const BUCKET: &str = "leasehold-tests";

/// The test stores' max TTL: above every TTL the tests use, and (in test
/// builds) the confirmation window, so the quarantine of a re-created
/// store.
pub const MAX_TTL: Duration = Duration::from_secs(10);

/// moto, started by `scripts/moto.sh`.
pub const MOTO: servers::Emulator = servers::Emulator {
    store: "s3",
    name: "S3 emulator (moto)",
    script: "moto",
    var: "LEASEHOLD_TEST_S3_ENDPOINT",
    default: "http://127.0.0.1:45399",
};

pub fn endpoint() -> String {
    MOTO.endpoint()
}

/// Whether the emulator is there; if not, says so (or fails the test under
/// `LEASEHOLD_REQUIRE_EMULATORS=1`).
pub fn available() -> bool {
    MOTO.available()
}

pub fn credentials() -> Credentials {
    Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "leasehold-tests")
}

/// The prefix of this test binary run's store.
pub fn prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(unique_prefix)
}

pub fn unique_prefix() -> String {
    servers::unique_name("run-")
}

/// A [`unique_prefix`] when the emulator is there; if not, `None` after
/// saying so (see [`available`]).
pub fn prefix_of_its_own() -> Option<String> {
    available().then(unique_prefix)
}

/// A bucket name no other test uses.
pub fn unique_bucket() -> String {
    servers::unique_name("leasehold-test-")
}

/// A builder for the emulator on `bucket` and `prefix`, with test
/// credentials.
pub fn builder_for(bucket: &str, prefix: &str) -> S3BackendBuilder {
    S3Backend::builder(bucket)
        .prefix(prefix)
        .region(REGION)
        .endpoint(endpoint())
        .credentials_provider(credentials())
        .max_ttl(MAX_TTL)
}

/// A builder for the emulator on the run's store, or `None` (skipped)
/// when the emulator is not there. A store nobody used before: the first
/// backend of the run writes its epoch marker as proven (no quarantine),
/// which is what `leasehold init --new` states for such a store.
pub fn builder() -> Option<S3BackendBuilder> {
    MOTO.then(|| builder_for(BUCKET, prefix()).creation(Creation::NewProven))
}

/// A backend on the run's store, or `None` (skipped).
pub async fn backend() -> Option<S3Backend> {
    Some(builder()?.build().await.expect("open the S3 emulator"))
}

/// A backend on a store of its own (`prefix` in the shared bucket), out
/// of quarantine: a proven new store.
pub async fn fresh_backend(prefix: &str) -> S3Backend {
    builder_for(BUCKET, prefix)
        .creation(Creation::NewProven)
        .build()
        .await
        .expect("open the S3 emulator")
}

/// A plain SDK client on the emulator, as an operator's tool would have
/// (the SDK configuration loaded as the stores load theirs, with the same
/// HTTP client).
pub async fn client() -> Client {
    let mut options = leasehold_aws::AwsOptions {
        region: Some(REGION.into()),
        ..Default::default()
    };
    options.set_credentials(credentials());
    let sdk = options.load().await.expect("the SDK configuration");
    let config = leasehold_s3::aws_sdk_s3::config::Builder::from(&sdk)
        .endpoint_url(endpoint())
        .force_path_style(true)
        .build();
    Client::from_conf(config)
}

/// Every object under `prefix` in `bucket` (the store's objects, epoch
/// marker first, in listing order).
pub async fn objects(client: &Client, bucket: &str, prefix: &str) -> Vec<String> {
    leasehold_s3::object_names(client, bucket, prefix, "list")
        .await
        .expect("list the store's objects")
}

/// A backend on `bucket`, no prefix, opened with `creation`.
pub async fn open_bucket(bucket: &str, creation: Creation) -> leasehold::Result<S3Backend> {
    builder_for(bucket, "").creation(creation).build().await
}

/// A [`unique_bucket`] name when the emulator is there; if not, `None`
/// after saying so (see [`available`]).
pub fn bucket_of_its_own() -> Option<String> {
    available().then(unique_bucket)
}

/// Deletes every object of the store under `prefix`, as
/// `aws s3 rm --recursive` does (in listing order): the store's data lost.
pub async fn delete_store(client: &Client, bucket: &str, prefix: &str) {
    let prefix = format!("{}/", prefix.trim_matches('/'));
    delete_objects(client, bucket, &prefix).await;
}

/// Deletes every object under `prefix` in `bucket`, in listing order.
async fn delete_objects(client: &Client, bucket: &str, prefix: &str) {
    for name in objects(client, bucket, prefix).await {
        client
            .delete_object()
            .bucket(bucket)
            .key(&name)
            .send()
            .await
            .expect("delete an object");
    }
}

/// Empties and deletes `bucket`.
pub async fn delete_bucket(client: &Client, bucket: &str) {
    delete_objects(client, bucket, "").await;
    client
        .delete_bucket()
        .bucket(bucket)
        .send()
        .await
        .expect("delete the bucket");
}

pub fn unique_key(test: &str) -> String {
    servers::unique_name(&format!("{test}/"))
}

/// The emulator, shared by this binary's tests (`read`) except by the check
/// that floods it with simultaneous writes (`write`): behind the test
/// command's one-request-at-a-time moto, its floods queued the other tests'
/// requests for seconds, past their TTLs (a renewal landed too late and a
/// live holder lost its lease; a key's first grant answered after its
/// deadline).
pub static EMULATOR: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
