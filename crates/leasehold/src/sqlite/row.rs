//! A lease row as read back, and whether a lease is still the row's.

use super::*;

/// A row as read back.
pub(super) struct Row {
    pub(super) fence: u64,
    pub(super) lease_id: Option<String>,
    pub(super) boot_id: Option<String>,
    pub(super) expires_at_ns: Option<i64>,
    pub(super) ttl_ms: Option<i64>,
    pub(super) owner_host: Option<String>,
    pub(super) owner_pid: Option<i64>,
    pub(super) owner_label: Option<String>,
    pub(super) data: Option<String>,
    pub(super) acquired_at_ms: Option<i64>,
    pub(super) last_success: Option<String>,
    pub(super) last_run: Option<String>,
}

pub(super) const SELECT: &str = "SELECT key, fence, lease_id, boot_id, expires_at_ns, ttl_ms, owner_host, owner_pid, owner_label, data, acquired_at_ms, last_success, last_run FROM leasehold_leases";

pub(super) fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, Row)> {
    Ok((
        r.get(0)?,
        Row {
            fence: r.get::<_, i64>(1)? as u64,
            lease_id: r.get(2)?,
            boot_id: r.get(3)?,
            expires_at_ns: r.get(4)?,
            ttl_ms: r.get(5)?,
            owner_host: r.get(6)?,
            owner_pid: r.get(7)?,
            owner_label: r.get(8)?,
            data: r.get(9)?,
            acquired_at_ms: r.get(10)?,
            last_success: r.get(11)?,
            last_run: r.get(12)?,
        },
    ))
}

impl Row {
    pub(super) fn is_live(&self, ctx: &Ctx, now_ns: i64) -> bool {
        self.lease_id.is_some()
            && self.boot_id.as_deref() == Some(&*ctx.boot_id)
            && self.expires_at_ns.is_some_and(|e| e > now_ns)
    }

    pub(super) fn holder(&self, ctx: &Ctx, now_ns: i64) -> Option<HolderInfo> {
        if !self.is_live(ctx, now_ns) {
            return None;
        }
        let owner = Owner {
            host: self.owner_host.clone().unwrap_or_default(),
            pid: self.owner_pid.unwrap_or_default() as u32,
            label: self.owner_label.clone(),
        };
        let expires_in = self
            .expires_at_ns
            .map(|e| Duration::from_nanos((e - now_ns).max(0) as u64));
        Some(
            HolderInfo::new(owner, self.fence)
                .with_data(self.data.clone())
                .with_acquired_at(
                    self.acquired_at_ms
                        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms as u64)),
                )
                .with_expires_in(expires_in)
                .with_ttl(self.ttl_ms.map(|ms| Duration::from_millis(ms as u64))),
        )
    }

    pub(super) fn info(&self, key: Key, ctx: &Ctx, now_ns: i64) -> Result<KeyInfo> {
        let decode = |text: &Option<String>| {
            text.as_deref()
                .map(|t| RunRecord::from_stored(NAME, t))
                .transpose()
        };
        Ok(KeyInfo::new(key, self.fence, self.holder(ctx, now_ns))
            .with_runs(decode(&self.last_success)?, decode(&self.last_run)?))
    }
}

pub(super) fn get_row(conn: &Connection, key: &str) -> rusqlite::Result<Option<Row>> {
    conn.prepare_cached(&format!("{SELECT} WHERE key = ?1"))?
        .query_row([key], read_row)
        .optional()
        .map(|r| r.map(|(_, row)| row))
}

pub(super) fn lost(lease: &Lease, why: &str) -> Error {
    Error::LeaseLost {
        key: lease.key.to_string(),
        reason: LossReason::Revoked(why.into()),
    }
}

/// Why `lease` is not ours in `row`.
pub(super) fn why_not_ours(row: Option<&Row>, lease: &Lease) -> &'static str {
    match row {
        None => "the key has no record",
        Some(r) if r.lease_id.is_none() => "the lease was released or broken",
        Some(r) if r.lease_id.as_deref() != Some(lease.lease_id.as_str()) => {
            "the key is held by another lease"
        }
        Some(_) => "the lease expired",
    }
}

pub(super) fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

pub(super) fn replaced(lease: &Lease) -> Error {
    lost(
        lease,
        "the database file was deleted or replaced (its data, and the lease, are gone)",
    )
}
