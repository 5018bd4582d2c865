//! One read of the store at one revision: the epoch marker, the epoch's
//! timer, and a key's record and holder, remembered as the latest seen.

use leasehold::{Error, Key, Result};

use crate::backend::Snapshot;
use crate::grpc;
use crate::grpc::etcdserverpb::{RequestOp, ResponseOp};
use crate::record::{from_json, EpochMarker};
use crate::EtcdBackend;

impl EtcdBackend {
    /// The reads of a [`Snapshot`]: the marker, the epoch timer, and (with
    /// `key`) its record and holder.
    pub(crate) fn snapshot_ops(&self, key: Option<&Key>) -> Vec<RequestOp> {
        let mut ops = vec![grpc::get(self.marker_key()), grpc::get(self.fresh_key())];
        if let Some(key) = key {
            ops.push(grpc::get(self.record_key(key.as_str())));
            ops.push(grpc::get(self.holder_key(key.as_str())));
        }
        ops
    }

    /// The marker, the epoch timer, and (with `key`) its record and holder,
    /// at one revision: one round trip.
    pub(crate) async fn read(&self, op: &'static str, key: Option<&Key>) -> Result<Snapshot> {
        let resp = self.txn(op, Vec::new(), self.snapshot_ops(key)).await?;
        self.snapshot(key, resp.responses)
    }

    /// The [`Snapshot`] the responses to [`snapshot_ops`](Self::snapshot_ops)
    /// show, remembered as the store's latest (see [`Inner::seen`]).
    pub(crate) fn snapshot(
        &self,
        key: Option<&Key>,
        responses: Vec<ResponseOp>,
    ) -> Result<Snapshot> {
        let mut kvs = responses
            .into_iter()
            .map(|r| grpc::range_kvs(r).into_iter().next());
        let marker = kvs.next().flatten();
        let fresh = kvs.next().flatten();
        let record = kvs.next().flatten();
        let holder = kvs.next().flatten();
        {
            let mut seen = self.seen();
            seen.marker = marker.as_ref().map(|kv| kv.value.clone());
            if let Some(key) = key {
                seen.remember(key.as_str(), record.as_ref().map(|kv| kv.value.clone()));
            }
        }
        Ok(Snapshot {
            marker: marker
                .map(|kv| Ok::<_, Error>((EpochMarker::parse(&kv.value)?, kv)))
                .transpose()?,
            fresh,
            record: record
                .map(|kv| Ok::<_, Error>((from_json("key record", &kv.value)?, kv)))
                .transpose()?,
            holder: holder
                .map(|kv| Ok::<_, Error>((from_json("holder record", &kv.value)?, kv)))
                .transpose()?,
        })
    }
}
