//! etcd backend for [leasehold]: native etcd leases (server-timed TTLs,
//! keep-alive), transactions that compare revisions, and fencing tokens
//! that only grow, even across a wiped or re-created cluster.
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{LockOptions, Store};
//! use leasehold_etcd::EtcdBackend;
//!
//! # async fn f() -> leasehold::Result<()> {
//! let backend = EtcdBackend::from_url("etcd://10.0.0.1:2379,10.0.0.2:2379?prefix=jobs/").await?;
//! let store = Store::new(backend);
//! let lock = store.lock_with("import-A", LockOptions::new().ttl(Duration::from_secs(30)))?;
//! let guard = lock.acquire(Duration::from_secs(60)).await?;
//! // … work, handing guard.fencing_token() to the protected resource …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Store URL
//! `etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][?prefix=P&max_ttl=DURATION&wake_ups=on|off]`,
//! or `etcds://` for TLS to every endpoint (certificates verified against
//! the system's roots; needs this crate's feature `tls`, on in the
//! `leasehold` command). Several endpoints are one cluster: requests go to
//! one of them and move on to the next when it cannot be reached or does
//! not answer (test `tests/failover.rs`). `USER:PASSWORD`
//! (percent-encoded where it holds `@`, `:`, `,` or `%`) authenticates with
//! etcd's own auth. `prefix` (default [`DEFAULT_PREFIX`]) is where this
//! store's keys live: two prefixes are two independent stores. `max_ttl`
//! (such as `5m`; 2 s to 24 h) is the max TTL a store created now records
//! (see [store epoch](#store-epoch-and-quarantine)). `wake_ups=off` turns
//! the watch off (waiters poll only). The password is never printed: not by
//! `Debug`, not in errors (`builder::tests`).
//!
//! # Keys
//! Under the prefix `P`:
//!
//! | etcd key | value (JSON) | attached to |
//! |---|---|---|
//! | `P epoch` | the store's epoch and max TTL | nothing |
//! | `P epoch-fresh` | empty: the epoch's age timer | an etcd lease of the longer of the max TTL and the confirmation window (+1 s) |
//! | `P k/KEY` | the key's last fencing token, its epoch, run records | nothing (never deleted by leasehold) |
//! | `P h/KEY` | the holder: lease id, token, epoch, owner, data, TTL | the holder's own etcd lease |
//!
//! # Protocol
//! Every read is one transaction of `Range` requests (one round trip, one
//! revision: a consistent snapshot of marker, record and holder).
//!
//! * **Acquire** (3 round trips when free: read, `LeaseGrant` with the TTL
//!   rounded *up* to whole seconds, at least 2 s, then a `Txn`):
//!   the `Txn` compares the marker's `create_revision` (same store), the
//!   record's `mod_revision` (nobody issued a token since the read) and the
//!   holder key's `create_revision = 0` (nobody holds it), and then puts the
//!   holder key *with the new etcd lease* and the record with the new token
//!   `next_token(last, epoch)`. A lost race revokes the new etcd lease and
//!   reads again. A held key answers `Held` after the read alone (one
//!   round trip: the holder as stored, without its remaining TTL, which
//!   takes a `LeaseTimeToLive` and is left to `inspect`; a waiting process
//!   polls with one request, not two). A request whose lease id is already the
//!   holder's (a retry after an ambiguous answer) keeps that etcd lease
//!   alive and answers the same token.
//! * **Renew**: read; the holder key must carry our lease id and epoch; then
//!   one `LeaseKeepAlive` of the etcd lease the holder key is attached to.
//!   "Not found" (the etcd lease expired or was revoked) or a missing or
//!   foreign holder key is a definitive loss.
//! * **Release**: read; the same check; then `LeaseRevoke` of that etcd
//!   lease, which deletes the holder key with it. **Break**: `LeaseRevoke`
//!   of whatever etcd lease the holder key has.
//! * **Record run**: a `Txn` writing the record, comparing the holder key's
//!   `mod_revision` as read (still our grant: not released, broken,
//!   expired or re-granted) and the record's `mod_revision`.
//! * **Expiry** is etcd's: the server deletes the holder key when its lease
//!   runs out (checked by the leader every 500 ms), so no client clock is
//!   involved.
//!
//! Round trips: acquire of a free key 3, of a held key 1, renew 2 (read, keep-alive), release
//! 2 (read, revoke), inspect 2 when held. The read before a renewal or
//! release is what lets them act on the etcd lease of *our* grant only.
//!
//! # Why a stale holder can never touch a newer holder's key
//! Each grant has its own etcd lease id (allocated by the server, never
//! reused), and a renewal or release acts on that id only: a keep-alive or
//! revoke of an expired lease answers "not found" and changes nothing. A
//! newer holder's key is attached to *its* etcd lease, so a late, retried
//! release of ours cannot delete it. This is the failure of `etcdctl lock`
//! (etcd issue 22082), whose unlock deletes the lock key by name: a retry
//! that lands after the lock passed to someone else deletes their key. The
//! test `stale_release_cannot_delete_a_newer_holders_key` replays it.
//!
//! # Fencing tokens
//! The etcd revision is global to the cluster and 64 bits wide: it does not
//! fit the 22 counter bits of leasehold's token layout (`epoch << 22 +
//! counter`), and it restarts at 1 in a re-created cluster. So each key has
//! its own counter in `P k/KEY`, read and written in the grant's `Txn`,
//! whose `mod_revision` comparison makes the read-increment-write atomic:
//! two grants cannot both succeed from the same record. The record is never
//! attached to a lease and leasehold never deletes it, so the counter only
//! grows (release, expiry and break leave it). When it does vanish (the
//! prefix deleted, the cluster re-created or restored from an older
//! snapshot without the marker) the store has a new epoch, whose tokens
//! start above every earlier one.
//!
//! # Store epoch and quarantine
//! The first acquire on a prefix without `P epoch` writes it (a `Txn` on
//! `create_revision = 0`, so one writer wins) with the epoch
//! `epoch_at(now)`, by the **writer's wall clock** (etcd exposes no clock),
//! and the max TTL. A wiped prefix, a cluster re-created empty, or a data
//! directory lost means no marker, hence a new epoch, and the core's
//! quarantine: no grant in it before one
//! [confirmation window](leasehold::CONFIRMATION_WINDOW) (60 s) has passed,
//! whatever max TTL the lost store or the new one records, so a holder
//! still running on the lost data has been told it lost its lease (at its
//! next renewal, its holder key being gone, or at the latest one window
//! after its last confirmed renewal) and stopped. The epoch's
//! age is measured by the server: `P epoch-fresh` hangs on an etcd lease
//! of the longer of the max TTL and the window, granted with the marker;
//! while it lives the age is its elapsed TTL (whole seconds, rounded down),
//! once it is gone the age is at least that span and the timer's extra
//! second, and is reported as such (reported as the bare span, a window of
//! 60 s, less the 0.1 % the core takes off for a fast server clock, left
//! every new process 0.12 s of quarantine on an old store).
//! So a process meeting an old store grants at once (after 0.12 s with the
//! default settings: the core credits a reported age less 0.1 % for a fast
//! server clock), whatever its max TTL, and only a genuinely new store
//! waits. (etcd renews every lease by its full
//! TTL when it restarts or elects a new leader, the timer's too: a store
//! restarted within its first max TTL reports a younger age than it has,
//! which only lengthens a quarantine.) A clock that is wrong by `d` when a
//! store is re-created only matters if it is behind the previous store's
//! creation (tokens could then repeat); the core also refuses an epoch
//! older than one it has seen.
//!
//! etcd itself extends every lease by its full TTL when a new leader takes
//! over or the cluster restarts: leases only last longer than the holder
//! assumes, never shorter, which is the safe direction (the holder's
//! deadline, from its own send time, comes first).
//!
//! **Proven epochs, and looking without writing.** An epoch is settled at
//! once, in every process, when its creator states that no store existed
//! there before (`leasehold init --new`): the marker written by a backend
//! built with `Creation::NewProven` on a prefix without any key carries
//! `"proven": true`; it is reported as
//! [`StoreEpoch::proven`](leasehold::StoreEpoch::proven). A backend built
//! with `Creation::Never` (`leasehold list`, `status`, `leader`) writes
//! nothing: a prefix without any key is `Error::NoStore`, and no marker is
//! written. Test: leasehold-cli's `tests/init_and_look.rs`.
//!
//! # What etcd guarantees here
//! Every request is linearizable (etcd's default reads, Raft-committed
//! writes). A single-member cluster that loses its data directory is a new,
//! empty cluster: handled as a new epoch above. A cluster restored from a
//! snapshot may carry an older marker: the core refuses an epoch older than
//! one it has seen, and a process that never saw the newer one sees the
//! restored tokens only where the snapshot has them, which may repeat
//! tokens issued after the snapshot. Restore to a new prefix, or delete
//! `P epoch` after a restore, to start a new epoch.
//!
//! # Wake-ups across machines
//! One watch per backend on `P h/` for deletions (every release, break and
//! expiry deletes the holder key); it resumes from the last seen revision
//! after a reconnect, so deletions while it was down are replayed. A hint
//! only: waiters keep polling.
//!
//! # Build
//! Building this crate needs a Rust toolchain and nothing else: no
//! `protoc`, no system library. etcd speaks gRPC, and a gRPC client needs
//! code generated from etcd's `.proto` files; here that code is generated
//! **once and committed** ([`grpc`], from the files in `proto/`), instead of
//! at every build. `tests/generated_code.rs` generates it again with
//! [protox](https://docs.rs/protox) (a protobuf compiler written in Rust)
//! and tonic's generator, and fails when the committed code differs, so it
//! cannot drift from `proto/`; `LEASEHOLD_REGENERATE=1` makes that test
//! write it.
//!
//! The candidates, measured on a 2-core machine from an empty `target/`
//! (release builds; the machine was shared with other builds, so CPU time
//! is the steadier figure):
//!
//! | way | needs | this crate: wall / CPU | the `leasehold` binary: wall / CPU, size |
//! |---|---|---|---|
//! | `etcd-client` 0.17 (generates at build time) | `protoc` and `libprotobuf-dev` | 206 s / 192 s | 613 s / 747 s, 19.7 MB |
//! | generated once, committed (chosen) | nothing | 209 s / 173 s | 410 s / 653 s, 17.0 MB |
//!
//! (The binary's figures also include the DynamoDB store's switch from
//! aws-lc to ring, made at the same time; `docs/benchmarks.md`, section 7,
//! has README command 1 from a clean clone.)
//!
//! Generating at build time with protox instead of protoc (a build script
//! of our own) also needs nothing installed, but compiles the generator
//! (protox, prost-build, tonic-build and their parsers) in every build;
//! etcd's HTTP/JSON gateway needs no generated code at all, but its watch
//! and keep-alive are long-polling HTTP streams, not one multiplexed
//! connection. The client code itself ([`grpc::Connection`]: one channel
//! balanced over the endpoints, etcd's auth token on every request) is
//! about a hundred lines of this crate.

mod backend;
mod builder;
mod error;
pub mod grpc;
mod listen;
mod record;

use std::time::Duration;

pub use backend::EtcdBackend;
pub use builder::{EtcdBackendBuilder, DEFAULT_PREFIX};

/// Shortest TTL: etcd's minimum lease TTL with its default election timeout
/// (1.5 × 1 s election timeout, rounded up to whole seconds).
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// Longest max TTL a store may be created with.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
