//! Several keys in one `TransactWriteItems` on DynamoDB Local: what the
//! batch learns when its remembered fences are stale, what it costs in
//! requests, and the takeover rule kept key by key (a holder's version
//! watched for its whole TTL, and a renewal seen meanwhile voids it).

mod common;

use std::sync::Arc;
use std::time::Duration;

use leasehold::backend::{AcquireRequest, Backend, BatchOutcome, Lease, ManualClock};
use leasehold_dynamodb::DynamoDbBackend;
use leasehold_testkit::conformance::{acquire_request, raw_lease};

fn requests(keys: &[&str], ttl: Duration, epoch: u64) -> Vec<AcquireRequest> {
    keys.iter()
        .map(|k| acquire_request(k, ttl, Some(epoch)))
        .collect()
}

fn tokens(outcome: BatchOutcome) -> Vec<u64> {
    match outcome {
        BatchOutcome::Acquired(grants) => grants.iter().map(|g| g.fencing_token).collect(),
        other => panic!("expected every key, got {other:?}"),
    }
}

async fn release_all(backend: &DynamoDbBackend, reqs: &[AcquireRequest], tokens: &[u64]) {
    for (req, token) in reqs.iter().zip(tokens) {
        let lease = Lease {
            key: req.key.clone(),
            lease_id: req.lease_id.clone(),
            ttl: req.ttl,
            fencing_token: *token,
            epoch: req.epoch.unwrap(),
        };
        backend.release(&lease).await.unwrap();
    }
}

/// A batch of keys the process knows costs one request; one whose key
/// another process took meanwhile (a stale fence) costs two, and its token
/// is still one above the other process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_learns_a_fence_another_process_moved() {
    let Some(a) = common::backend().await else {
        return;
    };
    let b = common::builder().unwrap().build().await.unwrap();
    let epoch = a.epoch().epoch;
    let ttl = Duration::from_secs(5);
    let base = common::unique_key("batch-fence");
    let (k1, k2) = (format!("{base}/1"), format!("{base}/2"));
    let keys = [k1.as_str(), k2.as_str()];

    // New keys: one transaction creates both items.
    let sent = a.requests_sent();
    let reqs = requests(&keys, ttl, epoch);
    let first = tokens(a.try_acquire_all(&reqs).await.unwrap());
    assert_eq!(a.requests_sent() - sent, 1, "new keys: one request");
    release_all(&a, &reqs, &first).await;

    // Another process takes the first key once: our fence for it is stale.
    let other = raw_lease(&b, &k1, ttl).await;
    assert_eq!(other.fencing_token, first[0] + 1);
    b.release(&other).await.unwrap();

    let sent = a.requests_sent();
    let reqs = requests(&keys, ttl, epoch);
    let second = tokens(a.try_acquire_all(&reqs).await.unwrap());
    assert_eq!(a.requests_sent() - sent, 2, "a stale fence: one more round");
    assert_eq!(second, vec![other.fencing_token + 1, first[1] + 1]);
    release_all(&a, &reqs, &second).await;

    // Known again: one request.
    let sent = a.requests_sent();
    let reqs = requests(&keys, ttl, epoch);
    let third = tokens(a.try_acquire_all(&reqs).await.unwrap());
    assert_eq!(a.requests_sent() - sent, 1, "known fences: one request");
    assert_eq!(third, vec![second[0] + 1, second[1] + 1]);
    release_all(&a, &reqs, &third).await;
}

/// A dead holder's key goes to a batch only once the batch's process has
/// seen the holder's version unchanged for its whole TTL; a renewal seen
/// meanwhile starts the watch again. The free key of a refused batch stays
/// free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_takes_over_only_after_watching_the_holder_for_its_ttl() {
    let Some(holder) = common::backend().await else {
        return;
    };
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1000)));
    let waiter = common::builder()
        .unwrap()
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let epoch = waiter.epoch().epoch;
    let ttl = Duration::from_secs(2);
    let base = common::unique_key("batch-takeover");
    let (free, held) = (format!("{base}/a"), format!("{base}/b"));
    let keys = [free.as_str(), held.as_str()];
    let lease = raw_lease(&holder, &held, ttl).await;
    let refused = |outcome: BatchOutcome, when: &str| match outcome {
        BatchOutcome::Held { index: 1, holder } => {
            assert!(holder.is_some(), "{when}: the holder is named");
        }
        other => panic!("{when}: expected the second key held, got {other:?}"),
    };

    refused(
        waiter
            .try_acquire_all(&requests(&keys, ttl, epoch))
            .await
            .unwrap(),
        "first sight",
    );
    let info = waiter
        .inspect(&leasehold::Key::new(&free).unwrap())
        .await
        .unwrap();
    assert!(info.holder.is_none(), "the free key stays free");

    // The holder renews (a new version) while the waiter's clock runs past
    // the TTL it watched the old version for: no takeover.
    holder.renew(&lease).await.unwrap();
    clock.advance(ttl * 2);
    refused(
        waiter
            .try_acquire_all(&requests(&keys, ttl, epoch))
            .await
            .unwrap(),
        "after a renewal",
    );
    assert!(
        holder.renew(&lease).await.is_ok(),
        "the renewing holder keeps its lease"
    );

    // Silent for a whole TTL (and the margin) after the last version seen:
    // taken over, one above the holder's token.
    refused(
        waiter
            .try_acquire_all(&requests(&keys, ttl, epoch))
            .await
            .unwrap(),
        "the last renewal seen",
    );
    clock.advance(ttl * 2);
    let reqs = requests(&keys, ttl, epoch);
    let taken = tokens(waiter.try_acquire_all(&reqs).await.unwrap());
    assert_eq!(taken[1], lease.fencing_token + 1);
    assert!(
        holder.renew(&lease).await.is_err(),
        "the old holder's lease is gone"
    );
    release_all(&waiter, &reqs, &taken).await;
}
