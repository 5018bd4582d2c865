//! Failover and failback between two real Redis servers (switched with
//! `REPLICAOF`, as Sentinel does): a primary that granted a token its
//! replica never received, then was demoted, resynchronised from the
//! replica (forgetting that grant) and promoted again, keeps its `run_id`.
//! Its store must still start a new epoch, or that token is issued twice.

mod common;

use common::PrivateServer;
use leasehold_redis::redis;
use leasehold_test_servers::suite::next_token as token;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_to_a_primary_that_lost_writes_never_repeats_a_token() {
    let (Some(a), Some(b)) = (
        PrivateServer::start(false).await,
        PrivateServer::start(false).await,
    ) else {
        return;
    };
    b.replicate_from(&a).await;
    let on_a = leasehold_testkit::test_store(a.backend().await);
    let first = token(&on_a).await;
    let acked: i64 = a.admin(redis::cmd("WAIT").arg(1).arg(5000)).await;
    assert_eq!(acked, 1, "the replica has the first grant");

    // Failover: B is promoted; A, not told yet (or its last writes not yet
    // replicated), grants once more. B never gets that grant.
    b.promote().await;
    let lost = token(&on_a).await;
    assert!(lost > first);

    // A is demoted (a full resynchronisation from B: A forgets the grant),
    // then promoted again: failback. A keeps its run_id throughout.
    let run_id = |info: String| {
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:").map(str::to_string))
            .unwrap()
    };
    let before = run_id(a.admin(redis::cmd("INFO").arg("server")).await);
    a.replicate_from(&b).await;
    a.promote().await;
    b.replicate_from(&a).await;
    assert_eq!(
        before,
        run_id(a.admin(redis::cmd("INFO").arg("server")).await)
    );

    // A process that opens the store now, and the one that was there all
    // along, get tokens above every one granted before.
    let fresh = leasehold_testkit::test_store(a.backend().await);
    let next = token(&fresh).await;
    assert!(
        next > lost,
        "after failback, token {next} does not exceed {lost}, granted before it"
    );
    let again = token(&on_a).await;
    assert!(again > next, "{again} after {next}");
}
