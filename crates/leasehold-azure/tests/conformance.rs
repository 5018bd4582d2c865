//! The shared conformance suite, unchanged, against Azurite (on one
//! container shared by the suite's tests), and its store-loss test on a
//! container of its own, deleted under a live holder.

mod common;

async fn store() -> Option<leasehold::Store> {
    common::backend().await.map(leasehold_testkit::test_store)
}

leasehold_testkit::conformance_tests!(store);

/// The container deleted while a lease is held and another holder waits:
/// the waiter re-creates it, waits out the new epoch's quarantine, and is
/// granted only after the holder was told lost, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_stops_holder_before_next_grant() {
    let Some(backend) = container_of_its_own().await else {
        return;
    };
    let before = backend.epoch().expect("learnt").epoch;
    let doomed = backend.clone();
    leasehold_testkit::conformance::store_loss_stops_holder_before_next_grant(
        leasehold_testkit::test_store(backend.clone()),
        move |_| async move { doomed.delete_container().await.unwrap() },
    )
    .await;
    let after = backend.epoch().expect("learnt").epoch;
    assert!(after > before, "epoch {after} after {before}");
    backend.delete_container().await.unwrap();
}

/// A reader-writer lock's gate reading the other side after its grant,
/// across the container's deletion (a container of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side() {
    let Some(backend) = container_of_its_own().await else {
        return;
    };
    let doomed = backend.clone();
    leasehold_testkit::conformance::rw_lock_a_gate_that_reads_after_a_loss_waits_for_the_other_side(
        leasehold_testkit::test_store(backend.clone()),
        move |_| async move { doomed.delete_container().await.unwrap() },
    )
    .await;
    backend.delete_container().await.unwrap();
}

/// A backend on a new container of its own, out of quarantine; `None`
/// (skipped) without Azurite.
async fn container_of_its_own() -> Option<leasehold_azure::AzureBackend> {
    if let Err(why) = common::reachable().await {
        leasehold_testkit::conformance::skip::<()>("azblob", &why)?;
    }
    let backend = common::builder().build().unwrap();
    common::settled(&backend).await;
    Some(backend)
}

/// A holder of a 60-second lease (Azure's longest) on a container opened
/// with a max TTL of 60 s; the container deleted; a process with the
/// shortest max TTL (15 s) re-creates it: it is not granted the key while
/// the holder can still believe it holds (issue #28).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_loss_quarantine_outlasts_a_longer_holder() {
    if let Err(why) = common::reachable().await {
        if leasehold_testkit::conformance::skip::<()>("azblob", &why).is_none() {
            return;
        }
    }
    let container = common::fresh_container();
    let open = |max_ttl| {
        leasehold_azure::AzureBackend::builder()
            .connection_string(common::connection_string())
            .container(container.clone())
            .max_ttl(max_ttl)
            .build()
            .unwrap()
    };
    let holder = open(leasehold_azure::MAX_TTL);
    let doomed = holder.clone();
    leasehold_testkit::conformance::store_loss_quarantine_outlasts_every_holder(
        std::sync::Arc::new(holder),
        || async { doomed.delete_container().await.unwrap() },
        || async {
            std::sync::Arc::new(open(leasehold_azure::MIN_TTL))
                as std::sync::Arc<dyn leasehold::backend::Backend>
        },
    )
    .await;
    open(leasehold_azure::MIN_TTL)
        .delete_container()
        .await
        .unwrap();
}
