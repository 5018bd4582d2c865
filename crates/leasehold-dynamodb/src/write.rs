//! The pieces of a conditional write of one item: what it did, its
//! update expression, the version it sets, and why a lease it refused is
//! not ours.

use leasehold::{backend::Lease, Error, LossReason, Result};

use crate::record::{Item, Stored};

/// The outcome of one conditional write.
pub(crate) enum Write {
    /// Applied; the attributes asked for with `ReturnValues`.
    Done(Item),
    /// The condition failed; the item as it was (absent if there is none).
    Refused(Option<Item>),
    /// The table does not exist (deleted).
    NoTable,
}

/// `SET a, b REMOVE c, d`.
pub(crate) fn update_expression(set: &[String], remove: &[String]) -> String {
    let mut update = format!("SET {}", set.join(", "));
    if !remove.is_empty() {
        update.push_str(&format!(" REMOVE {}", remove.join(", ")));
    }
    update
}

pub(crate) fn new_rvn() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Why a lease is not ours, from the item as it was when the condition
/// failed.
pub(crate) fn not_ours(old: Option<&Item>) -> Result<String> {
    let Some(old) = old else {
        return Ok("the key has no record".into());
    };
    let stored = Stored::decode(old)?;
    Ok(match stored.lease {
        None => "the lease was released or broken".into(),
        Some(_) => format!(
            "the key is held by another lease (fencing token {})",
            stored.fence
        ),
    })
}

pub(crate) fn lost(lease: &Lease, why: String) -> Error {
    Error::LeaseLost {
        key: lease.key.to_string(),
        reason: LossReason::Revoked(why),
    }
}
