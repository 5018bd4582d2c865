//! Elections: resigning hands over, a leader is told of its loss, and
//! observers see every change.

use super::*;

/// A leader that resigns hands over to a waiting candidate at once (well
/// before its lease could have expired), with a greater term.
pub async fn election_resign_hands_over(store: Store) {
    let key = unique_key("election-handover");
    let ttl = test_ttl(&store);
    // a's lease lasts long enough that only its resignation can explain a
    // handover within half of it.
    let a_ttl = (ttl * 4).min(store.backend().capabilities().max_ttl);
    let handover = a_ttl / 2;
    let a = store
        .election_with(&key, opts(&store).owner_label("a").ttl(a_ttl))
        .unwrap();
    let b = other_process(&store)
        .election_with(&key, opts(&store).owner_label("b"))
        .unwrap();
    let lead_a = a.campaign().await.unwrap();
    let (saw_a_tx, saw_a) = tokio::sync::oneshot::channel();
    let candidate = tokio::spawn(async move {
        let mut saw_a_tx = Some(saw_a_tx);
        b.campaign_reporting(Wait::Forever, |reason| {
            let leader = match reason {
                WaitReason::Held(holders) => holders.first(),
                _ => None,
            };
            if leader.and_then(|l| l.owner.label.as_deref()) == Some("a") {
                if let Some(tx) = saw_a_tx.take() {
                    let _ = tx.send(());
                }
            }
        })
        .await
    });
    // b is campaigning and has seen a lead.
    saw_a.await.expect("b saw a as leader");
    let term_a = lead_a.term();
    let resigned = tokio::time::Instant::now();
    lead_a.resign().await.unwrap();
    let lead_b = tokio::time::timeout(handover, candidate)
        .await
        .expect("b leads within half of a's lease time after a resigned")
        .unwrap()
        .unwrap();
    assert!(resigned.elapsed() < handover);
    assert!(lead_b.term() > term_a);
    let leader = a.leader().await.unwrap().expect("b leads");
    assert_eq!(leader.owner.label.as_deref(), Some("b"));
    assert_eq!(leader.fencing_token, lead_b.term());
    lead_b.resign().await.unwrap();
    assert_eq!(a.leader().await.unwrap(), None);
}

/// A leader whose lease is broken is told so by its leadership guard, and
/// resigning then reports the loss.
pub async fn election_leader_told_of_loss(store: Store) {
    let key = unique_key("election-lost");
    let ttl = test_ttl(&store);
    let election = store
        .election_with(&key, opts(&store).renew_interval(ttl / 5))
        .unwrap();
    let leadership = election.campaign().await.unwrap();
    assert!(!leadership.is_lost());
    store.break_lease(&key).await.unwrap();
    revoked_within(ttl, leadership.lost()).await;
    assert!(leadership.is_lost());
    assert!(leadership.resign().await.unwrap_err().is_lease_lost());
}

/// An observer in another process reports every change of leader, in
/// order, with who leads and what they published; changes it could not see
/// between two polls are counted, not hidden.
pub async fn election_observers_see_every_change(store: Store) {
    let key = unique_key("election-observe");
    let observer_store = other_process(&store);
    let mut observer = observer_store
        .election_with(&key, opts(&store))
        .unwrap()
        .observe(Duration::from_millis(20));
    let (tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let watching = tokio::spawn(async move {
        loop {
            let change = observer.next().await.unwrap();
            if tx.send(change).is_err() {
                break;
            }
        }
    });
    let wait = test_ttl(&store) * 2;
    let who = |c: &leasehold::LeaderChange| {
        c.leader.as_ref().map(|h| {
            (
                h.owner.label.clone().unwrap_or_default(),
                h.data.clone().unwrap_or_default(),
                h.fencing_token,
            )
        })
    };

    let first = next_change(&mut changes, wait).await;
    assert_eq!(
        (who(&first), first.last_term, first.missed_terms),
        (None, 0, 0)
    );

    let a = store
        .election_with(&key, opts(&store).owner_label("a").data("at a"))
        .unwrap();
    let b = other_process(&store)
        .election_with(&key, opts(&store).owner_label("b").data("at b"))
        .unwrap();
    let mut expected = Vec::new();
    let mut last_term = first.last_term;
    for candidate in [&a, &b, &a] {
        let leadership = candidate.campaign().await.unwrap();
        let label = candidate.owner().label.clone().unwrap();
        let change = loop {
            let change = next_change(&mut changes, wait).await;
            // A backend that records the new holder before it takes the
            // lease (Azure) can be polled between the two: a new term with
            // nobody holding it yet. That is not a change of leader.
            if change.leader.is_none() && change.last_term > last_term {
                continue;
            }
            break change;
        };
        last_term = change.last_term;
        assert_eq!(
            who(&change),
            Some((label.clone(), format!("at {label}"), leadership.term()))
        );
        assert_eq!(change.missed_terms, 0);
        expected.push(leadership.term());
        leadership.resign().await.unwrap();
        let change = next_change(&mut changes, wait).await;
        assert_eq!((who(&change), change.missed_terms), (None, 0));
        assert_eq!(change.last_term, *expected.last().unwrap());
    }
    assert!(
        expected.windows(2).all(|w| w[0] < w[1]),
        "terms {expected:?}"
    );
    watching.abort();
}

async fn next_change(
    changes: &mut tokio::sync::mpsc::UnboundedReceiver<leasehold::LeaderChange>,
    wait: Duration,
) -> leasehold::LeaderChange {
    tokio::time::timeout(wait, changes.recv())
        .await
        .expect("the observer reports the change within two TTLs")
        .expect("the observer runs")
}
