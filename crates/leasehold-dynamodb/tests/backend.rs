//! The DynamoDB backend's own tests against DynamoDB Local: losing and
//! refusing leases across clients, request counts, the table, and errors.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    backend::{Backend, Lease, LeaseId},
    Error, Key, LockOptions,
};
use leasehold_dynamodb::aws_config::{BehaviorVersion, SdkConfig};
use leasehold_dynamodb::aws_sdk_dynamodb::config::Credentials;
use leasehold_dynamodb::aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TableStatus,
    TimeToLiveStatus,
};
use leasehold_dynamodb::DynamoDbBackend;
use leasehold_test_servers::suite::{self, Recreation};

fn opts(ttl: Duration) -> LockOptions {
    LockOptions::new()
        .ttl(ttl)
        .poll_interval(Duration::from_millis(20), Duration::from_millis(60))
}

/// Two clients (two SDK clients, as two machines would have): after B takes
/// over A's expired lease, A's renew and release are definitive losses and
/// change nothing for B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_holder_renew_after_takeover_fails() {
    let Some(a) = common::backend().await else {
        return;
    };
    let b = Arc::new(common::backend().await.unwrap());
    let key = common::unique_key("stale");
    let ttl = Duration::from_secs(1);
    let stale = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    let store_b = leasehold_testkit::test_store_from(b.clone());
    let guard = store_b
        .lock_with(&key, opts(ttl))
        .unwrap()
        .acquire_timeout(Duration::from_secs(20))
        .await
        .unwrap();
    assert!(guard.fencing_token() > stale.fencing_token);
    suite::assert_revoked(a.renew(&stale).await.unwrap_err());
    suite::assert_revoked(a.release(&stale).await.unwrap_err());
    let info = a.inspect(&Key::new(&key).unwrap()).await.unwrap();
    assert_eq!(
        info.holder.map(|h| h.fencing_token),
        Some(guard.fencing_token())
    );
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

/// Releases by lease ids that do not hold the key are refused and change
/// nothing; a repeated release of our own (a retry after an ambiguous
/// failure) is recognised as already done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_non_holder_is_refused() {
    let Some(a) = common::backend().await else {
        return;
    };
    let b = common::backend().await.unwrap();
    let key = common::unique_key("foreign");
    let ttl = common::MAX_TTL;
    let b_old = leasehold_testkit::conformance::raw_lease(&b, &key, ttl).await;
    b.release(&b_old).await.unwrap();
    b.release(&b_old)
        .await
        .expect("a retried release of our own is done, not lost");
    let held = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    // B's old lease, and a forged id with the holder's token.
    suite::assert_revoked(b.release(&b_old).await.unwrap_err());
    let forged = Lease {
        lease_id: LeaseId::random(),
        ..held.clone()
    };
    suite::assert_revoked(b.release(&forged).await.unwrap_err());
    suite::assert_revoked(b.renew(&forged).await.unwrap_err());
    let info = b.inspect(&held.key).await.unwrap();
    assert_eq!(info.fencing_token, held.fencing_token);
    assert_eq!(
        info.holder.map(|h| h.fencing_token),
        Some(held.fencing_token)
    );
    a.release(&held).await.unwrap();
    assert!(b.inspect(&held.key).await.unwrap().holder.is_none());
    // A release after a break (not our own release) is refused.
    let again = leasehold_testkit::conformance::raw_lease(&a, &key, ttl).await;
    assert!(a.break_lease(&again.key).await.unwrap().is_some());
    suite::assert_revoked(a.release(&again).await.unwrap_err());
}

/// An uncontended acquire + release costs two requests; a failed
/// try-acquire costs one and names the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_counts() {
    let Some(backend) = common::backend().await else {
        return;
    };
    // Long enough that no renewal runs during the measurement.
    suite::request_counts(
        Arc::new(backend),
        DynamoDbBackend::requests_sent,
        common::MAX_TTL,
        2,
    )
    .await;
}

/// A missing table is created (on demand, ACTIVE, no item expiry); an existing
/// one is used as is; a foreign one is refused with a clear error; with
/// create_table off, a missing one is an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_auto_creation() {
    if !common::available() {
        return;
    }
    let name = common::unique_table();
    let backend = common::builder_for(&name).build().await.unwrap();
    let client = backend.client().clone();
    let table = client
        .describe_table()
        .table_name(&name)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_eq!(table.table_status(), Some(&TableStatus::Active));
    let keys = table.key_schema();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].attribute_name(), "lease_key");
    assert_eq!(keys[0].key_type(), &KeyType::Hash);
    if let Some(billing) = table.billing_mode_summary() {
        assert_eq!(billing.billing_mode(), Some(&BillingMode::PayPerRequest));
    }
    let ttl = client
        .describe_time_to_live()
        .table_name(&name)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();
    // No item expiry: an expired item would take its fencing counter along.
    assert_ne!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));
    // Usable at once.
    let lease =
        leasehold_testkit::conformance::raw_lease(&backend, "created/k", Duration::from_secs(5))
            .await;
    backend.release(&lease).await.unwrap();

    // Opening again uses the table as it is, items and all.
    let again = common::builder_for(&name).build().await.unwrap();
    assert_eq!(
        again.inspect(&lease.key).await.unwrap().fencing_token,
        lease.fencing_token
    );

    // Another application's table is refused, not altered.
    let foreign = common::unique_table();
    client
        .create_table()
        .table_name(&foreign)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::N)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let err = common::builder_for(&foreign).build().await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(err.to_string().contains("lease_key"), "{err}");

    // Not created when told not to.
    let missing = common::unique_table();
    let err = common::builder_for(&missing)
        .create_table(false)
        .build()
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains(&missing), "{err}");
    assert!(client
        .describe_table()
        .table_name(&missing)
        .send()
        .await
        .is_err());

    for t in [&name, &foreign] {
        client.delete_table().table_name(t).send().await.unwrap();
    }
}

/// Bad regions, endpoints and credentials are clear errors that never
/// repeat a secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_region_endpoint_and_credentials_are_clear_errors() {
    if !common::available() {
        return;
    }
    const SENTINEL: &str = "SENTINEL-secret-7d1c0ffee";
    let secret_creds =
        || Credentials::new("leaseholdtests", SENTINEL, Some(SENTINEL.into()), None, "t");
    let no_secret = |err: &Error| {
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(SENTINEL), "secret echoed: {shown}");
    };
    let table = common::table();

    // Region: malformed, and missing altogether.
    let err = DynamoDbBackend::builder(table)
        .region("Not A Region!")
        .endpoint(common::endpoint())
        .credentials_provider(secret_creds())
        .build()
        .await
        .unwrap_err();
    leasehold_testkit::conformance::assert_invalid_input(&err, "region");
    no_secret(&err);
    let bare = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .build();
    let err = DynamoDbBackend::builder(table)
        .sdk_config(bare.clone())
        .endpoint(common::endpoint())
        .credentials_provider(secret_creds())
        .build()
        .await
        .unwrap_err();
    leasehold_testkit::conformance::assert_invalid_input(&err, "region");
    assert!(err.to_string().contains("region="), "{err}");
    // Well-formed but unknown: its endpoint does not resolve.
    let err = DynamoDbBackend::builder(table)
        .region("nowhere-9")
        .credentials_provider(secret_creds())
        .attempt_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert!(err.to_string().contains("nowhere-9"), "{err}");
    no_secret(&err);

    // Endpoint: nobody listening, wrong scheme, credentials in it.
    let err = DynamoDbBackend::builder(table)
        .region(common::REGION)
        .endpoint("http://127.0.0.1:1")
        .credentials_provider(secret_creds())
        .build()
        .await
        .unwrap_err();
    leasehold_testkit::conformance::assert_backend_error(&err, true);
    let text = err.to_string();
    assert!(
        text.contains("could not reach DynamoDB") && text.contains("127.0.0.1:1"),
        "{text}"
    );
    no_secret(&err);
    let err = DynamoDbBackend::from_url(
        "dynamodb://locks?region=us-east-1&endpoint=ftp://127.0.0.1:8000",
    )
    .await
    .unwrap_err();
    leasehold_testkit::conformance::assert_invalid_input(&err, "endpoint");
    let err = DynamoDbBackend::from_url(&format!(
        "dynamodb://locks?region=us-east-1&endpoint=http://key:{SENTINEL}@127.0.0.1:8000"
    ))
    .await
    .unwrap_err();
    leasehold_testkit::conformance::assert_invalid_input(&err, "endpoint");
    no_secret(&err);
    let err = DynamoDbBackend::from_url(&format!(
        "dynamodb://locks?aws_secret_access_key={SENTINEL}"
    ))
    .await
    .unwrap_err();
    assert!(err.to_string().contains("aws_secret_access_key"), "{err}");
    no_secret(&err);

    // Credentials: refused by the service, and none at all.
    let err = DynamoDbBackend::builder(table)
        .region(common::REGION)
        .endpoint(common::endpoint())
        .credentials_provider(Credentials::new("not a key!", SENTINEL, None, None, "t"))
        .build()
        .await
        .unwrap_err();
    leasehold_testkit::conformance::assert_backend_error(&err, false);
    assert!(err.to_string().contains("refused the credentials"), "{err}");
    no_secret(&err);
    let err = DynamoDbBackend::builder(table)
        .sdk_config(bare)
        .region(common::REGION)
        .endpoint(common::endpoint())
        .build()
        .await
        .unwrap_err();
    leasehold_testkit::conformance::assert_backend_error(&err, false);
    assert!(err.to_string().contains("no AWS credentials"), "{err}");

    // A working backend built with the secret never shows it either.
    let ok = DynamoDbBackend::builder(table)
        .region(common::REGION)
        .endpoint(common::endpoint())
        .credentials_provider(secret_creds())
        .build()
        .await
        .unwrap();
    assert!(!format!("{ok:?}").contains(SENTINEL));
}

/// The store URL opens the same backend as the builder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_from_url() {
    if !common::available() {
        return;
    }
    // Credentials from the standard chain: the environment here.
    // No other test of this binary reads these variables.
    std::env::set_var("AWS_ACCESS_KEY_ID", common::ACCESS_KEY);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", common::SECRET_KEY);
    let url = format!(
        "dynamodb://{}?region={}&endpoint={}",
        common::table(),
        common::REGION,
        common::endpoint()
    );
    let backend = DynamoDbBackend::from_url(&url).await.unwrap();
    assert_eq!(backend.table(), common::table());
    assert_eq!(backend.region(), common::REGION);
    assert!(backend.capabilities().takeover_needs_observation);
    let key = common::unique_key("url");
    let lease =
        leasehold_testkit::conformance::raw_lease(&backend, &key, Duration::from_secs(5)).await;
    backend.release(&lease).await.unwrap();
    let trusting = DynamoDbBackend::from_url(&format!("{url}&max_clock_skew=500ms"))
        .await
        .unwrap();
    assert!(!trusting.capabilities().takeover_needs_observation);
}

/// The table deleted under a live holder with a waiter (the shared
/// store-loss test on a table of its own): the waiter re-creates it, waits
/// out the quarantine, and is granted only after the holder was told lost,
/// with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn table_deleted_under_a_live_holder() {
    let Some((backend, name)) = table_of_its_own().await else {
        return;
    };
    let before = backend.epoch().epoch;
    let client = backend.client().clone();
    let lose = |_| async { delete_table(&client, &name).await };
    leasehold_testkit::conformance::store_loss_stops_holder_before_next_grant(
        leasehold_testkit::test_store(backend),
        lose,
    )
    .await;
    let after = common::builder_for(&name)
        .build()
        .await
        .unwrap()
        .epoch()
        .epoch;
    assert!(after > before, "epoch {after} after {before}");
}

/// A reader-writer lock's gate reading the other side after its grant,
/// across the table's deletion (on a table of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side() {
    if let Some((backend, name)) = table_of_its_own().await {
        let client = backend.client().clone();
        let lose = |_| async { delete_table(&client, &name).await };
        leasehold_testkit::conformance::rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side(
            leasehold_testkit::test_store(backend),
            lose,
        )
        .await;
    }
}

/// A backend on a new table of its own, out of quarantine, and the
/// table's name; `None` (skipped) without DynamoDB Local.
async fn table_of_its_own() -> Option<(DynamoDbBackend, String)> {
    if !common::available() {
        return None;
    }
    let name = common::unique_table();
    let backend = common::builder_for(&name).build().await.unwrap();
    common::settled(&backend).await;
    Some((backend, name))
}

leasehold_test_servers::recreation_tests!(table_deleted_and_recreated);

/// `test` on a table of its own, opened with a 30-minute max TTL, deleted,
/// and re-created with the default. Re-created at once, the table's epoch
/// (the creation time in whole seconds) would repeat if the first grant had
/// not waited for that second to end.
async fn table_deleted_and_recreated(test: Recreation) {
    if !common::available() {
        return;
    }
    let name = common::unique_table();
    let (holder, client) = open_table(&name, Duration::from_secs(30 * 60)).await;
    test.run(
        holder,
        || delete_table(&client, &name),
        || async {
            open_table(&name, leasehold::backend::DEFAULT_STORE_MAX_TTL)
                .await
                .0
        },
    )
    .await;
    delete_table(&client, &name).await;
}

/// A backend on table `name` (created if missing) with `max_ttl`, and its
/// client.
async fn open_table(
    name: &str,
    max_ttl: Duration,
) -> (
    Arc<dyn Backend>,
    leasehold_dynamodb::aws_sdk_dynamodb::Client,
) {
    let backend = common::builder_for(name)
        .max_ttl(max_ttl)
        .build()
        .await
        .unwrap();
    let client = backend.client().clone();
    (Arc::new(backend), client)
}

async fn delete_table(client: &leasehold_dynamodb::aws_sdk_dynamodb::Client, name: &str) {
    client.delete_table().table_name(name).send().await.unwrap();
}
