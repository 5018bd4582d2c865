//! etcd backend for [leasehold]: native etcd leases (server-timed TTLs,
//! shared by a process's keys), transactions that compare values, and fencing tokens
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
//! let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
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
//! the watches off (waiters poll only, and are not handed keys: see
//! [Handoff](#protocol)). The password is never printed: not by
//! `Debug`, not in errors (`builder::tests`).
//!
//! # Keys
//! Under the prefix `P`:
//!
//! | etcd key | value (JSON) | attached to |
//! |---|---|---|
//! | `P epoch` | the store's epoch and max TTL, its [protocol version](leasehold::backend::protocol) (`"protocol"`; missing: 1) | nothing |
//! | `P epoch-fresh` | empty: the epoch's age timer | an etcd lease of the longer of the max TTL and the confirmation window (+1 s) |
//! | `P k/KEY` | the key's last fencing token, its epoch, run records | nothing (never deleted by leasehold) |
//! | `P h/KEY` | the holder: lease id, token, epoch, owner, data, TTL | the holder's session (below) |
//! | `P w/LEASE_ID` | a lock's waiter: its key, lease id, epoch, TTL, owner, data | the waiter's session |
//!
//! **Protocol.** Every read of the marker (each snapshot, and the bytes a
//! process remembers to grant without reading first) checks its
//! `"protocol"` before anything else in it, and refuses a newer one with
//! [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol)
//! before writing: a grant compares the marker's bytes it checked. Builds
//! from before versions were recorded ignore the field (serde skips unknown
//! fields) and never rewrite a marker that exists.
//!
//! # Protocol
//! Every read is one transaction of `Range` requests (one round trip, one
//! revision: a consistent snapshot of marker, record and holder).
//!
//! * **Sessions.** A backend hangs the holder keys it writes on
//!   *sessions*: etcd leases of a TTL in whole seconds (rounded *up*, at
//!   least 2 s), shared by every key the backend puts on one while it is
//!   current, as etcd's own concurrency sessions are. A session is **never
//!   kept alive**: it lives exactly its seconds from its `LeaseGrant`, and
//!   a key stays only by being moved onto a newer one (a renewal, below).
//!   So a key whose holder stops renewing it is freed within its TTL of its
//!   last renewal, whatever the same process does with its other keys (a
//!   session kept alive by one key's renewals would keep every key on it).
//!   A grant uses the current session while a key put on it lives at least
//!   95 % of its TTL, and tells the core how much of the TTL had already
//!   run out ([`Grant::ran`](leasehold::backend::Grant::ran), at most 5 %), so the
//!   holder's safety deadline counts from then and never outlasts the key;
//!   an older session is replaced by a new `LeaseGrant` (one more request,
//!   once every 5 % of a TTL at most: every 1.5 s for 30 s leases). A
//!   session whose etcd lease is gone (revoked, or the cluster is another)
//!   is replaced at once. A session's age is timed from the send of its
//!   `LeaseGrant` on the backend's clock, which counts a suspend of the
//!   machine (`CLOCK_BOOTTIME`, as the guards' deadlines): its etcd lease
//!   ages on the server while this machine sleeps, and tokio's clock,
//!   which stands still then, would take a session granted before the
//!   suspend as new (tested by `tests/sessions.rs`,
//!   `a_session_ages_while_the_machine_sleeps`).
//! * **Acquire** (one `Txn`): it compares the marker's and the key record's
//!   *values* with the bytes this backend last read or wrote (or that the
//!   key has no record), and the holder key's `create_revision = 0`
//!   (nobody holds it); then puts the holder key on the session and the
//!   record with the new token `next_token(last, epoch)`. Its failure branch
//!   reads marker, timer, record and holder at the same revision, which is
//!   what a read would have told: the backend answers `Held` or
//!   `OtherEpoch` from it, or tries once more with what it now knows. So a
//!   free key this process saw last (the common cycle: the same job taking
//!   the same lock) costs one round trip, a key granted elsewhere since two,
//!   a held key one. Values, not revisions, are compared: equal bytes mean
//!   the token is computed from the record as it is stored, whatever
//!   happened in between (a re-created cluster numbers its revisions from 1
//!   again, so a remembered revision can name another record). A request
//!   whose lease id is already the holder's (a retry after an ambiguous
//!   answer) moves the holder key onto the current session, as a renewal
//!   does, and answers the same token.
//! * **Acquire several keys, all or none** (a multi-key lock's first
//!   attempt, [`Backend::try_acquire_all`](leasehold::backend::Backend::try_acquire_all)):
//!   one `Txn` that compares the marker once and each key's record and
//!   holder as above, and puts every key's holder (on one session) and
//!   record with its own next token; its failure branch reads each key as
//!   above, and the answer names the first held key (nothing written). The
//!   keys this process has not seen are read first, in one more round
//!   trip. A `Txn` is atomic, so all keys are granted or none; each grant's
//!   `ran` is the session's, as for one key. Up to 30 keys with the same
//!   TTL (etcd refuses a `Txn` of more than 128 operations); more, or
//!   mixed TTLs, are taken one by one. Tests: the conformance suite's
//!   `batch_*`.
//! * **Renew** (one `Txn`): puts the holder key again, with the value our
//!   grant wrote (our lease id is in it), on the current session, if the
//!   key still has that value; otherwise the lease is lost (released,
//!   expired, broken, another holder's, or the store's data lost). The
//!   engine renews through `Backend::renew_ran`, which takes the current
//!   session as a grant does and reports the part of the TTL that had run
//!   out (at most 5 %), so that the renewals of many keys share a session
//!   instead of granting one each; plain `Backend::renew` (a wrapper that
//!   forwards only it) asks for a session granted no earlier than its send.
//! * **Release** (one `Txn`): deletes the holder key if its value is still
//!   the one our grant wrote (our lease id is in it), and nothing else; the
//!   session lives on for the process's other keys. **Break**: a `Txn`
//!   deleting the holder key as read (never its etcd lease, which may be
//!   another process's session).
//! * **Record run**: a `Txn` writing the record, comparing the holder key's
//!   `mod_revision` as read (still our grant: not released, broken,
//!   expired or re-granted) and the record's `mod_revision`.
//! * **Expiry** is etcd's: the server deletes the holder key when its
//!   session's lease runs out (checked by the leader every 500 ms), so no
//!   client clock is involved in freeing a key.
//!
//! * **Handoff** (lock waiters only, with wake-ups on): once a waiter has
//!   found the key held, each of its attempts asks to be queued (the core's
//!   `AcquireRequest::queue`), and one that finds it held again registers,
//!   in the same `Txn`'s failure branch, as `P w/LEASE_ID` on its
//!   session; a poll writes it again when it was last written 0.5 s ago
//!   or more, or on another session (each write is a revision etcd keeps
//!   until it compacts). A backend that has granted a key watches `P w/`
//!   and keeps a view of the registrations. Its release then hands the key to the
//!   oldest registration for the key, in the lease's epoch, written within
//!   the last 1.5 s (a waiter whose process is gone stops writing it):
//!   one `Txn` that, while the holder key still has our grant's value, and
//!   (a nested `Txn`) while the registration (its value and its etcd
//!   lease, never 0), the marker and the record are the bytes seen, puts
//!   the holder key as the waiter's grant (the next token, on the waiter's
//!   session), the record with that token, and, over the registration (on
//!   the same etcd lease), both values as written; otherwise it deletes
//!   the holder key, as a plain release does. The waiter's watch on
//!   `P w/` shows it that write: it takes the key from it without a
//!   request (where taking a free key would have been a second write after
//!   the release's), or, when it cannot (below), reads the key first. The
//!   value written over a registration is never one to hand anything to;
//!   it ends with the waiter's session. A waiter's own grant ends its
//!   registration; a wait that ends without the key (timed out, dropped)
//!   ends it with one `Txn` that deletes it and reads the holder key,
//!   releasing the key if it was handed over meanwhile. Semaphores,
//!   reader-writer locks (so `leasehold run`, a writer), elections and
//!   single attempts are never queued.
//!
//! Round trips: acquire of a free key 1 (2 when it was granted elsewhere
//! since this process last saw it), of a held key 1, renew 1, release 1,
//! inspect 2 when held, plus a `LeaseGrant` per new session: an
//! uncontended acquire and release is **2 requests**, as etcd's own lock
//! on a session is. A handoff to a queued waiter is the release's one
//! `Txn`, and the watch event that tells the waiter.
//!
//! # Why a stale holder can never touch a newer holder's key
//! Every grant writes a holder value with its own lease id (random, never
//! reused); a release deletes the holder key, and a renewal puts it again,
//! only while it has exactly that value, so neither can act on a newer
//! holder's grant: a late, retried release of ours finds another value and changes
//! nothing. This is the failure of `etcdctl lock` (etcd issue 22082), whose
//! unlock deletes the lock key by name: a retry that lands after the lock
//! passed to someone else deletes their key. The test
//! `stale_release_cannot_delete_a_newer_holders_key` replays it.
//!
//! **Upgrading from per-grant etcd leases** (leasehold before sessions):
//! an older process's break revokes the holder key's etcd lease, which for
//! a newer holder is a session: every key hung on it is freed at once, and each holder learns it at its next renewal, as
//! after any break. Upgrade every process that shares a prefix.
//!
//! # Why a handoff keeps the promise
//! * **One holder.** The handoff's outer comparison is the plain release's:
//!   the holder key still has our grant's value, so only the holder's own
//!   release can hand it on, and it replaces our value with the waiter's
//!   in the same revision (nobody can take the key in between: it is
//!   never absent).
//! * **Tokens only grow.** The next token is computed from the record as
//!   our grant wrote it, and the nested comparison of the record's and the
//!   marker's bytes makes that read-increment-write atomic, as a grant's
//!   is; a changed record or another store hands nothing over.
//! * **The waiter's deadline.** The key hangs on the waiter's own session,
//!   which lives exactly its whole seconds from its `LeaseGrant`, whose
//!   send time the waiter's backend keeps: the waiter takes the key as its
//!   own only on a session it knows, and reports the part of the TTL that
//!   had already run out ([`Grant::ran`](leasehold::backend::Grant::ran)),
//!   so its safety deadline never outlasts the key. On a session it does
//!   not know (or with more than a quarter of the TTL run out) it reads the
//!   key and moves it onto a fresh session first, as a renewal does. A
//!   session gone before the release fails the whole `Txn` (etcd checks
//!   every lease a `Txn` names), which then releases plainly.
//! * **Taking it from the watch.** The event is a committed write: at its
//!   revision the holder key had exactly the value shown (written in the
//!   same `Txn`), our lease id in it. What may happen after it (a break,
//!   the store's loss) may as well happen after a read, and is found at
//!   the next renewal as for any grant.
//! * **Epochs.** A registration carries the epoch its waiter cleared (out
//!   of quarantine), and is handed the key only by a holder of that epoch,
//!   with the marker compared; the waiter answers `Acquired` only in the
//!   epoch it asked for.
//! * **Only that waiter.** A registration is named by its waiter's lease
//!   id (random, never reused), the holder value written carries that id,
//!   and the registration's exact bytes and etcd lease are compared: a
//!   cancelled registration, or one written again on another session, is
//!   not handed anything.
//!
//! What it costs in liveness: a waiter whose process dies within 1.5 s
//! of a release (its registration still fresh) may be handed the key, and
//! holds it, for nobody, until its session ends: at most its TTL, as a
//! holder that dies does. A waiter whose poll interval is longer than
//! 1.5 s is not handed keys (it takes them itself, as before).
//!
//! # Fencing tokens
//! The etcd revision is global to the cluster and 64 bits wide: it does not
//! fit the 22 counter bits of leasehold's token layout (`epoch << 22 +
//! counter`), and it restarts at 1 in a re-created cluster. So each key has
//! its own counter in `P k/KEY`, written in the grant's `Txn`, whose
//! comparison of the record's value with the one the token was computed
//! from makes the read-increment-write atomic: two grants cannot both
//! succeed from the same record. The record is never
//! attached to a lease and leasehold never deletes it, so the counter only
//! grows (release, expiry and break leave it). When it does vanish (the
//! prefix deleted, the cluster re-created or restored from an older
//! snapshot without the marker) the store has a new epoch, whose tokens
//! start above every earlier one.
//!
//! # Store epoch and quarantine
//! The first acquire on a prefix without `P epoch` writes it (a `Txn` on
//! `create_revision = 0`, so one writer wins) with the epoch of the second
//! after the one it found no marker in (`epoch_after`), by the **writer's
//! wall clock** (etcd exposes no clock), waiting for that second to begin,
//! and the max TTL: a prefix wiped and written again within one second
//! still gets a later epoch than the store it replaced. A wiped prefix, a cluster re-created empty, or a data
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
//! [`StoreEpoch::proven`](leasehold::backend::StoreEpoch::proven). A backend built
//! with `Creation::Never` (`leasehold list`, `status`, `leader`) writes
//! nothing: a prefix without a marker is `Error::NoStore` (keys under it
//! may be another store's whose prefix begins the same way, `jobs` beside
//! `jobs/`), and no marker is written. Test: leasehold-cli's
//! `tests/init_and_look.rs`.
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
//! One watch stream per backend on `P h/` for deletions (every release,
//! break and expiry deletes the holder key) and on `P w/` (a handoff writes
//! over its waiter's registration); it resumes from the last seen revision
//! after a reconnect, so events while it was down are replayed. A hint
//! only: waiters keep polling.
//!
//! # Build
//! Building this crate needs a Rust toolchain and nothing else: no
//! `protoc`, no system library. etcd speaks gRPC, and a gRPC client needs
//! code generated from etcd's `.proto` files; here that code is generated
//! **once and committed** ([`grpc`], from the files in `vendor/etcd/proto/`), instead of
//! at every build. `tests/generated_code.rs` generates it again with
//! [protox](https://docs.rs/protox) (a protobuf compiler written in Rust)
//! and tonic's generator, and fails when the committed code differs, so it
//! cannot drift from `vendor/etcd/proto/`; `LEASEHOLD_REGENERATE=1` makes that test
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

mod acquire;
mod backend;
mod builder;
mod epoch;
mod error;
pub mod grpc;
mod listen;
mod queue;
mod record;
mod runs;
mod session;
mod snapshot;

use std::time::Duration;

pub use backend::EtcdBackend;
pub use builder::{EtcdBackendBuilder, DEFAULT_PREFIX};

/// Shortest TTL: etcd's minimum lease TTL with its default election timeout
/// (1.5 × 1 s election timeout, rounded up to whole seconds).
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// Longest max TTL a store may be created with.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
