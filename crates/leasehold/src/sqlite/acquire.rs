//! The acquire transaction.

use super::*;

/// The statement that writes a grant: key, fence, lease id, boot id,
/// expiry (ns), TTL (ms), owner host, pid and label, data, acquisition
/// time (ms). Public for the benchmarks' raw loop, which measures the same
/// write without the library.
#[doc(hidden)]
pub const GRANT: &str = "INSERT INTO leasehold_leases (key, fence, lease_id, boot_id, expires_at_ns, ttl_ms, owner_host, owner_pid, owner_label, data, acquired_at_ms)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
     ON CONFLICT(key) DO UPDATE SET fence = excluded.fence, lease_id = excluded.lease_id,
       boot_id = excluded.boot_id, expires_at_ns = excluded.expires_at_ns, ttl_ms = excluded.ttl_ms,
       owner_host = excluded.owner_host, owner_pid = excluded.owner_pid, owner_label = excluded.owner_label,
       data = excluded.data, acquired_at_ms = excluded.acquired_at_ms";

/// The acquire transaction (see the module docs): [`acquire_all_in`] of
/// one request.
pub(super) fn acquire_in(
    conn: &mut Connection,
    ctx: &Ctx,
    req: &AcquireRequest,
) -> Result<AcquireOutcome> {
    Ok(
        match acquire_all_in(conn, ctx, std::slice::from_ref(req))? {
            BatchOutcome::Acquired(mut grants) => match grants.pop() {
                Some(grant) => AcquireOutcome::Acquired(grant),
                None => unreachable!("one request, one grant"),
            },
            BatchOutcome::Held { holder, .. } => AcquireOutcome::Held(holder),
            BatchOutcome::OtherEpoch(epoch) => AcquireOutcome::OtherEpoch(epoch),
            other => unreachable!("the acquire transaction answered {other:?}"),
        },
    )
}

/// The acquire transaction of one or more keys: every key checked, then
/// every key granted, in one immediate transaction (nothing else writes
/// between the checks and the grants), or nothing written.
pub(super) fn acquire_all_in(
    conn: &mut Connection,
    ctx: &Ctx,
    requests: &[AcquireRequest],
) -> Result<BatchOutcome> {
    let op = |e| db_error("acquire", e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(op)?;
    if !ctx.same_file() {
        // Replaced since the connection was checked: the next attempt
        // re-opens the path.
        return Err(Error::backend(
            NAME,
            "acquire",
            true,
            "the database file was replaced during the attempt",
        ));
    }
    let now = ctx.now_ns();
    let Some(epoch_row) = read_epoch(&tx).map_err(op)? else {
        return Err(Error::backend(
            NAME,
            "acquire",
            true,
            "the store has no epoch row",
        ));
    };
    // Before anything is written: a store moved to an unknown protocol.
    epoch_row.check_protocol()?;
    let mut rows = Vec::with_capacity(requests.len());
    for (index, req) in requests.iter().enumerate() {
        if req.epoch != Some(epoch_row.epoch) || epoch_row.boot_id != *ctx.boot_id {
            return Ok(BatchOutcome::OtherEpoch(store_epoch(&epoch_row, ctx, now)));
        }
        check_ttl(req.ttl, &store_epoch(&epoch_row, ctx, now))?;
        let row = get_row(&tx, req.key.as_str()).map_err(op)?;
        if let Some(r) = row.as_ref().filter(|r| r.is_live(ctx, now)) {
            if r.lease_id.as_deref() != Some(req.lease_id.as_str()) {
                let holder = r.holder(ctx, now);
                return Ok(BatchOutcome::Held { index, holder });
            }
        }
        rows.push(row);
    }
    let acquired_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(ms)
        .unwrap_or(0);
    let mut grants = Vec::with_capacity(requests.len());
    for (req, row) in requests.iter().zip(rows) {
        let expires = now + req.ttl.as_nanos() as i64;
        let fence = match &row {
            Some(r) if r.is_live(ctx, now) => {
                // Our own lease, asked for again: extend, same token.
                tx.prepare_cached("UPDATE leasehold_leases SET expires_at_ns = ?2 WHERE key = ?1")
                    .and_then(|mut st| st.execute(params![req.key.as_str(), expires]))
                    .map_err(op)?;
                grants.push(Grant::new(r.fence));
                continue;
            }
            Some(r) => next_token(r.fence, epoch_row.epoch),
            None => next_token(0, epoch_row.epoch),
        };
        tx.prepare_cached(GRANT)
            .and_then(|mut st| {
                st.execute(params![
                    req.key.as_str(),
                    fence as i64,
                    req.lease_id.as_str(),
                    &*ctx.boot_id,
                    expires,
                    ms(req.ttl),
                    req.owner.host,
                    req.owner.pid as i64,
                    req.owner.label,
                    req.data,
                    acquired_at,
                ])
            })
            .map_err(op)?;
        grants.push(Grant::new(fence));
    }
    tx.commit().map_err(op)?;
    Ok(BatchOutcome::Acquired(grants))
}
