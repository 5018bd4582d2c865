//! An acquisition: a conditional write of the lease on the key's record
//! (free, or ripe for takeover after an unchanged observation), or, for a
//! key without a record in the epoch, the record's creation in one
//! transaction with a counted write of the epoch's folder.

use std::time::Duration;

use leasehold::backend::{next_token, AcquireOutcome, AcquireRequest, Grant, Lease};
use leasehold::{Error, Result};
use zookeeper_client as zk;

use crate::backend::{check_ttl, with_lease, Inner, Written};
use crate::error::{zk as zk_error, NAME};
use crate::record::Record;

/// How many times an acquisition creates a key's first record again after
/// losing to another creation in the same epoch (see
/// [`Inner::create_record`]), within a quarter of its TTL.
const CREATION_TRIES: usize = 1024;

/// The pause before a key's first record's `tries`-th try again: random,
/// up to 1 ms doubled with each try, at most 16 ms.
fn creation_pause(tries: usize) -> Duration {
    use rand::Rng;
    let cap = Duration::from_millis(1 << tries.min(4));
    cap.mul_f64(rand::rng().random_range(0.0..=1.0))
}

/// The answer when a key's first record lost every try to other keys'
/// creations (retryable).
fn raced_creation() -> Error {
    Error::backend(
        NAME,
        "acquire",
        true,
        "the key's first record lost every try to other keys' first records created at the same time; try again",
    )
}

/// What creating a key's first record met.
enum Created {
    /// Created, with this token.
    Token(u64),
    /// Another writer got there first (the record, or another key's first
    /// record): read again.
    Raced,
    /// The epoch's folder is gone: the store's data was lost.
    Gone,
}

impl Inner {
    pub(crate) async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome> {
        let current = self.current_epoch("acquire").await?;
        let epoch = match req.epoch {
            Some(e) if e == current.epoch => e,
            // The request names another epoch, or none: answer with the
            // store's epoch as it is now.
            _ => {
                let fresh = self.refresh_epoch("acquire").await?;
                match req.epoch {
                    Some(e) if e == fresh.epoch.epoch => e,
                    _ => {
                        return Ok(AcquireOutcome::OtherEpoch(
                            self.current_epoch("acquire").await?,
                        ))
                    }
                }
            }
        };
        check_ttl(req.ttl, self.max_ttl.get())?;
        self.settle("acquire", epoch).await?;
        let key = req.key.as_str();
        let mut holder = None;
        // Tries again after lost creations only within a quarter of the
        // TTL: the grant must come back well before the lease's safety
        // deadline, which counts from the acquisition's start.
        let started = tokio::time::Instant::now();
        let (mut rounds, mut creations) = (0, 0);
        while rounds < 4 {
            rounds += 1;
            let observed = self.observations.ripe(key, self.clock.now());
            let Some(read) = self.read("acquire", epoch, &req.key).await? else {
                match self.create_record(req, epoch).await? {
                    Created::Token(fence) => {
                        self.observations.forget(key);
                        return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
                    }
                    // Every first record of the epoch bumps its folder's
                    // version, so simultaneous creations of other keys
                    // fail ours: each round one of them wins, so try
                    // again without counting a round (up to a bound),
                    // after a random pause that grows with the tries (so
                    // many creators spread out instead of colliding
                    // again), and never answer "held" for a key nobody
                    // holds.
                    Created::Raced
                        if creations < CREATION_TRIES && started.elapsed() < req.ttl / 4 =>
                    {
                        creations += 1;
                        rounds -= 1;
                        tokio::time::sleep(creation_pause(creations)).await;
                        continue;
                    }
                    Created::Raced => return Err(raced_creation()),
                    Created::Gone => return self.other_epoch().await,
                }
            };
            let fence = match &read.record.lease {
                None => next_token(read.record.fence, epoch),
                // Ours already: an earlier attempt with this id went
                // through; extend it, same token.
                Some(l) if l.id == req.lease_id.as_str() => read.record.fence,
                Some(l) => {
                    holder = read.record.holder();
                    let rvn = read.rvn();
                    if observed.as_deref() != Some(rvn.as_str()) {
                        let wait = self.observation_wait(l.ttl());
                        let ripe = self.observations.saw(key, &rvn, wait, self.clock.now());
                        if ripe {
                            // Ripe only now: take over in the next round,
                            // conditional on that version.
                            continue;
                        }
                        return Ok(AcquireOutcome::Held(holder));
                    }
                    // Unchanged for the holder's whole TTL: take over.
                    next_token(read.record.fence, epoch)
                }
            };
            let record = with_lease(read.record, req, fence);
            match self
                .write("acquire", epoch, &req.key, &record, read.stat.version)
                .await?
            {
                Written::Done(version) => {
                    self.observations.forget(key);
                    self.writes
                        .keep(&granted(req, epoch, fence), record, version);
                    return Ok(AcquireOutcome::Acquired(Grant::new(fence)));
                }
                Written::Changed => continue,
                Written::Gone => return self.other_epoch().await,
            }
        }
        Ok(AcquireOutcome::Held(holder))
    }

    /// How long a holder's version must stay unchanged before a takeover:
    /// its TTL, 0.1 % for clock rates, and the margin.
    fn observation_wait(&self, ttl: Duration) -> Duration {
        ttl + ttl / 1000 + self.margin
    }

    /// The answer when the epoch's records are gone: the store's epoch as
    /// it is now.
    async fn other_epoch(&self) -> Result<AcquireOutcome> {
        let fresh = self.refresh_epoch("acquire").await?;
        Ok(AcquireOutcome::OtherEpoch(fresh.epoch))
    }

    /// Creates `req`'s key's first record in `epoch`, with the epoch's
    /// first token, in one transaction with a write of the epoch's folder
    /// conditional on its version: the folder's version counts the records
    /// ever created in it, and its child version counts creations and
    /// deletions, so the two differ once any record was deleted. A record
    /// is only created when they agree (read after the record was seen
    /// missing): a key whose record was deleted while its epoch's marker
    /// stayed (a deletion of the store under way, or an operator's) is
    /// never granted its first token again.
    async fn create_record(&self, req: &AcquireRequest, epoch: u64) -> Result<Created> {
        let folder = self.paths.records(epoch);
        let f = folder.clone();
        let stat = match self
            .conn
            .run("acquire", |c| async move { c.check_stat(&f).await })
            .await?
        {
            Ok(Some(stat)) => stat,
            Ok(None) => return Ok(Created::Gone),
            Err(e) => return Err(zk_error("acquire", e)),
        };
        if stat.cversion != stat.version {
            return Err(Error::backend(
                NAME,
                "acquire",
                true,
                format!(
                    "a record under {folder} was deleted while the store's epoch marker stayed: \
                     its key's tokens could repeat, so no key new to this epoch is granted \
                     until the whole store ({}) is deleted (a new epoch)",
                    self.paths.root()
                ),
            ));
        }
        let first = next_token(0, epoch);
        let record = with_lease(Record::default(), req, first);
        let bytes = record.encode();
        let path = self.paths.record(epoch, &req.key);
        let record = record.clone();
        let acls = self.conn.acls();
        let version = stat.version;
        let answer = self
            .conn
            .run("acquire", |c| async move {
                let options = zk::CreateMode::Persistent.with_acls(acls);
                let mut w = c.new_multi_writer();
                w.add_set_data(&folder, b"", Some(version))?;
                w.add_create(&path, &bytes, &options)?;
                w.commit().await.map_err(zk::Error::from)
            })
            .await?;
        match answer {
            Ok(_) => {
                // A new node's version is 0.
                self.writes.keep(&granted(req, epoch, first), record, 0);
                Ok(Created::Token(first))
            }
            Err(zk::Error::BadVersion | zk::Error::NodeExists) => Ok(Created::Raced),
            Err(zk::Error::NoNode) => Ok(Created::Gone),
            Err(e) => Err(zk_error("acquire", e)),
        }
    }
}

/// The lease `req` was granted with `fence` in `epoch`.
fn granted(req: &AcquireRequest, epoch: u64, fence: u64) -> Lease {
    Lease {
        key: req.key.clone(),
        lease_id: req.lease_id.clone(),
        ttl: req.ttl,
        fencing_token: fence,
        epoch,
    }
}
