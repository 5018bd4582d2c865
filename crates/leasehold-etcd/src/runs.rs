//! Run records (see [run records](leasehold::backend#run-records)) on the
//! key's record, written under the lease.

use leasehold::{backend::Lease, Error, Result, RunOutcome, RunRecord};

use crate::backend::RACE_RETRIES;
use crate::error::NAME;
use crate::grpc;
use crate::record::to_json;
use crate::EtcdBackend;

impl EtcdBackend {
    pub(crate) async fn write_run(&self, lease: &Lease, run: &RunRecord) -> Result<()> {
        const OP: &str = "record run";
        let rk = self.record_key(lease.key.as_str());
        let hk = self.holder_key(lease.key.as_str());
        for _ in 0..RACE_RETRIES {
            let snap = self.read(OP, Some(&lease.key)).await?;
            let (record, record_rev) = match &snap.record {
                Some((r, kv)) => (Some(r.clone()), kv.mod_revision),
                None => (None, 0),
            };
            match self.ours(lease, &snap) {
                Ok((_, holder_kv)) => {
                    let mut r = record.unwrap_or_default();
                    let stored = run.to_stored();
                    if run.outcome == RunOutcome::Succeeded {
                        r.last_success = Some(stored.clone());
                    }
                    r.last_run = Some(stored);
                    r.last_run_token = run.fencing_token;
                    // Written only while our holder key is the very
                    // version we read (same lease, not broken, not expired).
                    let written = to_json(&r);
                    let resp = self
                        .txn(
                            OP,
                            vec![
                                grpc::modified_at(hk.clone(), holder_kv.mod_revision),
                                grpc::modified_at(rk.clone(), record_rev),
                            ],
                            vec![grpc::put(rk.clone(), written.clone(), 0)],
                        )
                        .await?;
                    if resp.succeeded {
                        self.seen().remember(lease.key.as_str(), Some(written));
                        return Ok(());
                    }
                }
                Err(lost_err) => {
                    // Not our lease any more: never a success; a failed
                    // run is still kept as the last run when it is the
                    // latest the record has seen.
                    let Some(mut r) = record else {
                        return Err(lost_err);
                    };
                    if run.outcome == RunOutcome::Succeeded || r.last_run_token >= run.fencing_token
                    {
                        return Err(lost_err);
                    }
                    r.last_run = Some(run.to_stored());
                    r.last_run_token = run.fencing_token;
                    let resp = self
                        .txn(
                            OP,
                            vec![grpc::modified_at(rk.clone(), record_rev)],
                            vec![grpc::put(rk.clone(), to_json(&r), 0)],
                        )
                        .await?;
                    if resp.succeeded {
                        self.seen().remember(lease.key.as_str(), Some(to_json(&r)));
                        return Err(lost_err);
                    }
                }
            }
        }
        Err(Error::backend(NAME, OP, true, "the key kept changing"))
    }
}
