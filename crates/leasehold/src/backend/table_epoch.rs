//! What the stores that keep their store epoch in a row of their own lease
//! table (PostgreSQL, MySQL) share, written once: the epoch row as read,
//! what reading it decides before anything is written, and the TTL check
//! against the table's max TTL. Each store reads the row from its own
//! client's rows and writes its own SQL.

use std::time::{Duration, SystemTime};

use crate::backend::protocol::check_protocol_number;
use crate::backend::{epoch_at, StoreEpoch};
use crate::{Error, Result};

/// What a table's epoch row says.
#[derive(Debug, Clone)]
pub struct EpochRow {
    /// The store epoch.
    pub epoch: u64,
    /// The max TTL the table records.
    pub max_ttl: Duration,
    /// Whether the row was written in this very table (not restored from a
    /// dump into another one); each store says how it tells.
    pub same_table: bool,
    /// How long ago the epoch began, by the server's clock.
    pub age: Duration,
    /// Whether the epoch is proven: its creator stated that no store
    /// existed there before ([`Creation::NewProven`](crate::Creation::NewProven)).
    pub proven: bool,
    /// The store's protocol as written (`None`: protocol 1, a row of a
    /// build from before protocol versions were recorded).
    pub protocol: Option<i64>,
}

impl EpochRow {
    /// The row's protocol, if a build of this version speaks it.
    ///
    /// # Errors
    /// [`Error::UnsupportedProtocol`](crate::Error::UnsupportedProtocol)
    /// for one it does not.
    pub fn check_protocol(&self, backend: &'static str) -> Result<u64> {
        check_protocol_number(backend, self.protocol)
    }

    /// The store epoch the row describes, its age as read.
    pub fn store_epoch(&self) -> StoreEpoch {
        let epoch = StoreEpoch::new(self.epoch, self.max_ttl).with_age(Some(self.age));
        if self.proven {
            epoch.proven()
        } else {
            epoch
        }
    }

    /// What a look reports for a table without an epoch row: an epoch
    /// beginning now, of no age (the next acquirer starts one).
    pub fn unknown(max_ttl: Duration) -> Self {
        EpochRow {
            epoch: epoch_at(SystemTime::now()),
            max_ttl,
            same_table: false,
            age: Duration::ZERO,
            proven: false,
            protocol: None,
        }
    }
}

/// What reading the epoch row (before anything is written) decides.
#[derive(Debug)]
pub enum FirstRead {
    /// The epoch as it is: written in this table, or, when only looking,
    /// whatever the row says (restored from another table, which the next
    /// acquirer renews: reported as not proven).
    Epoch(EpochRow),
    /// Looking, and there is no epoch row: ask whether the table holds any
    /// lease row, and answer with [`no_epoch_row`].
    NoRowWhileLooking,
    /// The epoch must be settled: no row, or one from another table; the
    /// store creates or renews it (in a transaction that locks the row).
    Settle,
}

/// What the epoch row `found` (if any) decides; `look`: the backend only
/// looks ([`Creation::Never`](crate::Creation::Never)) and writes nothing.
/// Refuses a protocol this build does not speak, before anything is
/// written.
///
/// # Errors
/// As [`EpochRow::check_protocol`].
pub fn first_read(backend: &'static str, found: Option<EpochRow>, look: bool) -> Result<FirstRead> {
    if let Some(row) = &found {
        row.check_protocol(backend)?;
    }
    Ok(match found {
        Some(row) if row.same_table => FirstRead::Epoch(row),
        Some(row) if look => FirstRead::Epoch(EpochRow {
            proven: false,
            ..row
        }),
        None if look => FirstRead::NoRowWhileLooking,
        _ => FirstRead::Settle,
    })
}

/// A look's answer for `table` without an epoch row: with lease rows, an
/// epoch of no age ([`EpochRow::unknown`]); without any, no store yet
/// (another process is creating it, or its creation was cut short).
///
/// # Errors
/// [`Error::NoStore`] when the table holds no lease row.
pub fn no_epoch_row(table: &str, any_lease: bool, max_ttl: Duration) -> Result<EpochRow> {
    if any_lease {
        Ok(EpochRow::unknown(max_ttl))
    } else {
        Err(Error::no_store(format!(
            "table {table} has no store epoch yet (another process is creating the store, or its creation was cut short)"
        )))
    }
}

/// Checks a lease's TTL against the store's range: `min` to the table's
/// max TTL `max`.
///
/// # Errors
/// [`Error::InvalidInput`] ("ttl") naming the value and the range.
pub fn check_ttl(ttl: Duration, min: Duration, max: Duration) -> Result<()> {
    if ttl < min || ttl > max {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{ttl:?} is outside {min:?}..={max:?} (the store's max TTL bounds the wait after the store's data is lost)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(same_table: bool, protocol: Option<i64>) -> EpochRow {
        EpochRow {
            epoch: 7,
            max_ttl: Duration::from_secs(60),
            same_table,
            age: Duration::from_secs(1),
            proven: true,
            protocol,
        }
    }

    #[test]
    fn the_first_read_settles_only_what_it_must() {
        let epoch = |r: Result<FirstRead>| match r.unwrap() {
            FirstRead::Epoch(row) => row,
            other => panic!("{other:?}"),
        };
        // This table's row: as it is, proven or not, looking or not.
        assert!(epoch(first_read("t", Some(row(true, None)), false)).proven);
        assert!(epoch(first_read("t", Some(row(true, None)), true)).proven);
        // Another table's row: settled, unless looking (then never proven).
        assert!(matches!(
            first_read("t", Some(row(false, None)), false),
            Ok(FirstRead::Settle)
        ));
        assert!(!epoch(first_read("t", Some(row(false, None)), true)).proven);
        // No row.
        assert!(matches!(
            first_read("t", None, false),
            Ok(FirstRead::Settle)
        ));
        assert!(matches!(
            first_read("t", None, true),
            Ok(FirstRead::NoRowWhileLooking)
        ));
        // A newer protocol: refused, whatever else.
        assert!(matches!(
            first_read("t", Some(row(true, Some(999))), false),
            Err(Error::UnsupportedProtocol { .. })
        ));
    }

    #[test]
    fn a_look_without_an_epoch_row_is_no_store_unless_leases_are_there() {
        let max = Duration::from_secs(60);
        assert!(matches!(
            no_epoch_row("t", false, max),
            Err(Error::NoStore { .. })
        ));
        let row = no_epoch_row("t", true, max).unwrap();
        assert_eq!(
            (row.age, row.proven, row.same_table),
            (Duration::ZERO, false, false)
        );
    }

    #[test]
    fn ttls_outside_the_range_are_refused() {
        let (s, m) = (Duration::from_secs(1), Duration::from_secs(60));
        assert!(check_ttl(s, s, m).is_ok());
        assert!(check_ttl(m, s, m).is_ok());
        assert!(matches!(
            check_ttl(m + s, s, m),
            Err(Error::InvalidInput { what: "ttl", .. })
        ));
        assert!(check_ttl(Duration::from_millis(999), s, m).is_err());
    }
}
