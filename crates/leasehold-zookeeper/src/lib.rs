//! ZooKeeper backend for [leasehold]: one record node per key, written
//! only with version-checked `setData`, takeover by observation on the
//! waiter's own clock (no clock is compared across machines), and fencing
//! tokens that only grow, even across a deleted store or a new ensemble.
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{LockOptions, Store};
//! use leasehold_zookeeper::ZkBackend;
//!
//! # async fn f() -> leasehold::Result<()> {
//! let backend = ZkBackend::from_url("zk://10.0.0.1:2181,10.0.0.2:2181/apps/locks").await?;
//! let store = Store::new(backend);
//! let lock = store.lock_with("import-A", LockOptions::new().ttl(Duration::from_secs(30)))?;
//! let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
//! // … work, handing guard.fencing_token() to the protected resource …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Store URL
//! `zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT][?max_ttl=DURATION&wake_ups=on|off&takeover_margin=DURATION]`.
//! Several hosts are one ensemble: the client talks to one at a time and
//! moves on when it cannot reach it. `CHROOT` (default [`DEFAULT_ROOT`],
//! `/leasehold`) is the node the store lives under, created with its
//! parents where missing: two chroots are two stores. `USER:PASSWORD`
//! (percent-encoded where it holds `@`, `:`, `,`, `/` or `%`)
//! authenticates with ZooKeeper's `digest` scheme, and the nodes the
//! backend creates then carry the creator-only ACL (`auth` scheme); the
//! password is never printed (not by `Debug`, not in errors:
//! `builder::tests`). `max_ttl` (such as `5m`; 1 s to 24 h, default 60 s)
//! is the max TTL a store created now records (see
//! [Store epoch](#store-epoch-and-quarantine)); `wake_ups=off` turns the
//! watch off (waiters poll only); `takeover_margin` (default 200 ms) is
//! added to a holder's TTL before a waiter takes over (see
//! [Takeover](#takeover-clock-free)). The query is read by the core's one
//! parser ([`leasehold::backend::params`]).
//!
//! # Nodes
//! Under the root `R`:
//!
//! | node | data | |
//! |---|---|---|
//! | `R/epoch` | the **epoch marker** (JSON): `epoch`, `max_ttl_ms`, `protocol` (the store's [protocol version](leasehold::backend::protocol); missing: 1), `proven` | created once per store, with `R/epoch/keys-E` in one transaction |
//! | `R/epoch/keys-E` | empty; its version counts the records created in it | the folder of epoch `E`'s records |
//! | `R/epoch/keys-E/NAME` | the key's record (JSON): `fence` (its last token), `lease` (lease id, owner, data, TTL, the holder's acquisition and renewal times, shown only), `released_by`, `last_success`, `last_run` | one per key ever granted in the epoch; never deleted by leasehold |
//! | `R/clock` | empty | written to read the server's clock (its `mtime`) |
//!
//! `NAME` is the key with `/` written `%2F` (and a key of dots only with
//! `%2E` for each dot). Nothing is ephemeral: no ZooKeeper session carries
//! anything of the store, so a session that expires, or a new one, loses
//! nothing.
//!
//! # Protocol
//! Every write is conditional on the version of the node it writes, as
//! read just before; nothing is overwritten blindly.
//!
//! * **Acquire** (in the epoch the request names, its marker read): read
//!   the record. Free: `setData(record, version)` with our lease and the
//!   token [`next_token`](leasehold::backend::next_token)`(fence, E)`.
//!   Held by our own lease id (a retry after an ambiguous answer): the same
//!   write, the same token. Held by another: answer `Held`, and note the
//!   record's version (below). No record: one `multi` of
//!   `setData(keys-E, version)` and `create(record)` with the epoch's first
//!   token; it is tried only when the folder's version (records created)
//!   equals its child version (creations plus deletions), read after the
//!   record was seen missing, so a key whose record was deleted while the
//!   marker stayed (a recursive delete under way: ZooKeeper deletes
//!   children first) is never given its first token again: the backend
//!   answers a retryable error until the whole store is gone, then begins
//!   a new epoch. A creation fails its folder check when another key's
//!   first record was created meanwhile (each creation bumps the
//!   folder's version); it reads and tries again, up to 1024 times within
//!   a quarter of the TTL, after random pauses that grow with the tries
//!   (up to 16 ms), then answers a retryable error; it is never
//!   answered as held (`many_new_keys_at_once_are_all_granted`).
//! * **Renew**: `setData(record, version)` with our lease (its renewal
//!   time updated), if the record still names our lease id; otherwise, or
//!   if the record is gone, the lease is lost
//!   ([`LossReason::Revoked`](leasehold::LossReason::Revoked)). Every
//!   renewal changes the node's version. The backend remembers the record
//!   and version of its own last write of each key it holds, so a renewal
//!   is one request: `setData` of that record with that version, which
//!   succeeds only if nobody wrote since (the node then holds exactly what
//!   we wrote); if anyone did, it reads and decides as above.
//! * **Release**: `setData(record, version)` without the lease and with
//!   `released_by` = our lease id, if it names our lease id; a retry that
//!   finds `released_by` ours succeeds, anything else is
//!   [`LeaseLost`](leasehold::Error::LeaseLost). As for a renewal, the
//!   backend first tries its remembered last write of the record (the
//!   grant's or a renewal's) with that write's version: one request while
//!   nobody else wrote since, else a read and the write as above
//!   (`a_release_is_one_write_while_our_last_write_stands`). An
//!   uncontended acquire + release is thus three requests: a read and a
//!   `setData` to acquire, a `setData` to release. **Break**: the same
//!   without `released_by`, whoever holds it. The fence stays.
//! * **Record a run**: `setData(record, version)` with the run, if the
//!   record names our lease id; otherwise a run that did not succeed is
//!   written as the last run only on a free key whose last run is earlier
//!   (never on a held one: a write changes the version waiters watch, which
//!   must stay a sign of the holder's life alone). `ended_at` is the
//!   writer's clock.
//! * **Inspect** and **list** read the marker, then the records
//!   (`list` with `getChildren` and batched multi-reads). ZooKeeper serves
//!   reads from the server the client is connected to, which may lag the
//!   leader: a read may be stale, never a write (every write is a
//!   version-checked proposal through the leader), so staleness can delay
//!   a takeover or show an older holder, never grant twice.
//!
//! # Takeover (clock-free)
//! ZooKeeper stores no expiry: a held record stays held until its holder
//! writes it again, or a waiter takes it over. A waiter that finds a key
//! held notes the record's version (its `mzxid` and `version`) and when it
//! first saw it, on its own monotonic clock (after the answer arrived, so
//! after the holder's write). Only once it has seen the same version for
//! the holder's whole TTL, plus 0.1 % for clock rates, plus the
//! `takeover_margin`, does it write, conditional on that version. A live
//! holder renews well within its TTL, which changes the version and voids
//! the takeover ([`Capabilities::takeover_needs_observation`](leasehold::backend::Capabilities)):
//! recovering a dead holder's key takes up to two TTLs.
//!
//! # Why it keeps the promise
//! * **One holder at a time.** Every grant, renewal, release, break and
//!   takeover is one `setData` (or, for a key's first record, one `multi`)
//!   conditional on the version read; ZooKeeper applies writes in one
//!   order (its zxid), so of two writes from the same version exactly one
//!   succeeds. A holder's stale release or renewal after a takeover finds
//!   another lease id and changes nothing.
//! * **The work stops before a takeover.** A holder's safety deadline is
//!   the send time of its last successful renewal plus its TTL (less the
//!   core's margin), on its monotonic clock. That renewal's write was
//!   applied after it was sent, and a waiter saw the resulting version only
//!   after that; it takes over once it has seen it unchanged for TTL ×
//!   1.001 + margin on its own clock. So the takeover is sent after the
//!   holder's deadline, as long as the two clocks' rates differ by less
//!   than 0.1 % (no clock *reading* is compared). A holder that cannot
//!   renew (partitioned, paused, its server down) stops at its deadline,
//!   and its record's version stays unchanged for the waiter.
//! * **Tokens only grow.** A key's `fence` is raised in the same
//!   version-checked write that grants it, and records are never deleted
//!   by leasehold; a read-increment-write from a stale read fails its
//!   version check. A key's first record gets the epoch's first token,
//!   `E << 22 + 1`, above every token of an earlier epoch.
//!
//! Tests: the conformance suite unchanged (`tests/conformance.rs`:
//! exclusion, expiry, tokens, runs, semaphores, reader-writer locks,
//! elections); `tests/backend.rs`: `takeover_waits_a_whole_ttl_of_an_unchanged_record`
//! (a renewal starts the watch over), `a_deleted_record_is_never_granted_its_first_token_again`;
//! `tests/store_loss.rs` (below); `tests/restart.rs` (a restart, a
//! SIGKILL, a long outage, a wiped ensemble); `tests/ensemble.rs` (the
//! leader of three killed under a holder).
//!
//! # Store epoch and quarantine
//! The store's epoch `E` is the **server's clock** in whole seconds since
//! 2024-01-01 when the marker was created: the `mtime` of a write to
//! `R/clock` sent after the marker was seen missing, just before the
//! marker's `create` (so `E` is its `ctime`'s second, or the one before).
//! The marker and `R/epoch/keys-E` are created in one `multi`; another
//! process's marker makes it fail, and that process's epoch is read
//! instead. The records of epoch `E` live only under `keys-E`, under the
//! marker: deleting the marker means deleting every record (ZooKeeper
//! deletes no node with children), and a stale process's writes name
//! `keys-E` by path, so they fail (`NoNode`) in any later store, whose
//! folder is named after its own epoch.
//!
//! * **A later store has a later epoch.** No grant is made in epoch `E`
//!   until the backend has seen the server's clock past `E`'s second (a
//!   write to `R/clock`; at most a second's wait, only just after a store
//!   is created). So a store that granted anything was deleted after its
//!   server clock passed `E`, and a store created after that reads the
//!   clock later: its epoch is above `E`, and its tokens above every token
//!   of the lost one. Two stores may share an epoch only when the first
//!   granted nothing (its leftover empty folder then makes the second wait
//!   for the next second). Test: `store_recreated_at_once_issues_greater_tokens`
//!   (`tests/store_loss.rs`: the store deleted in one transaction
//!   milliseconds after its first grant, and created again at once; it
//!   fails without the wait).
//! * **Quarantine.** A new epoch's age is the server's clock (a write of
//!   `R/clock`) less the marker's `ctime`: a process meeting a store older
//!   than one [confirmation window](leasehold::CONFIRMATION_WINDOW) (60 s)
//!   grants at once; one created or re-created less than a window ago is
//!   quarantined by the core for the rest of the window, whatever max TTL
//!   the lost store or the new one records. A holder of the lost data stops
//!   within that window (its renewals fail: its record is gone), so no one
//!   is granted the key while it can still believe it holds it. A backend
//!   built with `Creation::Never` writes nothing, so it reports no age.
//!   Tests: `tests/store_loss.rs` (the conformance suite's
//!   `store_loss_stops_holder_before_next_grant`,
//!   `store_loss_quarantine_outlasts_a_longer_holder`, `store_loss_forgets_runs`).
//! * **What is trusted of the server's clock**: in an ensemble, `ctime`
//!   and `mtime` are the wall clock of the leader of the time. Epochs need
//!   it to move forward across a store's deletion and re-creation (as every
//!   store with a server clock does), and an age read across a change of
//!   leader is off by the two leaders' clock difference: keep the servers'
//!   clocks synchronised (NTP: milliseconds, against a window of a minute).
//!   The clients' clocks are never compared with anything.
//! * **Proven epochs, and looking without writing.** A store created with
//!   `Creation::NewProven` (`leasehold init --new`) records `"proven":
//!   true`, reported as
//!   [`StoreEpoch::proven`](leasehold::backend::StoreEpoch::proven). A
//!   backend built with `Creation::Never` writes nothing (not even
//!   `R/clock`): a store without a marker is `Error::NoStore`.
//! * **Protocol.** The marker's `protocol` is checked on every read of the
//!   marker, before anything is written, and a newer one is refused with
//!   [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol).
//!   A store changes protocol only with a new epoch (a new marker, so a
//!   new folder: the old records are deleted with the old marker).
//!
//! **What counts as store loss**: the root (or the marker) deleted with
//! everything under it (`deleteall`), an ensemble whose data directories
//! were lost (a new, empty ensemble), or a store restored from an older
//! snapshot *together with its marker* (an older epoch: the core refuses
//! it in every process that saw the newer one; restore into a new chroot
//! instead, or delete the restored marker with everything under it).
//!
//! # Why not ephemeral nodes (sessions as leases)
//! The other design hangs a holder's node on its ZooKeeper session and
//! lets the server delete it when the session expires. Its timing could be
//! argued as etcd's leases are: the server expires a session at least its
//! negotiated timeout after the *receipt* of its last request or ping
//! (rounded up to the next tick; a new leader even restarts every
//! session's timer), so a holder that counts its deadline from the *send*
//! of its last acknowledged request always stops first. It fails on what
//! the core asks of a lease, not on timing:
//!
//! * **A lease must end when its holder stops renewing it, not when its
//!   process or connection dies.** The client library pings the session
//!   by itself, so a key stays held as long as the process is connected,
//!   whether or not anything still renews it: a lease taken and never
//!   renewed (the conformance suite's `expiry_frees_after_ttl`, and any
//!   guard whose renewal loop has stopped) would never expire.
//!   Sessions of our own that we stop pinging are not something
//!   `zookeeper-client` (or ZooKeeper's Java client) offers.
//! * **Each lease has its own TTL** (1 s to a day, renewed every third of
//!   it at most), while a session has one timeout, which the server clamps
//!   to `minSessionTimeout..=maxSessionTimeout` (4 s to 40 s by default):
//!   one session per lease, or per TTL, with the clamping reported back.
//!
//! Versioned records and takeover by observation need no session
//! semantics at all, trust no clock reading across machines, and pass the
//! conformance suite unchanged, as the DynamoDB and S3 stores do. The
//! price: a dead holder's key is free after up to two TTLs, not one.
//!
//! # Wake-ups across machines
//! One persistent recursive watch (`addWatch`, ZooKeeper 3.6+) per backend
//! on the root: every change of a record node (a release or break, but
//! also a renewal) wakes the waiters of its key. A hint only: waiters keep
//! polling, and a lost connection ends the watch until it is put back.
//!
//! # Sessions
//! One ZooKeeper session per backend (10 s session timeout), opened on
//! first use. A request that loses its connection or times out (the
//! backend's request timeout, 5 s by default) drops the session, and the
//! next request opens a new one: the store keeps nothing on sessions, and
//! a server that lost its data refuses a session that has seen later
//! transactions than its own, for as long as the client retries it
//! (test `tests/restart.rs`, `wiped_ensemble_is_a_new_epoch`).
//!
//! # Build
//! The client is `zookeeper-client` (pure Rust, no build script, no
//! system library; TLS and SASL off): a Rust toolchain is all the build
//! needs. Its session task runs on the caller's tokio runtime; its sockets
//! are driven by `async-io`'s reactor thread.

#![warn(missing_docs)]

mod acquire;
mod backend;
mod builder;
mod client;
mod epoch;
mod error;
mod lease;
mod listen;
mod names;
mod record;
mod writes;

use std::time::Duration;

pub use backend::ZkBackend;
pub use builder::{ZkBackendBuilder, DEFAULT_TAKEOVER_MARGIN};
pub use names::DEFAULT_ROOT;

/// Re-exported for tools that talk to the same ensemble (the benchmarks'
/// raw loop).
pub use zookeeper_client;

/// Shortest TTL this backend accepts.
pub const MIN_TTL: Duration = Duration::from_secs(1);

/// Longest max TTL a store may be created with.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
