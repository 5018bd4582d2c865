//! The store epoch's row: read, started, quarantined, and reported to the core.

use super::*;

/// The epoch row.
#[derive(Debug, Clone)]
pub(super) struct EpochRow {
    pub(super) epoch: u64,
    pub(super) max_ttl: Duration,
    pub(super) file: FileId,
    pub(super) boot_id: String,
    pub(super) settled_at_ns: i64,
    /// The store's protocol, as written (`None`: protocol 1, a row
    /// written before versions were recorded; see
    /// [protocol versions](crate::backend::protocol)).
    pub(super) protocol: Option<i64>,
}

impl EpochRow {
    /// The row's protocol, if this build speaks it.
    pub(super) fn check_protocol(&self) -> Result<u64> {
        check_protocol_number(NAME, self.protocol)
    }
}

/// The epoch to start after `old`: the wall clock's next whole second
/// (waiting for it, so that no later epoch on this clock can equal it), and
/// above `old`.
pub(super) fn next_epoch(old: u64) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let next = Duration::from_secs(now.as_secs() + 1);
    std::thread::sleep(next.saturating_sub(now));
    (next.as_secs().saturating_sub(EPOCH_ORIGIN_UNIX_SECS)).max(old + 1)
}

/// `settled_at_ns` of an epoch that began when no lease of an earlier one
/// could be live (proved by the directory lock, or by the file's rows).
/// A version that reads it as a time has it settled long ago, as it is.
pub(super) const PROVEN: i64 = i64::MIN;

/// How long after an epoch began without proof it is settled: one
/// confirmation window (+0.1 %). The epoch's age is read back from
/// `settled_at_ns` with the same constant, so it is the time since the
/// epoch began whatever window a process uses.
pub(super) fn quarantine_ns() -> i64 {
    (CONFIRMATION_WINDOW + CONFIRMATION_WINDOW / 1000).as_nanos() as i64
}

/// The epoch row. A file of a build from before protocol versions has no
/// `protocol` column until a build that records versions opens it to take
/// leases (looking adds nothing): read as protocol 1.
pub(super) fn read_epoch(conn: &Connection) -> rusqlite::Result<Option<EpochRow>> {
    // Cached statements (here and in the other hot paths): parsing the SQL
    // again each time costs about as much as running it.
    let with_protocol = conn.prepare_cached(
        "SELECT epoch, max_ttl_ms, file_dev, file_ino, boot_id, settled_at_ns, protocol FROM leasehold_store WHERE id = 1",
    );
    let (mut st, has_protocol) = match with_protocol {
        Ok(st) => (st, true),
        Err(e) if e.to_string().contains("no such column") => (
            conn.prepare_cached(
                "SELECT epoch, max_ttl_ms, file_dev, file_ino, boot_id, settled_at_ns FROM leasehold_store WHERE id = 1",
            )?,
            false,
        ),
        Err(e) => return Err(e),
    };
    st.query_row([], |r| {
        Ok(EpochRow {
            epoch: r.get::<_, i64>(0)? as u64,
            max_ttl: Duration::from_millis(r.get::<_, i64>(1)? as u64),
            file: FileId {
                dev: r.get::<_, i64>(2)? as u64,
                ino: r.get::<_, i64>(3)? as u64,
            },
            boot_id: r.get(4)?,
            settled_at_ns: r.get(5)?,
            protocol: if has_protocol { r.get(6)? } else { None },
        })
    })
    .optional()
}

/// The epoch as reported to the core: its age on the boot clock, which
/// every process of this boot shares (unknown for another boot's row,
/// which `check_epoch` never leaves in place).
pub(super) fn store_epoch(row: &EpochRow, ctx: &Ctx, now_ns: i64) -> StoreEpoch {
    let age = (row.boot_id == *ctx.boot_id).then(|| {
        if row.settled_at_ns == PROVEN {
            // No lease of an earlier epoch was live when it began.
            return Duration::MAX;
        }
        // Since the epoch began: settled_at_ns is its beginning plus the
        // quarantine. (A row an older version wrote without proof records
        // its beginning plus that version's quarantine, one max TTL.)
        let began = row.settled_at_ns.saturating_sub(quarantine_ns());
        Duration::from_nanos(now_ns.saturating_sub(began).max(0) as u64)
    });
    StoreEpoch::new(row.epoch, row.max_ttl).with_age(age)
}
