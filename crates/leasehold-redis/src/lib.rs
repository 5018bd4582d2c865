//! Redis backend for [leasehold]: leases with fencing tokens on the Redis
//! teams already run, each operation **one Lua script** (atomic on the
//! server), expiry by the *server's* clock, and store epochs that survive
//! the ways Redis loses data: `FLUSHALL`, a restart with or without
//! persistence, a failover to a replica that missed the last writes.
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{LockOptions, Store};
//! use leasehold_redis::RedisBackend;
//!
//! # async fn f() -> leasehold::Result<()> {
//! let backend = RedisBackend::from_url("redis://:secret@cache.internal:6379/0?prefix=jobs:").await?;
//! let store = Store::new(backend);
//! let lock = store.lock_with("import-A", LockOptions::new().ttl(Duration::from_secs(30)))?;
//! let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
//! // … work, handing guard.fencing_token() to the protected resource …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Store URL
//! `redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=P&max_ttl=DURATION&wake_ups=on|off]`,
//! `redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB][?…]`
//! (the sentinels, port 26379 by default; the primary they name is asked
//! for at every reconnection, see [Sentinel](#sentinel-and-cluster)),
//! `redis+cluster://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][?…]` (seed
//! nodes of a Redis Cluster; database 0),
//! or `rediss…://…[&tls_ca=PATH]` for TLS (rustls; the certificate chain and
//! host name are always verified, against the system's roots, or only
//! against the CA certificates in `tls_ca`; redis-rs's `#insecure` is
//! refused; test `tests/tls.rs`: a private CA, with an unknown issuer and a
//! wrong host name refused). `USER` is an ACL user (Redis 6+); `:PASSWORD@` alone is the
//! `requirepass` password. `prefix` (default [`DEFAULT_PREFIX`]) starts
//! every key the store writes, so stores with different prefixes share a
//! server without meeting; `max_ttl` (such as `5m`) is the max TTL a store
//! started now records (see [epochs](#store-epoch-and-quarantine));
//! `wake_ups` (see [wake-ups](#wake-ups-across-machines)). Unknown
//! parameters are refused (a typo never passes silently). The password is
//! never printed: not by `Debug` (of the builder or the backend), not in
//! errors (URL errors name the part that is wrong; a refused login says
//! so, without the password); checked by
//! `builder::tests::bad_urls_are_refused_without_the_password` and the
//! `password_is_never_printed` test.
//!
//! **Server requirements.** Redis 5 or later (scripts are replicated by
//! their effects, so a script may read `TIME`), tested on Redis 7.0; a
//! standalone server, a primary with replicas (under Sentinel or not), or
//! a Redis Cluster (the store in one hash slot, see
//! [Sentinel and Cluster](#sentinel-and-cluster)). The user needs `EVALSHA`,
//! `EVAL`, `SCRIPT LOAD`, `SUBSCRIBE`, and, inside scripts, `TIME`, `INFO`,
//! `HMGET`, `HSET`, `HDEL`, `ZADD`, `ZRANGEBYLEX`, `PUBLISH` on the prefix's
//! keys and channel. The server must not evict the store's keys:
//! `maxmemory-policy` `noeviction` (the default) or a `volatile-*` policy
//! (the store's keys have no TTL, so those never pick them). Opening a
//! store on a server with an `allkeys-*` policy is refused (test
//! `server_that_evicts_any_key_is_refused`); where `CONFIG GET` is not
//! allowed (some managed services) this cannot be checked: check it by
//! hand.
//!
//! # What is stored
//! (In full in `src/record.rs`.) A hash per
//! key (`Pk:KEY`: the last token issued, the lease id, its expiry on the
//! server's clock, the owner, data and run records), the epoch marker
//! (`P#epoch`: epoch, max TTL, start, the `run_id` of the server process
//! that wrote it and its `master_replid`, the highest token issued), a sorted set of key names
//! (`P#keys`, for `list`) and a pub/sub channel (`P#released`). No key has
//! a TTL; leasehold never deletes a record, so a key's counter never goes
//! back.
//!
//! # Protocol
//! Every operation is **one script** (`EVALSHA`: one round trip; the first
//! use of a script on a server process adds `SCRIPT LOAD`). Redis runs a
//! script alone, start to end, so each one is atomic: no locks, no
//! `WATCH`/`MULTI`, no session state. Every script reads the time with
//! `TIME`, the server's clock; no client clock is ever compared with
//! another.
//!
//! * **Acquire** (1 round trip): check the epoch marker (starting a new
//!   epoch if needed, see below); if the request names another epoch,
//!   answer it and grant nothing; if the TTL is above the store's max TTL,
//!   refuse. Then, on the key's record: held by our lease id in this epoch
//!   (a retry after an ambiguous failure): extend it, same token; held by
//!   another lease of this epoch that has not expired by `TIME`: answer
//!   the holder; otherwise grant: `fence := max(fence, epoch << 22) + 1`
//!   (for a key the index knows whose record is gone, also above the
//!   store's highest token), lease id, `expires_ms := TIME + ttl`.
//! * **Acquire several keys, all or none** (a multi-key lock's first
//!   attempt, [`Backend::try_acquire_all`](leasehold::backend::Backend::try_acquire_all);
//!   1 round trip, `acquire_all.lua`): the same checks of the marker and of
//!   every TTL, then every key's record judged by the rule above before any
//!   is written; the first held key is answered (nothing written), else
//!   each key is granted by that rule, one token each (the store's highest
//!   token kept as the greatest of them). A script runs alone on the
//!   server, so the keys are taken together or not at all; every key of a
//!   store shares one hash slot, so it runs on a cluster too. Tests: the
//!   conformance suite's `batch_*`.
//! * **Renew**: only if the marker names the lease's epoch and was written
//!   by this server process, the record carries our lease id in that epoch,
//!   and it has not expired by `TIME`: `expires_ms := TIME + ttl`.
//!   Otherwise a definitive loss, saying why (epoch changed, released or
//!   broken, another holder, expired).
//! * **Release**: clear the lease id if it is ours (and publish the key);
//!   a lease of an epoch that has ended is cleared too, but reported lost.
//!   **Break**: clear whatever lease is there, answering its holder if it
//!   was live (and publish the key).
//! * **Record a run** (`--once-per`): under our lease (its id, in the
//!   current epoch) set the last run, and the last success if it
//!   succeeded, each with the server's `TIME` as its end
//!   (`*_end_ms`, which is what `ended_at` reads back); otherwise never
//!   the success, and a failure only over an earlier run's record.
//! * Every script reads the server's `run_id` and `master_replid` once
//!   (`INFO server` and `INFO replication`, a few µs of server time each)
//!   to check the epoch marker, see below.
//! * **Inspect**/**list**: one script each; a holder is shown only if its
//!   lease is live (this epoch, not expired by `TIME`). `list` walks the
//!   key index in byte order.
//! * A request that does not answer within the request timeout (5 s) is a
//!   retryable failure, and the connection is replaced (it may sit behind
//!   a partition; redis-rs's connection manager reconnects by itself only
//!   on errors). A request that fails because the connection turned out to
//!   be dead is sent once more on a new connection when sending it twice
//!   changes nothing (acquire with the same lease id, renew, record a run,
//!   reads); release and break are not repeated.
//!
//! # Protocol
//! The marker's `protocol` field is the store's
//! [protocol version](leasehold::backend::protocol), written with every new
//! epoch (a marker without it, written by a build from before versions were
//! recorded, is protocol 1; those builds read the fields they know and
//! keep this one when they rewrite the marker). Every script reads the
//! marker first (`current_epoch` in the prelude, before any write but
//! release's end of its own lease) and ends with the error
//! `LEASEHOLD_PROTOCOL <found>` on a protocol above the highest the backend
//! puts in front of the prelude (`CARRYING_PROTOCOL`, 2), which the backend
//! reports as
//! [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol):
//! nothing granted, started, voided or broken. A new epoch is protocol 1
//! (`PROTOCOL`), except one that carries leases through a promotion (see
//! below): **protocol 2**, because it changes how records are read (a
//! record of an earlier epoch may be live), which builds before the carry
//! would get wrong (granting a carried lease's key as free): they refuse
//! such a store instead (test
//! `backend::failover_to_a_replica_that_has_the_grant_keeps_its_holder`
//! reads the marker's protocol).
//!
//! # Store epoch and quarantine
//! The marker holds the store's epoch, the `run_id` of the **server
//! process** that wrote it (Redis makes a new random `run_id` at every
//! start; a promoted replica has its own) and that server's
//! `master_replid`, its **replication history** (a new id whenever a
//! server becomes a primary, and whenever it loads a primary's data as a
//! replica). Every script checks all three. A new epoch begins when the
//! marker is missing (a new store, `FLUSHALL`, `FLUSHDB`, the marker
//! deleted) **or was written by another server process or in another
//! history** (a restart, with or without its data; a failover to a
//! replica; a backup loaded into a new server; a **failback**: a demoted
//! primary that resynchronised from its replica, losing the grants the
//! replica never had, and was promoted again keeps its `run_id`, but not
//! its `master_replid`; test `tests/failback.rs`, two servers switched
//! with `REPLICAOF`, which repeated a token before the history was
//! checked). A store written before the history was recorded starts one
//! new epoch (and its quarantine) on its first use by this version. The epoch is started
//! inside a script, like every other write, so processes that open a new
//! store at once cannot both start one: the first script writes the
//! marker, the others read it (test: leasehold-cli's
//! `tests/concurrent_open.rs`). The new epoch is the
//! server clock's next whole second since 2024-01-01, and above the old
//! marker's epoch if that survived; it starts at that second. A lease of
//! an earlier epoch is void: its renewal is refused (the holder is told
//! lost), and its key is free for the new epoch, at a token above the new
//! epoch's base, so above every earlier token. The epoch's age (server
//! clock, from its start) is reported, so a process opening an
//! established store grants at once, while after a new epoch every
//! process waits out the quarantine of one [confirmation
//! window](leasehold::CONFIRMATION_WINDOW) (60 s; see
//! [store epochs](leasehold::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)):
//! by then every holder of the old epoch has passed its own deadline and
//! stopped, whatever max TTL it or the new epoch's creator opened the store
//! with (the max TTL recorded in the marker is the new store's and bounds
//! its leases only; test `store_loss_quarantine_outlasts_a_longer_holder`,
//! `tests/store_loss.rs`). The acquire script grants nothing before the
//! epoch's second begins on the server's clock (the backend asks again
//! then: up to a second, only ever for a proven epoch, as any other is
//! quarantined far longer), so a store lost and started again after a
//! grant gets a later epoch, and greater tokens (test
//! `store_recreated_at_once_issues_greater_tokens`).
//!
//! Why a restart that kept its data starts a new epoch too: the server
//! cannot vouch that it kept its *last* writes. With `appendfsync
//! everysec` (the default) a crash loses up to a second of writes; an RDB
//! snapshot loses everything since it was taken; a replica may not have
//! received the last writes of its primary. A lost grant would let the
//! same token be issued twice, and a lost renewal would let a key expire
//! earlier than its holder was promised, with the holder still running.
//! Telling the restarted server's data apart from lost data would take
//! something Redis does not record, so any new server process counts as
//! data loss. The cost: every restart or failover ends every lease (the
//! holders are told lost at their next renewal) and grants wait one
//! confirmation window.
//!
//! **A promotion carries the leases the replica has.** A new epoch started
//! by a promoted replica whose previous replication history
//! (`master_replid2`) is the one the marker was written in records
//! `carry_from` (so does, by the same test, a primary of Redis 7 restarted
//! from an RDB file with replication information, which it loads as its
//! `master_replid2`; an append-only file or no persistence carries
//! nothing): the leases of that epoch (and of those it carried) stay
//! honoured if the replica has their records, live by its clock. Why that
//! is safe: the replica's data is a prefix of the old primary's history
//! (replication applies each script's effects in order, atomically), so
//! what it lacks is a suffix of the old primary's writes. (1) A lost grant:
//! its holder's record is missing or names another lease, so its renewal is
//! refused ('other'/'free') and it stops by its own deadline, which the new
//! epoch's quarantine outlasts, as before. (2) A lost renewal: the record's
//! expiry is earlier than its holder believes; nothing is granted during
//! the quarantine, and after it the holder has either renewed here
//! (an expiry by this server's clock) or passed its deadline. (3) A lost
//! release or a lost later grant of the same key: a later grant needed the
//! carried lease expired or released first, so its holder's deadline had
//! passed (a lost lease stays lost in the core, whatever a late renewal
//! says) or it released; its record here only keeps the key held until it
//! expires. A carried record's expiry was set by the old primary's clock;
//! a renewal here checks it against this server's clock, and a carried
//! holder's renewal refused for that reason is told lost (safe). A lost
//! **break** is undone the same way: a lease broken on the old primary,
//! whose break the replica never got, is renewed there again, beside any
//! holder the old primary granted after the break (whose own grant was
//! lost too, so it is told lost at its next renewal; fencing tokens order
//! the two, and `break` is a forced takeover that already relies on them).
//! Tokens:
//! new grants are above the new epoch's base, so above every carried token.
//! Renew, release and record-run start the carrying epoch themselves (a
//! holder's first renewal after a failover comes before any acquire);
//! break and inspect only compute it. Tests:
//! `backend::failover_to_a_replica_that_has_the_grant_keeps_its_holder`
//! (carried through a failover and a failback; without the carry the
//! renewal is refused) and `tests/failover.rs` (real Sentinel and Cluster
//! failovers that kept the grant, and, with replication cut by hand before
//! it, that lost it: the holder is told lost before another process gets
//! the key, whose token is above the holder's).
//!
//! Tests: `tests/store_loss.rs` (the conformance suite's store-loss tests
//! with `FLUSHALL` under a live holder and a waiter), `tests/restart.rs`
//! (restarts without data, with an append-only file, and an outage longer
//! than the TTL), `tests/failback.rs` (failover, a grant on the old
//! primary that the new one never gets, failback: the next token is above
//! it), `backend::failover_to_a_lagging_replica_starts_a_new_epoch`
//! (a replica that has the marker but missed the last grant is promoted:
//! the holder of that grant is refused there, and the next token is above
//! it), `backend::deleted_record_never_repeats_a_token`.
//!
//! **Proven epochs, and looking without writing.** An epoch is settled at
//! once, in every process, when its creator states that no store existed
//! there before (`leasehold init --new`): the marker written by a backend
//! built with `Creation::NewProven` on a prefix with neither marker nor key
//! index carries `proven 1`; a new epoch started over an old marker (a
//! restart, a failover) clears it; it is reported as
//! [`StoreEpoch::proven`](leasehold::backend::StoreEpoch::proven). A backend built
//! with `Creation::Never` (`leasehold list`, `status`, `leader`) writes
//! nothing: a prefix with neither marker nor key index is `Error::NoStore`,
//! and a marker of another server process is reported as it is, not
//! renewed. Test: leasehold-cli's `tests/init_and_look.rs`.
//!
//! # Why it is safe, and where it is not
//! **One primary.** Exclusion: a grant happens only inside the acquire
//! script, which Redis runs alone, with the holder's expiry compared on
//! the server's clock. The old holder stops in time because its guard's
//! safety deadline runs from the *send* time of its last successful
//! renewal on its own monotonic clock, while the server set `expires_ms`
//! from its own clock *after* receiving it: the server's expiry is never
//! earlier in real time than the holder's deadline, as long as the
//! server's clock does not jump forward (the one clock trusted; Redis's
//! `TIME` is the wall clock, so run NTP slewing, not stepping). Fencing:
//! `fence` only grows; a new epoch lies above every earlier token.
//!
//! **Replication and failover.** Replication is asynchronous: a grant or
//! renewal acknowledged by the primary may be missing on a replica that is
//! then promoted. That promoted replica is another server process, so the
//! first script it runs starts a new epoch: the grant it missed cannot be
//! repeated (new tokens are above the new epoch's base, above every token
//! of the old epoch), and the holder of the missed grant is told lost at
//! its next renewal there and has stopped before the quarantine lets
//! anyone else in. leasehold therefore needs no `WAIT`: it never relies on
//! a replica having a write (and `WAIT` would not make replication
//! strongly consistent anyway). What this does **not** cover:
//!
//! * **Which deployments keep the promise.** A single server, whatever
//!   its persistence settings: every restart is a new epoch (persistence
//!   keeps the run records of `--once-per`, not the leases). A primary with replicas under
//!   Sentinel: failover and failback are new epochs (tokens never repeat,
//!   holders of lost grants are told lost), and exclusion holds if the old
//!   primary stops taking writes first (the split-brain item below).
//!   Redis Cluster: the same, per shard (a store lives on one). Proxies
//!   that spread a client over several servers: not supported (see the
//!   proxy item below).
//! * **Finding the primary.** With `redis+sentinel://`, the sentinels are
//!   asked at every reconnection, and a `READONLY` or `NOREPLICAS` answer,
//!   a dead connection or a timeout makes a new connection to the primary
//!   they name (the subscription follows). With `redis://`, leasehold
//!   connects to the address in the URL: point it at a name or address that
//!   follows the primary; after a failover, requests to a demoted primary
//!   fail (`READONLY`, retryable) until the address moves.
//! * **Split brain.** If the old primary is alive but cut off from the
//!   failover (a partition), clients that still reach it keep renewing and
//!   even being granted there, in the old epoch, while clients of the new
//!   primary are granted after its quarantine: two holders at once. The
//!   new primary's tokens are greater (its epoch is later), so a resource
//!   that checks fencing tokens refuses the old side once it has seen the
//!   new side; but the work itself can overlap. To keep the promise across
//!   a failover, make the old primary stop accepting writes before the
//!   failover completes: `min-replicas-to-write 1` with
//!   `min-replicas-max-lag` below Sentinel's `down-after-milliseconds`
//!   (and every replica that can be promoted counted), so an isolated
//!   primary refuses renewals (`NOREPLICAS`) and its holders are told lost
//!   by their own deadlines; and keep TTLs below the confirmation window
//!   less `min-replicas-max-lag` (a renewal the old primary took in its
//!   last moments must not outlast the new epoch's quarantine). This is a
//!   property of the Redis deployment, not something a client can enforce;
//!   untested here (one machine). `SENTINEL FAILOVER` of a healthy primary
//!   is such a split brain until the sentinels demote it (10–20 s later,
//!   measured): without `min-replicas-to-write`, holders connected to it
//!   keep renewing there.
//! * **Clocks.** A new epoch's number comes from the new server's clock
//!   when the old marker is gone (after `FLUSHALL`, or on a replica that
//!   never had it). If that clock is behind the old server's by more than
//!   the old epoch's lifetime, the new epoch could be lower; every process
//!   that saw the old epoch refuses it ("the store's epoch went back"), but
//!   a process that never did would accept it. Keep the servers' clocks in
//!   sync (NTP) and never set one back.
//! * **Redis-compatible servers and proxies.** The epoch rests on
//!   `INFO server`'s `run_id` naming one server process. A proxy that
//!   spreads one client's requests over several servers (twemproxy,
//!   Envoy's Redis proxy) breaks that; Valkey, KeyDB and others are
//!   untested.
//! * **Keys deleted by hand.** Deleting the marker starts a new epoch (the
//!   way to force one). Deleting a key's record is survived (the next
//!   token is above the store's highest); deleting the key index *and* a
//!   record is not (that key's tokens could repeat). Delete a whole store
//!   by its prefix, marker included, or not at all.
//!
//! # Sentinel and Cluster
//! **Sentinel** (`redis+sentinel://`): redis-rs's `SentinelClient` finds
//! the primary (checked with `ROLE`); see "Finding the primary" above and
//! the carry in the epoch section. **Cluster** (`redis+cluster://`):
//! redis-rs's cluster client routes each script by its first key and
//! follows `MOVED` and failovers. Every script's keys (the marker, the
//! record, the index) must be in one slot, so the prefix is made a hash
//! tag: `leasehold:` becomes `{leasehold:}` (a prefix with a tag, such as
//! `{jobs}:`, is kept), and every key of the store is in that slot, on one
//! shard. A failover of that shard is the store's failover (new epoch,
//! leases the replica has carried, one quarantine for new grants); other
//! shards' failovers do not touch it. Quarantining only some keys of a
//! store would need an epoch per slot, which the core's one store epoch
//! does not have; with the store on one shard, its shard's failover is all
//! there is. A store of a single Redis copied into a cluster is found only
//! if its prefix already had a hash tag (other key names otherwise: a new
//! store). The wake-up channel is ordinary pub/sub, which a cluster
//! delivers on every node; the subscription connects to the seed nodes in
//! turn. Tests: `tests/sentinel.rs` and `tests/cluster.rs` (the
//! conformance suite and the wake-up tests, unchanged), `tests/failover.rs`.
//!
//! # Why not Redlock
//! Redlock takes a lock on a majority of N independent Redis primaries
//! and counts on bounded clock drift, network delay and process pauses for
//! its safety: a holder paused past its TTL (a GC pause, a stopped VM)
//! keeps working while another holds the lock, and nothing tells it. It
//! issues no fencing tokens: the random value it stores is not ordered,
//! and independent primaries cannot agree on an order without consensus.
//! leasehold's promise needs both things Redlock lacks: one place that
//! serialises grants and issues increasing tokens, and holders that stop
//! by their own deadline. So leasehold uses one Redis primary (with
//! replicas for availability, and epochs for what failover loses); for a
//! lock that stays safe through partitions without a deployment rule, use
//! a consensus store (the etcd backend).
//!
//! # Wake-ups across machines
//! Every release and break publishes the key on the store's channel
//! (`P#released`) from inside its script. Each backend that has a waiter
//! keeps one more connection subscribed to it (started on the first wait;
//! reconnected with back-off) and wakes that key's waiters through
//! [`Backend::watch_release`](leasehold::backend::Backend::watch_release), so a
//! waiter elsewhere tries again at once instead of at its next poll.
//! Polling stays the fallback: a message missed while the subscription is
//! down, or an expiry (which nobody announces), is found by the next poll.
//! `wake_ups=off` stops both the subscription and the publishing. Test:
//! `tests/wake_ups.rs` (woken within 2 s, with polls 10 s apart; and the
//! control without wake-ups).
//!
//! # Cost
//! An uncontended acquire + release is two round trips (two scripts), the
//! protocol's minimum; a renewal one. Measured with `scripts/bench.sh`
//! (release build, Redis 7.0 on loopback, a shared 2-core machine):
//! 2,943 acquire + release cycles a second (a raw redis-rs loop sending
//! the same two scripts: 3,643, so 0.80×; the difference is the core's
//! per-call work, not requests: both send 2.00 a cycle); handoff to a
//! waiter in another process p50 0.77 ms (pub/sub wake-up); 10,000 leases
//! held by one process, every renewal on schedule (longest gap 5.01 s for
//! a 5 s renewal interval), 3.7 µs of CPU per lease per second. redis-py's
//! `Lock` on the same server: 3,294 cycles a second (no fencing, no
//! epochs), handoff p50 23.7 ms (its waiter polls every 0.1 s).
//!
//! # Why redis-rs
//! The maintained Rust client: its `ConnectionManager` is one multiplexed
//! connection (requests from every task pipelined on it, so one key's slow
//! answer does not queue another's renewal behind a pool) that reconnects
//! by itself, `Script` sends `EVALSHA` and loads the script when the server
//! lacks it, and it speaks TLS through rustls and pub/sub.
//!
//! # TTL range
//! 1 s to the store's max TTL (at most 24 h).

#![warn(missing_docs)]

mod backend;
mod builder;
mod error;
mod listen;
mod record;
mod scripts;
mod topology;

use std::time::Duration;

pub use backend::RedisBackend;
pub use builder::{RedisBackendBuilder, DEFAULT_PREFIX};
pub use scripts::acquire_and_release_scripts;

/// Re-exported for building connection settings in code.
pub use redis;

/// Shortest TTL (and store max TTL) this backend accepts.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longest store max TTL this backend accepts.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
