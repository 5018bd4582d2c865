//! Shared set-up for the tests against DynamoDB Local.
//!
//! The endpoint is `LEASEHOLD_TEST_DYNAMODB_ENDPOINT` (default
//! `http://127.0.0.1:8000`; `scripts/dynamodb-local.sh start` runs one there).
//! Without it the tests are skipped, loudly, unless
//! `LEASEHOLD_REQUIRE_EMULATORS=1`, which makes them fail instead.

#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use leasehold_dynamodb::aws_sdk_dynamodb::config::Credentials;
use leasehold_dynamodb::{DynamoDbBackend, DynamoDbBackendBuilder};
use leasehold_test_servers as servers;

pub const REGION: &str = "us-east-1";
/// Dummy credentials: DynamoDB Local checks only their shape.
pub const ACCESS_KEY: &str = "leaseholdtests";
pub const SECRET_KEY: &str = "leasehold-test-secret-0f1e2d3c";

/// DynamoDB Local, started by `scripts/dynamodb-local.sh`.
pub const EMULATOR: servers::Emulator = servers::Emulator {
    store: "dynamodb",
    name: "DynamoDB Local",
    script: "dynamodb-local",
    var: "LEASEHOLD_TEST_DYNAMODB_ENDPOINT",
    default: "http://127.0.0.1:8000",
};

pub fn endpoint() -> String {
    EMULATOR.endpoint()
}

/// Whether the emulator is there; if not, says so (or fails the test under
/// `LEASEHOLD_REQUIRE_EMULATORS=1`).
pub fn available() -> bool {
    EMULATOR.available()
}

pub fn credentials() -> Credentials {
    Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "leasehold-tests")
}

/// One table per test binary run: unique, so runs never see each other.
pub fn table() -> &'static str {
    static TABLE: OnceLock<String> = OnceLock::new();
    TABLE.get_or_init(unique_table)
}

pub fn unique_table() -> String {
    servers::unique_name("leasehold-test-")
}

/// A builder for the emulator on `table`, with test credentials.
pub fn builder_for(table: &str) -> DynamoDbBackendBuilder {
    DynamoDbBackend::builder(table)
        .region(REGION)
        .endpoint(endpoint())
        .credentials_provider(credentials())
        .max_ttl(MAX_TTL)
}

/// The test tables' max TTL: above every TTL the tests use, and the
/// quarantine of a new table (see `settled`).
pub const MAX_TTL: Duration = Duration::from_secs(10);

/// A builder for the emulator on the run's table, or `None` (skipped) when
/// the emulator is not there.
pub fn builder() -> Option<DynamoDbBackendBuilder> {
    EMULATOR.then(|| builder_for(table()))
}

/// A backend on the run's table, or `None` (skipped), once the table is
/// out of quarantine.
pub async fn backend() -> Option<DynamoDbBackend> {
    let backend = builder()?.build().await.expect("open DynamoDB Local");
    settled(&backend).await;
    Some(backend)
}

/// Waits until a new table's quarantine is over (a fresh table is one per
/// test binary run: every test would otherwise start with that wait).
pub async fn settled(backend: &DynamoDbBackend) {
    let epoch = backend.epoch();
    let full = epoch.max_ttl + epoch.max_ttl / 1000;
    let age = epoch.age.unwrap_or_default();
    // One more second: the age is measured with DynamoDB's `Date`, whole
    // seconds truncated, so another process may find it a second shorter.
    tokio::time::sleep(full.saturating_sub(age + age / 1000) + Duration::from_secs(1)).await;
}

pub fn unique_key(test: &str) -> String {
    servers::unique_name(&format!("{test}/"))
}
