//! MySQL and MariaDB backend for [leasehold]: leases with fencing tokens on
//! the database teams already run, timed by the *server's* clock, every
//! operation one statement or one short transaction, with no session
//! state and no `GET_LOCK` (so it works through a pooler or a proxy such
//! as ProxySQL, and a lease outlives any one connection).
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{LockOptions, Store};
//! use leasehold_mysql::MysqlBackend;
//!
//! # async fn f() -> leasehold::Result<()> {
//! // The table is created if missing.
//! let backend = MysqlBackend::from_url("mysql://app@db.internal/jobs?table=leases").await?;
//! let store = Store::new(backend);
//! let lock = store.lock_with("import-A", LockOptions::new().ttl(Duration::from_secs(30)))?;
//! let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
//! // … work, handing guard.fencing_token() to the protected resource …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Store URL
//! `mysql://USER[:PASSWORD]@HOST[:PORT]/DB[?table=NAME&max_ttl=DURATION&sslmode=MODE&sslrootcert=PATH&pool_size=N]`
//! (or `mariadb://`; port 3306 by default). `MYSQL_PWD` gives the password
//! when the URL has none (percent-encode `@`, `:` and `/` in a password in
//! the URL). `table` (default [`DEFAULT_TABLE`]; lowercase letters, digits,
//! `_`, optionally `DB.TABLE`, which may stand in for `/DB`); `max_ttl`
//! (such as `5m`) for the max TTL a table created now records (see
//! [Store epoch](#store-epoch-and-quarantine)); `pool_size` (default 8)
//! connections at most. The password is never printed: not by `Debug`
//! (of the builder or the backend), not in errors (URL errors name the
//! part that is wrong; the client's errors do not repeat its options);
//! checked by `builder::tests::bad_urls_are_refused_without_the_password`
//! and the `password_is_never_printed` test.
//!
//! **TLS** (rustls, no OpenSSL): `sslmode=disable` (the default) never;
//! `require`, `verify-ca`, `verify-full` always, and whenever TLS is used
//! the certificate chain *and* host name are verified against the
//! built-in web roots (webpki-roots) plus `sslrootcert`: stricter than the
//! `mysql` client's `REQUIRED`, which accepts any certificate. A server
//! with a private CA needs `sslrootcert=PATH`. There is no "prefer".
//!
//! # Table
//! One InnoDB table (created on demand, see [Protocol](#protocol); the
//! user needs `CREATE` on the database the first time, then `SELECT`,
//! `INSERT`, `UPDATE` on the table, and may read its row of
//! `information_schema.TABLES`, which any privilege on the table allows):
//!
//! ```sql
//! CREATE TABLE leasehold_leases (
//!   k            VARBINARY(256) NOT NULL PRIMARY KEY, -- the key ('#epoch' for the epoch row)
//!   fence        BIGINT UNSIGNED NOT NULL, -- last fencing token issued for the key; only grows
//!   epoch        BIGINT UNSIGNED NOT NULL, -- store epoch of the last grant (the epoch row: the epoch)
//!   lease_id     VARBINARY(255) NULL,      -- current lease; NULL when free
//!   expires_at   DATETIME(6) NULL,         -- server clock, UTC: UTC_TIMESTAMP(6) + TTL
//!   ttl_ms       BIGINT NULL,              -- the holder's TTL (the epoch row: the max TTL)
//!   owner_host TEXT, owner_pid BIGINT, owner_label TEXT, -- the epoch row's owner_pid: the protocol
//!   data         MEDIUMTEXT NULL,          -- the holder's data
//!   acquired_at  DATETIME(6) NULL,         -- server clock at the grant (the epoch row: the epoch's start)
//!   table_created BIGINT NULL,             -- only the epoch row: the table's CREATE_TIME when written
//!   last_success MEDIUMTEXT, last_run MEDIUMTEXT, -- run records (JSON)
//!   last_run_token BIGINT UNSIGNED NULL    -- the fencing token of last_run
//! ) ENGINE=InnoDB;
//! ```
//!
//! **Protocol.** The epoch row's `owner_pid` holds the store's
//! [protocol version](leasehold::backend::protocol), written with every new
//! epoch and checked wherever the epoch row is read (on opening, before
//! anything is written, and in every acquire, which grants nothing in a
//! store of a protocol this build does not speak:
//! [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol)).
//!
//! A lease is *live* when `lease_id` is set and `expires_at >
//! UTC_TIMESTAMP(6)`. Rows are never deleted, so a key's fence never goes
//! back. Times are `DATETIME(6)` in UTC from `UTC_TIMESTAMP(6)`, which no
//! session time zone changes.
//!
//! # Protocol
//! Every operation is one statement or one short InnoDB transaction; no
//! `GET_LOCK`, no temporary table. What a connection keeps: its prepared
//! statements (each prepared once per connection) and the session settings
//! it makes when it connects, so that the server's defaults change nothing:
//! `READ COMMITTED` (no gap locks: two acquirers of new keys never deadlock
//! on them), `innodb_lock_wait_timeout = 2` (a statement waits for a row
//! lock no longer than that, failing retryably), `time_zone = '+00:00'`,
//! and on MariaDB `idle_transaction_timeout = 2` (below). Behind a proxy
//! that does not carry session settings to the connection a transaction
//! runs on, the server's defaults apply (the store stays safe; the waits
//! above are then the server's). Expiry is computed and compared by the server
//! (`UTC_TIMESTAMP(6)`): no client clock is ever compared with another.
//!
//! * **Creating the table** (when a statement finds it missing: a new
//!   store, or one dropped): `CREATE TABLE IF NOT EXISTS`. The server
//!   serialises concurrent creations of one name on its metadata lock: the
//!   first creates it and the others find it (test: leasehold-cli's
//!   `tests/concurrent_open.rs`, ten processes on five new tables). Then,
//!   in one transaction, the epoch row is locked (`FOR UPDATE`), inserted
//!   if missing (`INSERT IGNORE`: exactly one creator's insert counts), and
//!   the new epoch committed once its second has begun (below); a second
//!   creator's `INSERT IGNORE` waits for the first's commit and inserts
//!   nothing (a deadlock, under another isolation level, is tried again).
//! * **Acquire** (one transaction, 5 round trips: `START TRANSACTION`, the
//!   epoch row `LOCK IN SHARE MODE`, the key's row `FOR UPDATE`, the
//!   write, `COMMIT`): the epoch row must name the request's epoch, this
//!   table and a known protocol, and the TTL must be within its max TTL;
//!   then, under the key row's exclusive lock, the key is granted when it
//!   has no row (inserted with token `next_token(0, epoch)`), no lease, a
//!   lease expired by the server's clock, or our own lease (a retry after
//!   an ambiguous failure: extended, keeping its token); a new grant's
//!   token is `next_token(fence, epoch)` = `max(fence, epoch << 22) + 1`.
//!   Otherwise the same read names the holder, and the transaction is
//!   rolled back (4 round trips). Two acquirers of a new key both find no
//!   row; the second's insert fails (duplicate key, or a deadlock on the
//!   gap lock), its transaction is rolled back, and it tries again (up to
//!   5 times), finding the first's row.
//! * **Acquire several keys, all or none** (a multi-key lock's first
//!   attempt, [`Backend::try_acquire_all`](leasehold::backend::Backend::try_acquire_all)):
//!   the same transaction over every key, in byte order of the keys (3 + 2
//!   per key round trips, one commit, against 5 per key one by one): the
//!   epoch row once, then each key's row `FOR UPDATE` and its write, by the
//!   rule above; the first key found held rolls the whole transaction back
//!   (nothing written) and is named in the answer. Every such transaction
//!   locks rows in the same order; a deadlock on gap locks (two of them
//!   inserting new keys) is a lost race, rolled back and tried again as
//!   above. Tests: the conformance suite's `batch_*`.
//! * **Renew**: `UPDATE … SET expires_at = UTC_TIMESTAMP(6) + TTL WHERE k
//!   AND lease_id = ours AND epoch = ours AND expires_at >
//!   UTC_TIMESTAMP(6)`; no row matched is a definitive loss (a second
//!   statement then says why). The epoch row is not read: every change of
//!   epoch voids every lease in the same transaction (below), and a
//!   dropped table has no row.
//! * **Record a run** (`--once-per`): `UPDATE` setting `last_run` (and
//!   `last_success` if it succeeded) `WHERE k AND lease_id = ours`, with
//!   `ended_at` stamped by the server's clock; when that matched nothing
//!   and the run failed, a second `UPDATE` keeps it only over an earlier
//!   run's record (`last_run_token < ours`), and the lease is reported lost.
//! * **Release**: `UPDATE … SET lease_id = NULL WHERE k AND lease_id =
//!   ours`. **Break**: one transaction: the row `FOR UPDATE` (who held
//!   it), then its lease cleared. **Inspect**/**list**: plain `SELECT`s
//!   (list: keys by byte prefix, in byte order).
//! * An operation that does not answer within the request timeout (5 s)
//!   is a retryable failure; its connection is dropped mid-way, and the
//!   pool rolls back what it left open before reusing it.
//! * **A process frozen inside an acquire** (between its statements) would
//!   keep the key's row lock as long as its connection lives. Every
//!   connection sets MariaDB's `idle_transaction_timeout` (2 s): the server
//!   ends a connection idle inside a transaction that long and rolls it
//!   back (test `an_acquire_frozen_mid_transaction_holds_the_key_for_seconds_only`).
//!   MySQL has no such setting (the statement fails there, ignored): a
//!   frozen acquirer holds the key (and, through its shared lock on the
//!   epoch row, any new epoch) until its connection ends, by default hours
//!   later. Liveness only: exclusion and fencing do not depend on it.
//!
//! # Store epoch and quarantine
//! The epoch row (key `#epoch`) is written when the table is created: the
//! epoch is the server clock's next whole second since 2024-01-01 (the
//! creating transaction sleeps, holding the row's lock, until that second
//! has begun before it commits, so a table created after it gets a greater
//! epoch), with the max TTL and the table's creation time
//! (`information_schema.TABLES.CREATE_TIME`). Its age is
//! `UTC_TIMESTAMP(6) - acquired_at`, on the server's clock, where
//! `acquired_at` is stamped by the transaction's last statement, after
//! every lease of the table was voided: a void that waits on row locks or
//! takes seconds on a large table lets the holders it has not reached yet
//! renew meanwhile, so the quarantine must not count that time (test
//! `a_new_epochs_age_counts_from_after_the_void`). So a process
//! opening an established table grants at once, and a new or re-created
//! table is quarantined for one
//! [confirmation window](leasehold::CONFIRMATION_WINDOW) (60 s; see
//! [store epochs](leasehold::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)).
//!
//! * **Table dropped** (and maybe re-created) under a live holder: its
//!   renewal fails (1146, or the new table has no row for it): a
//!   definitive loss. An acquirer that finds the table missing creates it,
//!   which starts a new epoch; grants wait the quarantine, and every key's
//!   first token is above the new epoch's base, so above every earlier
//!   token (test `store_loss.rs`). A new server (or a new database) is the
//!   same: no table.
//! * **Table restored** from a dump (`mysqldump`, or copied with `CREATE
//!   TABLE … SELECT`): the restored epoch row records the creation time of
//!   the table it was written in, and the restored table was created
//!   later. Every acquire compares the two in its epoch read, so nothing is
//!   granted on restored data; the next acquirer starts a new epoch (in a
//!   transaction that first locks the epoch row, then voids every lease),
//!   with the same quarantine (test `restored_table_starts_a_new_epoch`). A
//!   holder of a lease in the restored rows may renew it until then, which
//!   is safe: it held the key when the dump was taken and nobody else is
//!   granted anything in that table before the new epoch voids it.
//! * **Other changes of `CREATE_TIME`**, all counted as a restore, so a new
//!   epoch (safe: every holder is told its lease is lost, and grants wait
//!   the quarantine): a table rebuilt in place (`ALTER TABLE`, `OPTIMIZE
//!   TABLE`), and on MariaDB, where `CREATE_TIME` is the `.frm` file's
//!   change time, also `RENAME TABLE`, `TRUNCATE`, a `chmod`/`chown` of the
//!   file, or a copy of the data directory. Each server of a replicated set
//!   has its own, so a failover to a replica starts a new epoch (which
//!   also keeps the promise where the replica missed the last grants), and
//!   **writes to several primaries at once (multi-primary Galera) are not
//!   supported**: the epoch would change back and forth. Do not rebuild,
//!   rename or copy a lease table that is in use.
//! * **The epoch row deleted** by hand: as a new table (new epoch, leases
//!   voided). This is also the way to force a new epoch by hand.
//! * Every acquire reads the epoch row `LOCK IN SHARE MODE`, and a new
//!   epoch is started under that row's exclusive lock, so a grant and an
//!   epoch change never interleave.
//! * **Not detected**: rows restored into the existing table (`mysqldump
//!   --no-create-info` or `--replace`, a `DELETE` and reload, a binlog
//!   flashback) and, on MySQL, a physical restore of the server's files (a
//!   volume snapshot, an `xtrabackup` copy, a point-in-time restore from
//!   the binary log) that keeps the table's creation time. They bring back
//!   older rows of the *same* table, so tokens could repeat: after one,
//!   delete the epoch row (`DELETE FROM leasehold_leases WHERE k =
//!   '#epoch'`) before the store is used again.
//! * **A replica whose clock is ahead.** Expiry is judged on the server's
//!   clock: if a promoted replica's clock is ahead of the old primary's by
//!   `d`, every live lease expires `d` early there. Keep the servers'
//!   clocks synchronised (NTP, slewing) well within a lease's safety
//!   margin (TTL/10 by default), or delete the epoch row after a failover.
//!
//! **Proven epochs, and looking without writing.** An epoch is settled at
//! once, in every process, when its creator states that no store existed
//! there before (`leasehold init --new`): the epoch row inserted by a
//! backend built with `Creation::NewProven` into a table without lease rows
//! has `lease_id = '#proven'`; a new epoch started in the row clears it. A
//! backend built with `Creation::Never` (`leasehold list`, `status`,
//! `leader`) writes nothing: a missing table is `Error::NoStore`, and a
//! missing or restored epoch row is reported as it is.
//!
//! # Why it is safe
//! Exclusion: a grant happens only in the acquire transaction, under the
//! key row's exclusive lock, whose condition (free, expired by the
//! server's clock, or ours) is checked on the newest committed row
//! (locking reads always read it, whatever the isolation level). The old
//! holder stops in time because its guard's safety deadline runs from the
//! *send* time of its last successful renewal on its own monotonic clock,
//! while the server set `expires_at` from its own clock *after* receiving
//! it: the server's expiry is never earlier in real time than the holder's
//! deadline, as long as the server's clock does not jump forward (the one
//! clock trusted). Fencing: `fence` only grows (rows are never deleted;
//! each grant sets `next_token(fence, epoch)` under the row lock), and a
//! new epoch lies above every earlier token. Durability: a grant is
//! answered after its commit, so with InnoDB's defaults
//! (`innodb_flush_log_at_trx_commit=1`) a server crash keeps it; with a
//! laxer setting a crash can lose the last second of grants, and tokens
//! could repeat — keep the default for a lease table.
//!
//! # Waiting
//! MySQL has no notifications: a waiter on another process polls (50–100
//! ms at first, backing off to the poll cap while the same holder keeps
//! the key, as on the other polling stores; see `LockOptions::poll_cap`).
//! Waiters in one process are still woken at once by a release there.
//!
//! # Why mysql_async
//! mysql_async is the maintained async MySQL/MariaDB client on tokio:
//! a pool, prepared statements cached per connection, transactions that
//! the pool rolls back if dropped. Built without its default features
//! (zlib through a C build, no TLS), with the pure-Rust deflate and rustls
//! on ring. sqlx's MySQL driver would bring a second async stack and
//! macros for the same few statements.
//!
//! # TTL range
//! 1 s to the table's max TTL (at most 24 h).

#![warn(missing_docs)]

mod backend;
mod builder;
mod epoch;
mod error;
mod record;
mod statements;

use std::time::Duration;

pub use backend::MysqlBackend;
#[doc(hidden)]
pub use backend::RawSql;
pub use builder::{MysqlBackendBuilder, SslMode, DEFAULT_TABLE};

/// Re-exported for building client options in code.
pub use mysql_async;

/// Shortest TTL (and store max TTL) this backend accepts.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longest store max TTL this backend accepts.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
