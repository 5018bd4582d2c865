//! The backend contract, through a lock: one holder at a time, expiry,
//! renewal, fencing tokens, inspect, break, list, holder data and input
//! checks.

use super::*;

/// A held key cannot be taken by another holder, who learns who holds it.
pub async fn exclusive_acquire(store: Store) {
    let key = unique_key("exclusive");
    let a = store
        .lock_with(&key, opts(&store).owner_label("holder-a"))
        .unwrap();
    let guard = a.try_acquire().await.unwrap();
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let holder = assert_held(b.try_acquire().await).expect("Held carries the holder's info");
    assert_eq!(holder.owner.label.as_deref(), Some("holder-a"));
    assert_eq!(holder.fencing_token, guard.fencing_token());
    let err = b
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err}");
    guard.release().await.unwrap();
}

/// After a release, another holder gets the key at once.
pub async fn release_frees(store: Store) {
    let key = unique_key("release");
    let a = store.lock_with(&key, opts(&store)).unwrap();
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let guard = a.try_acquire().await.unwrap();
    guard.release().await.unwrap();
    let info = store.inspect(&key).await.unwrap();
    assert!(info.holder.is_none(), "released key still held: {info:?}");
    b.try_acquire().await.unwrap().release().await.unwrap();
}

/// A lease nobody renews frees the key once its TTL has run out, not before.
pub async fn expiry_frees_after_ttl(store: Store) {
    let key = unique_key("expiry");
    let ttl = test_ttl(&store);
    let started = tokio::time::Instant::now();
    let lease = raw_lease(store.backend().as_ref(), &key, ttl).await;
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    assert_held(b.try_acquire().await);
    let guard = b.acquire_timeout(expiry_wait(&store)).await.unwrap();
    assert!(
        started.elapsed() >= ttl.mul_f64(0.9),
        "taken over after {:?}, before the TTL of {ttl:?} ran out",
        started.elapsed()
    );
    assert!(guard.fencing_token() > lease.fencing_token);
    guard.release().await.unwrap();
}

/// A renewal pushes the expiry a whole TTL past the renewal.
pub async fn renew_extends(store: Store) {
    let key = unique_key("renew");
    let ttl = test_ttl(&store);
    let lease = raw_lease(store.backend().as_ref(), &key, ttl).await;
    tokio::time::sleep(ttl / 2).await;
    store.backend().renew(&lease).await.unwrap();
    // Past the first expiry, before the renewed one.
    tokio::time::sleep(ttl / 2 + ttl / 5).await;
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    assert_held(b.try_acquire().await);
    store.backend().release(&lease).await.unwrap();
}

/// Renewing a lease that was broken, or taken over after expiry, is a
/// definitive loss.
pub async fn renew_after_loss_reports_loss(store: Store) {
    let ttl = test_ttl(&store);
    let key = unique_key("renew-lost");
    let lease = raw_lease(store.backend().as_ref(), &key, ttl).await;
    store.break_lease(&key).await.unwrap();
    let err = store.backend().renew(&lease).await.unwrap_err();
    assert!(err.is_lease_lost(), "renew after break: {err}");

    let key = unique_key("renew-stale");
    let stale = raw_lease(store.backend().as_ref(), &key, ttl).await;
    let b = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let guard = b.acquire_timeout(expiry_wait(&store)).await.unwrap();
    let err = store.backend().renew(&stale).await.unwrap_err();
    assert!(err.is_lease_lost(), "stale renew after takeover: {err}");
    assert!(
        !guard.is_lost(),
        "a stale renew must not disturb the new holder"
    );
    guard.release().await.unwrap();
}

/// Tokens grow strictly across release, break and expiry.
pub async fn fencing_strictly_increases(store: Store) {
    let key = unique_key("fencing");
    let lock = store.lock_with(&key, opts(&store)).unwrap();
    let mut tokens = Vec::new();

    let g = lock.try_acquire().await.unwrap();
    tokens.push(g.fencing_token());
    g.release().await.unwrap();

    let g = lock.try_acquire().await.unwrap();
    tokens.push(g.fencing_token());
    store.break_lease(&key).await.unwrap();
    drop(g);

    let g = other_process(&store)
        .lock_with(&key, opts(&store))
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    tokens.push(g.fencing_token());
    g.release().await.unwrap();

    let raw = raw_lease(store.backend().as_ref(), &key, test_ttl(&store)).await;
    tokens.push(raw.fencing_token);
    let g = other_process(&store)
        .lock_with(&key, opts(&store))
        .unwrap()
        .acquire_timeout(expiry_wait(&store))
        .await
        .unwrap();
    tokens.push(g.fencing_token());
    assert_eq!(
        store.inspect(&key).await.unwrap().fencing_token,
        g.fencing_token()
    );
    g.release().await.unwrap();

    assert!(tokens[0] >= 1, "tokens start at 1: {tokens:?}");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not strictly increasing: {tokens:?}"
    );
    assert_eq!(
        store.inspect(&key).await.unwrap().fencing_token,
        *tokens.last().unwrap()
    );
}

/// Inspect and Held errors show the holder's owner identity and data.
pub async fn inspect_shows_holder_owner_and_data(store: Store) {
    let key = unique_key("inspect");
    let lock = store
        .lock_with(
            &key,
            opts(&store)
                .owner_label("inspector")
                .data("payload: ünïcode, 42"),
        )
        .unwrap();
    let before = store.inspect(&key).await.unwrap();
    assert!(before.holder.is_none());
    let guard = lock.try_acquire().await.unwrap();
    let info = store.inspect(&key).await.unwrap();
    assert_eq!(info.key.as_str(), key);
    assert_eq!(info.fencing_token, guard.fencing_token());
    let holder = info.holder.expect("inspect shows the holder");
    assert_eq!(holder.owner, *lock.owner());
    assert_eq!(holder.owner.pid, std::process::id());
    assert_eq!(holder.data.as_deref(), Some("payload: ünïcode, 42"));
    assert_eq!(holder.fencing_token, guard.fencing_token());
    guard.release().await.unwrap();
    assert!(store.inspect(&key).await.unwrap().holder.is_none());
}

/// Break ends the lease whoever holds it and reports whom it ended.
pub async fn break_ends_lease(store: Store) {
    let key = unique_key("break");
    let lock = store
        .lock_with(&key, opts(&store).owner_label("victim"))
        .unwrap();
    let guard = lock.try_acquire().await.unwrap();
    let broken = store.break_lease(&key).await.unwrap();
    assert_eq!(
        broken.and_then(|h| h.owner.label),
        Some("victim".to_string())
    );
    assert!(store.inspect(&key).await.unwrap().holder.is_none());
    let other = other_process(&store).lock_with(&key, opts(&store)).unwrap();
    let g2 = other
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(g2.fencing_token() > guard.fencing_token());
    g2.release().await.unwrap();
    assert!(
        store.break_lease(&key).await.unwrap().is_none(),
        "nothing left to break"
    );
    drop(guard);
}

/// Bad keys and TTLs are clear invalid-input errors.
pub async fn bad_input_rejected(store: Store) {
    for key in [
        "",
        "/lead",
        "trail/",
        "dou//ble",
        "spa ce",
        "star*",
        &"k".repeat(257),
    ] {
        let err = store.lock(key).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { what: "key", .. }),
            "{key:?}: {err}"
        );
        assert!(store.inspect(key).await.is_err(), "{key:?}");
    }
    let caps = store.backend().capabilities();
    for ttl in [Duration::ZERO, caps.min_ttl / 2, caps.max_ttl * 2] {
        let err = store
            .lock_with("fine-key", LockOptions::new().ttl(ttl))
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { what: "ttl", .. }),
            "{ttl:?}: {err}"
        );
    }
}

/// Releasing with a lease id that does not hold the key changes nothing.
pub async fn release_by_non_holder_is_refused(store: Store) {
    let key = unique_key("foreign-release");
    let guard = take(&store, &key, opts(&store)).await;
    let forged = Lease {
        key: Key::new(&key).unwrap(),
        lease_id: LeaseId::random(),
        ttl: test_ttl(&store),
        fencing_token: guard.fencing_token(),
        epoch: current_epoch(store.backend().as_ref()).await.epoch,
    };
    let err = store.backend().release(&forged).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let err = store.backend().renew(&forged).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let info = store.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder.map(|h| h.fencing_token),
        Some(guard.fencing_token())
    );
    guard.release().await.unwrap();
}

/// Asking again with the same lease id (a retry after an ambiguous failure)
/// succeeds with the same token.
pub async fn retry_with_same_lease_id_is_idempotent(store: Store) {
    let key = unique_key("retry");
    let epoch = current_epoch(store.backend().as_ref()).await.epoch;
    let req = AcquireRequest {
        data: Some("d".into()),
        ..acquire_request(&key, test_ttl(&store), Some(epoch))
    };
    let first = match store.backend().try_acquire(&req).await.unwrap() {
        AcquireOutcome::Acquired(g) => g,
        other => panic!("{other:?}"),
    };
    let second = match store.backend().try_acquire(&req).await.unwrap() {
        AcquireOutcome::Acquired(g) => g,
        other => panic!("retry with the same id refused: {other:?}"),
    };
    assert_eq!(first, second);
    let lease = Lease {
        key: req.key.clone(),
        lease_id: req.lease_id.clone(),
        ttl: req.ttl,
        fencing_token: first.fencing_token,
        epoch,
    };
    store.backend().release(&lease).await.unwrap();
}

/// List returns the keys under a prefix, held or not, in order.
pub async fn list_under_prefix(store: Store) {
    let base = unique_key("list");
    let held = take(&store, &format!("{base}/b"), opts(&store)).await;
    let g = take(&store, &format!("{base}/a"), opts(&store)).await;
    g.release().await.unwrap();
    let other = take(&store, &format!("{base}-x"), opts(&store)).await;
    let listed = store.list(&format!("{base}/")).await.unwrap();
    let keys: Vec<_> = listed.iter().map(|i| i.key.as_str().to_string()).collect();
    assert_eq!(keys, vec![format!("{base}/a"), format!("{base}/b")]);
    assert!(listed[0].holder.is_none());
    assert_eq!(
        listed[1].holder.as_ref().map(|h| h.fencing_token),
        Some(held.fencing_token())
    );
    assert!(store.list("/bad").await.is_err());
    held.release().await.unwrap();
    other.release().await.unwrap();
}

/// Owner label and data are stored with locks, semaphore permits and
/// leaderships, and shown by inspect, list, the semaphore's inspect, the
/// election's leader() and Held errors; the longest data allowed (multibyte
/// UTF-8 included) comes back intact.
pub async fn holder_data_visible_everywhere(store: Store) {
    let base = unique_key("holder-data");
    let data = format!("{}{}", "ü".repeat(500), "x".repeat(24));
    assert_eq!(data.len(), MAX_DATA_LEN);
    let label = "l".repeat(MAX_LABEL_LEN);
    let with = |l: &str, d: &str| opts(&store).owner_label(l).data(d);

    let lock_key = format!("{base}/lock");
    let guard = take(&store, &lock_key, with(&label, &data)).await;
    let holder = store
        .inspect(&lock_key)
        .await
        .unwrap()
        .holder
        .expect("held");
    assert_eq!(holder.data.as_deref(), Some(data.as_str()));
    assert_eq!(holder.owner.label.as_deref(), Some(label.as_str()));

    let sem_key = format!("{base}/sem");
    let sem = store
        .semaphore_with(&sem_key, 1, with("permit-holder", "permit data"))
        .unwrap();
    let permit = sem.try_acquire().await.unwrap();
    let slots = sem.inspect().await.unwrap();
    assert_eq!(slots.len(), 1, "{slots:?}");
    assert_eq!(slots[0].slot, permit.slot());
    let h = slots[0].info.holder.as_ref().expect("slot held");
    assert_eq!(
        (h.owner.label.as_deref(), h.data.as_deref()),
        (Some("permit-holder"), Some("permit data"))
    );
    assert_eq!(h.fencing_token, permit.fencing_token());
    let other = other_process(&store)
        .semaphore_with(&sem_key, 1, opts(&store))
        .unwrap();
    let held = assert_held(other.try_acquire().await.map(|p| p.into_guard()));
    assert_eq!(held.and_then(|h| h.data).as_deref(), Some("permit data"));

    let election = store
        .election_with(&format!("{base}/election"), with("leader-1", &data))
        .unwrap();
    let leadership = election.campaign().await.unwrap();
    let leader = other_process(&store)
        .election_with(election.key().as_str(), opts(&store))
        .unwrap()
        .leader()
        .await
        .unwrap()
        .expect("a leader");
    assert_eq!(leader.owner, *election.owner());
    assert_eq!(leader.data.as_deref(), Some(data.as_str()));
    assert_eq!(leader.fencing_token, leadership.term());

    let listed = store.list(&format!("{base}/")).await.unwrap();
    let held: Vec<_> = listed
        .iter()
        .filter_map(|i| {
            Some((
                i.key.as_str().strip_prefix(&base)?,
                i.holder.as_ref()?.data.as_deref()?.len(),
            ))
        })
        .collect();
    assert_eq!(
        held,
        vec![
            ("/election", MAX_DATA_LEN),
            ("/lock", MAX_DATA_LEN),
            ("/sem/:slot:0", "permit data".len()),
        ]
    );
    guard.release().await.unwrap();
    permit.release().await.unwrap();
    leadership.resign().await.unwrap();
}

/// Data and labels over the documented limits are refused with a clear
/// invalid-input error, for locks, semaphores and elections alike, before
/// anything reaches the backend.
pub async fn oversized_data_rejected(store: Store) {
    let key = unique_key("oversized");
    let too_long = "d".repeat(MAX_DATA_LEN + 1);
    let check = |err: Error, what: &str| {
        match &err {
            Error::InvalidInput { what: w, .. } => assert_eq!(*w, what, "{err}"),
            other => panic!("expected InvalidInput, got {other}"),
        }
        assert!(
            err.to_string().contains(&format!(
                "limit of {}",
                if what == "data" {
                    MAX_DATA_LEN
                } else {
                    MAX_LABEL_LEN
                }
            )),
            "{err}"
        );
    };
    check(
        store
            .lock_with(&key, opts(&store).data(too_long.clone()))
            .unwrap_err(),
        "data",
    );
    check(
        store
            .semaphore_with(&key, 2, opts(&store).data(too_long.clone()))
            .unwrap_err(),
        "data",
    );
    check(
        store
            .election_with(&key, opts(&store).data(too_long.clone()))
            .unwrap_err(),
        "data",
    );
    // Multibyte: the limit is in bytes.
    check(
        store
            .lock_with(&key, opts(&store).data("ü".repeat(MAX_DATA_LEN / 2 + 1)))
            .unwrap_err(),
        "data",
    );
    let long_label = "l".repeat(MAX_LABEL_LEN + 1);
    check(
        store
            .lock_with(&key, opts(&store).owner_label(long_label.clone()))
            .unwrap_err(),
        "owner label",
    );
    check(
        store
            .election_with(&key, opts(&store).owner_label(long_label))
            .unwrap_err(),
        "owner label",
    );
    let info = store.inspect(&key).await.unwrap();
    assert_eq!(
        (info.fencing_token, info.holder),
        (0, None),
        "nothing was stored"
    );
}

/// A new process's first grant is one attempt when its backend read the
/// store's epoch while opening ([`Backend::epoch_at_open`]): not one that
/// only learns the epoch and another that asks in it.
pub async fn first_grant_is_one_attempt_after_an_epoch_read_at_open(store: Store) {
    let backend = store.backend().clone();
    if backend.epoch_at_open().is_none() {
        return;
    }
    let counted = Arc::new(CountedAttempts {
        inner: backend,
        attempts: AtomicU32::new(0),
    });
    let process = like(&store, counted.clone());
    let key = unique_key("first-grant");
    let guard = take(&process, &key, opts(&store)).await;
    guard.release().await.unwrap();
    assert_eq!(counted.attempts.load(Ordering::SeqCst), 1);
}

/// A backend, counting acquire attempts.
#[derive(Debug)]
struct CountedAttempts {
    inner: Arc<dyn Backend>,
    attempts: AtomicU32,
}

#[async_trait::async_trait]
impl Backend for CountedAttempts {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> leasehold::backend::Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, request: &AcquireRequest) -> leasehold::Result<AcquireOutcome> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(request).await
    }
    async fn renew(&self, lease: &Lease) -> leasehold::Result<()> {
        self.inner.renew(lease).await
    }
    async fn release(&self, lease: &Lease) -> leasehold::Result<()> {
        self.inner.release(lease).await
    }
    async fn inspect(&self, key: &Key) -> leasehold::Result<leasehold::KeyInfo> {
        self.inner.inspect(key).await
    }
    async fn break_lease(&self, key: &Key) -> leasehold::Result<Option<leasehold::HolderInfo>> {
        self.inner.break_lease(key).await
    }
    async fn list(&self, prefix: &str) -> leasehold::Result<Vec<leasehold::KeyInfo>> {
        self.inner.list(prefix).await
    }
    async fn record_run(&self, lease: &Lease, run: &RunRecord) -> leasehold::Result<()> {
        self.inner.record_run(lease, run).await
    }
    fn watch_release(&self, keys: &[Key]) -> Option<leasehold::backend::ReleaseWatch> {
        self.inner.watch_release(keys)
    }
    fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.inner.epoch_at_open()
    }
    fn created_at_open(&self) -> Option<bool> {
        self.inner.created_at_open()
    }
}
