//! Run records (see [run records](leasehold::backend#run-records)): the
//! key's item carries its last run and last success, written on condition
//! that the lease still holds it; a run that did not succeed is still
//! recorded over an earlier run's record after the lease is gone.

use aws_sdk_dynamodb::types::ReturnValue;
use leasehold::{backend::Lease, Result, RunRecord};

use crate::record::{self, n, s, Expr};
use crate::write::{lost, new_rvn, not_ours, update_expression, Write};
use crate::DynamoDbBackend;

impl DynamoDbBackend {
    pub(crate) async fn write_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        let text = run.to_stored();
        let mut e = Expr::default();
        let lid = e.v("lid", s(lease.lease_id.as_str()));
        let stored = e.v("run", s(&text));
        let token = e.v("token", n(run.fencing_token));
        let mut set = vec![
            e.equals(record::RVN, "rvn", s(new_rvn())),
            format!("{} = {stored}", e.n(record::LAST_RUN)),
            format!("{} = {token}", e.n(record::LAST_RUN_TOKEN)),
        ];
        if run.succeeded() {
            set.push(format!("{} = {stored}", e.n(record::LAST_SUCCESS)));
        }
        let condition = format!("{} = {lid}", e.n(record::LEASE_ID));
        let old = match self
            .update(
                "record_run",
                lease.key.as_str(),
                e,
                update_expression(&set, &[]),
                condition,
                ReturnValue::None,
            )
            .await?
        {
            Write::Done(_) => return Ok(()),
            Write::Refused(old) => old,
            Write::NoTable => return Err(lost(lease, "the table was deleted".into())),
        };
        if !run.succeeded() && old.is_some() {
            // Not ours any more: still the last run, unless a later run's
            // record is there. The version (rvn) stays: this is no sign of
            // life of the current holder, whose takeover it must not delay.
            let mut e = Expr::default();
            let stored = e.v("run", s(&text));
            let token = e.v("token", n(run.fencing_token));
            let last = e.n(record::LAST_RUN_TOKEN);
            let set = vec![
                format!("{} = {stored}", e.n(record::LAST_RUN)),
                format!("{last} = {token}"),
            ];
            let condition = format!(
                "attribute_exists({}) AND (attribute_not_exists({last}) OR {last} < {token})",
                e.n(record::FENCE)
            );
            self.update(
                "record_run",
                lease.key.as_str(),
                e,
                update_expression(&set, &[]),
                condition,
                ReturnValue::None,
            )
            .await?;
        }
        Err(lost(lease, not_ours(old.as_ref())?))
    }
}
