//! PostgreSQL backend for [leasehold]: leases with fencing tokens on the
//! database teams already run, timed by the *server's* clock, one statement
//! per operation (so it works through PgBouncer in transaction mode).
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{LockOptions, Store};
//! use leasehold_postgres::PostgresBackend;
//!
//! # async fn f() -> leasehold::Result<()> {
//! // PG* environment variables fill in what the URL omits; the table is
//! // created if missing.
//! let backend = PostgresBackend::from_url("postgres://app@db.internal/jobs?table=leases").await?;
//! let store = Store::new(backend);
//! let lock = store.lock_with("import-A", LockOptions::new().ttl(Duration::from_secs(30)))?;
//! let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
//! // … work, handing guard.fencing_token() to the protected resource …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Store URL
//! `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?table=NAME&sslmode=MODE&sslrootcert=PATH&max_ttl=DURATION&wake_ups=on|off&prepared=on|off&unlogged=on|off]`
//! (or `postgresql://`). What the URL omits comes from `PGHOST`, `PGPORT`,
//! `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`,
//! `PGAPPNAME`, `PGCONNECT_TIMEOUT`, as with libpq (host `localhost`, user
//! `$USER` when neither says). `table` (default [`DEFAULT_TABLE`];
//! lowercase letters, digits, `_`, optionally `schema.table`); `max_ttl`
//! (such as `5m`) for the max TTL a table created now records (see
//! [Store epoch](#store-epoch-and-quarantine));
//! `wake_ups=on|off` (see [Wake-ups](#wake-ups-across-machines));
//! `prepared=on|off` (see [Prepared statements](#prepared-statements));
//! `unlogged=on|off` (see [Unlogged table](#unlogged-table)). The
//! client's own parameters `connect_timeout`, `application_name`, `options`,
//! `keepalives`, `keepalives_idle`, `target_session_attrs`,
//! `channel_binding`, `load_balance_hosts`, `hostaddr`, `host`, `port`,
//! `user`, `dbname` and `password` pass through.
//! The password is never printed: not by `Debug` (of the builder, the
//! backend or the client's configuration), not in errors (URL errors name
//! the part that is wrong, connection errors come from the client, which
//! does not repeat its configuration); checked by
//! `builder::tests::bad_urls_are_refused_without_the_password` and the
//! `password_is_never_printed` test.
//!
//! **TLS** (rustls, no OpenSSL): `sslmode=disable` never; `prefer` (the
//! default, as in libpq) when the server offers it; `require`, `verify-ca`,
//! `verify-full` always. Whenever TLS is used the certificate chain *and*
//! host name are verified against the system's roots plus `sslrootcert`:
//! stricter than libpq, whose `prefer`/`require` accept any certificate.
//! A server with a private CA needs `sslrootcert=PATH`.
//!
//! # Table
//! One table (created on demand, see [Protocol](#protocol); the
//! role needs `CREATE` on the schema the first time, then `SELECT`,
//! `INSERT`, `UPDATE` on the table):
//!
//! ```sql
//! CREATE TABLE leasehold_leases (
//!     key         text PRIMARY KEY, -- the lock key ('#epoch' for the epoch row)
//!     fence       bigint NOT NULL,  -- last fencing token issued for the key; only grows
//!     epoch       bigint NOT NULL,  -- store epoch of the last grant (the epoch row: the epoch)
//!     lease_id    text,             -- current lease; NULL when free
//!     expires_at  timestamptz,      -- server clock: clock_timestamp() + TTL at grant/renewal
//!     ttl_ms      bigint,           -- the holder's TTL (the epoch row: the max TTL)
//!     owner_host  text, owner_pid bigint, owner_label text,
//!     data        text,             -- the holder's data (the epoch row: the cluster's system identifier)
//!     acquired_at timestamptz,      -- server clock at the grant (the epoch row: the epoch's start)
//!     table_oid   oid,              -- only the epoch row: the table's OID when it was written
//!     last_success text, last_run text, -- run records (JSON), see below
//!     last_run_token bigint             -- the fencing token of last_run
//! );
//! ```
//!
//! **Protocol.** The epoch row's `owner_pid` holds the store's
//! [protocol version](leasehold::backend::protocol) (NULL: protocol 1, a
//! row of a build from before versions were recorded, which never reads
//! that column in the epoch row). It is written with every new epoch, and
//! checked where the epoch row is read: on opening (before anything is
//! written: the epoch row is read, or locked, before the insert that would
//! begin an epoch) and in the acquire statement itself, which grants only
//! while `coalesce(owner_pid, 1)` is a protocol this build speaks (the
//! answer's epoch columns then say why: a newer protocol is
//! [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol)).
//!
//! A lease is *live* when `lease_id` is set and `expires_at >
//! clock_timestamp()`. Rows are never deleted, so a key's fence never goes
//! back.
//!
//! # Protocol
//! Every operation is **one statement** sent as one unnamed-statement
//! round trip (`Client::query_typed`: parse, bind, execute, sync), so it is
//! atomic on its own, keeps no session state, takes no session-level lock,
//! and works through a transaction-mode pooler (tested through PgBouncer,
//! with `wake_ups=off`). Only the rare table creation and epoch set-up
//! below, and a multi-key lock's first attempt (several keys, all or
//! none), are short transactions. Expiry is computed and compared by the
//! server (`clock_timestamp()`): no client clock is ever compared with
//! another.
//!
//! * **Creating the table** (when a statement finds it missing: a new
//!   store, or one dropped) is one transaction: `SELECT
//!   pg_advisory_xact_lock(0x6c68, hashtext('SCHEMA.TABLE'))`, then `CREATE
//!   TABLE IF NOT EXISTS`. The many processes that open a new store at once
//!   (the first cron tick after a deploy) create it one at a time: the
//!   first creates it, each next one finds it. Without the lock,
//!   `IF NOT EXISTS` does not make concurrent creations safe: it checks for
//!   the table before inserting its catalog rows, and a creator that commits
//!   in between makes the other fail with `type "…" already exists`
//!   (42710), `duplicate key … pg_type_typname_nsp_index` (23505) or
//!   `relation "…" already exists` (42P07). Measured with ten `leasehold
//!   run` processes started together on a new table: 5 of 300 rounds had
//!   processes fail to open the store (42710) without the lock, 0 of 300
//!   with it. The lock, rather than retrying on those errors, because it
//!   does not depend on knowing every error a lost race can raise (42710
//!   had been missed). It is transaction-scoped, so a transaction-mode
//!   pooler keeps it on one server connection and it is released at commit
//!   or rollback whatever happens to the client; a session-level lock would
//!   not be. The key is the schema-qualified name (an unqualified table is
//!   in `current_schema()`), so `leases` and `public.leases` serialise too;
//!   another application's two-key advisory lock on the same pair only
//!   delays a creation. A creator that does not take the lock (the DDL run
//!   by hand at the same moment) can still collide: that open fails, and the
//!   next one finds the table. Test: leasehold-cli's
//!   `tests/concurrent_open.rs` (ten processes, five new tables; it passes
//!   through PgBouncer as well, with `LEASEHOLD_TEST_POSTGRES_URL` set to
//!   it).
//!
//! * **Acquire** (1 round trip): `WITH m AS (SELECT … epoch row … FOR
//!   SHARE), g AS (INSERT … SELECT … FROM m WHERE m.epoch = $epoch AND
//!   m.same_table AND ttl <= max_ttl ON CONFLICT (key) DO UPDATE SET fence
//!   = greatest(fence, epoch << 22) + 1, lease = ours … WHERE lease_id IS
//!   NULL OR expires_at <= clock_timestamp() OR lease_id = ours RETURNING
//!   fence) SELECT granted, epoch row, holder`. The `ON CONFLICT … WHERE`
//!   is evaluated on the newest committed row version under its row lock,
//!   so two acquirers of a free key serialise and exactly one wins; a new
//!   key's first row starts at `epoch << 22 + 1`. Our own live lease asked
//!   for again (a retry after an ambiguous failure) is extended and keeps
//!   its token. The same answer names the holder when it is held, so a
//!   failed attempt costs one round trip too.
//! * **Acquire several keys, all or none** (a multi-key lock's first
//!   attempt, [`Backend::try_acquire_all`](leasehold::backend::Backend::try_acquire_all);
//!   2 round trips, one commit): one transaction on one connection, `BEGIN`
//!   pipelined with the acquire statement above once per key, in byte
//!   order of the keys, then `COMMIT` if every statement granted, else
//!   `ROLLBACK` (nothing written; the answer names the first held key).
//!   Each statement is the one-key statement, so each grant is checked
//!   and counted as above; the transaction only makes them one. Rows are
//!   locked in key order by every such transaction (a conflicting row is
//!   locked even when `ON CONFLICT … WHERE` leaves it unchanged), and a
//!   one-key statement locks one row, so no two wait for each other in a
//!   circle. A connection that failed inside the transaction is dropped,
//!   not returned to the pool; a commit whose answer is lost is an
//!   ambiguous failure, and the caller releases every lease id. A
//!   transaction-mode pooler keeps the transaction on one server
//!   connection. Tests: the conformance suite's `batch_*`.
//! * **Renew**: `UPDATE … SET expires_at = clock_timestamp() + ttl WHERE
//!   key AND lease_id = ours AND epoch = ours AND expires_at >
//!   clock_timestamp() AND` the epoch row still names our epoch and this
//!   table; no row changed is a definitive loss (the same statement says
//!   why).
//! * **Record a run** (`--once-per`): one `UPDATE` setting `last_run` (and
//!   `last_success` if it succeeded) `WHERE key AND (lease_id = ours OR (not
//!   a success AND last_run_token < ours))`, with `ended_at` stamped by
//!   `clock_timestamp()`: a success is written only under our lease, so the
//!   next holder, granted after our release, reads it; a run that lost its
//!   lease never replaces a later run's record.
//! * **Release**: `UPDATE … SET lease_id = NULL WHERE key AND lease_id =
//!   ours`, committed without waiting for its WAL flush (the statement
//!   sets `synchronous_commit` off for its own transaction): a release
//!   lost in a server crash leaves the key held until its expiry, which is
//!   safe (every lease may end that way), and any later synchronous commit
//!   (the next grant's) flushes it first, as the WAL is one sequence. The
//!   release answers, and its NOTIFY goes out, without a disk flush: a
//!   handoff costs one flush, the grant's. **Break**: clears whatever lease is on the key, returning who
//!   held it. **Inspect**/**list**: plain `SELECT`s (list: `starts_with(key,
//!   prefix)`, in byte order).
//! * A statement that does not answer within the request timeout (5 s) is
//!   a retryable failure and its connection is discarded (it may sit behind
//!   a partition).
//!
//! # Store epoch and quarantine
//! The epoch row (key `#epoch`) is written when the table is created: the
//! epoch is the server clock's next whole second since 2024-01-01 (the
//! creating transaction waits for that second to begin before it commits,
//! so a table created after it gets a greater epoch), with the max TTL, the
//! table's OID and the cluster's system identifier (`pg_control_system()`,
//! drawn at random by `initdb`). Its age is `clock_timestamp() - acquired_at`, on the
//! server's clock, so a process opening an established table grants at
//! once, and a new or re-created table is quarantined for one
//! [confirmation window](leasehold::CONFIRMATION_WINDOW) (60 s; see
//! [store epochs](leasehold::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)),
//! whatever max TTL the lost table or the new one records: the max TTL
//! bounds the new table's leases only (test
//! `store_loss_quarantine_outlasts_a_longer_holder`, `tests/store_loss.rs`:
//! a holder of a 30-minute lease, the table dropped, a re-creator with the
//! default max TTL).
//!
//! * **Table dropped** (and maybe re-created) under a live holder: its
//!   renewal fails (`42P01`, or the new table has no row for it, or the
//!   epoch row names another epoch): a definitive loss. An acquirer that
//!   finds the table missing creates it, which starts a new epoch; grants
//!   wait the quarantine, and every key's first token is above the new
//!   epoch's base, so above every earlier token (conformance test
//!   `store_loss_stops_holder_before_next_grant`, `tests/store_loss.rs`).
//! * **Table restored** from a dump (`pg_dump`/`pg_restore`, or copied with
//!   `CREATE TABLE … AS`): the restored epoch row names the table it was
//!   written in (its OID and its cluster's system identifier), not this
//!   one. Acquire and renew compare both with the table's own in the same
//!   statement, so nothing is granted or renewed on restored data; the next
//!   acquirer starts a new epoch (in a short transaction that first locks
//!   the epoch row, then voids every lease), with the same quarantine
//!   (tests `restored_table_starts_a_new_epoch`, in the same cluster, and
//!   `tests/restore.rs`, a `pg_dump` restored into a new `initdb` cluster,
//!   where the table got the very same OID: the OID alone let the restored
//!   table issue again a token issued after the dump, before the system
//!   identifier was compared too). A table written before the identifier
//!   was recorded starts one new epoch on its first use by this version.
//! * **The epoch row deleted** by hand: as a new table (new epoch, leases
//!   voided). This is also the way to force a new epoch by hand.
//! * Every acquire reads the epoch row `FOR SHARE`, and a new epoch is
//!   started under that row's exclusive lock, so a grant and an epoch
//!   change never interleave: a grant either commits before the change
//!   (and is voided by it) or sees the new epoch.
//! * **Not detected** (in a logged table; an [unlogged](#unlogged-table)
//!   one is empty in both cases, which is detected): a physical restore of
//!   the whole cluster to an earlier point in time (PITR) and failover to
//!   an asynchronous replica that had not received the last grants. Both bring back an older copy
//!   of the *same* table (same OID), so tokens could repeat. Use synchronous
//!   replication (`synchronous_commit = on` with a synchronous standby) for
//!   a lease table you fail over, and after a PITR or an asynchronous
//!   failover delete the epoch row (`DELETE FROM leasehold_leases WHERE key
//!   = '#epoch'`) before the store is used again. (A physical standby has
//!   its primary's system identifier, which is why it cannot be told apart
//!   this way.)
//! * **A standby whose clock is ahead.** Expiry is judged on the server's
//!   clock, and failover to a standby does not start a new epoch. If the
//!   promoted standby's clock is ahead of the old primary's by `d`, every
//!   live lease expires `d` early there, while its holder's deadline, from
//!   its own clock, is still to come: two holders for up to `d` minus the
//!   holder's safety margin (`LockOptions::safety_margin`, TTL/10 by
//!   default) when `d` exceeds that margin. Keep the servers' clocks synchronised (NTP, slewing) well
//!   within that margin, or delete the epoch row after a failover as above
//!   (a new epoch: every lease of the old one ends, and grants wait the
//!   quarantine).
//!
//! **Proven epochs, and looking without writing.** An epoch is settled at
//! once, in every process, when its creator states that no store existed
//! there before (`leasehold init --new`): the epoch row inserted by a
//! backend built with `Creation::NewProven` into a table without lease rows
//! has `lease_id = '#proven'`; a new epoch started in the row (a restored
//! table) clears it; it is reported as
//! [`StoreEpoch::proven`](leasehold::backend::StoreEpoch::proven). A backend built
//! with `Creation::Never` (`leasehold list`, `status`, `leader`) writes
//! nothing: a missing table is `Error::NoStore`, and a missing or restored
//! epoch row is reported as it is, not renewed. Test: leasehold-cli's
//! `tests/init_and_look.rs`.
//!
//! # Why it is safe
//! Exclusion: a grant happens only in the acquire statement, whose
//! condition (free, expired by the server's clock, or ours) is checked on
//! the newest row version under the row lock. The old holder stops in time
//! because its guard's safety deadline runs from the *send* time of its last
//! successful renewal on its own monotonic clock, while the server set
//! `expires_at` from its own clock *after* receiving it: the server's
//! expiry is never earlier in real time than the holder's deadline, as long
//! as the server's clock does not jump forward (the one clock trusted).
//! Fencing: `fence` only grows (rows are never deleted; each grant sets
//! `greatest(fence, epoch << 22) + 1` under the row lock), and a new epoch
//! lies above every earlier token.
//!
//! # Wake-ups across machines
//! Every release and break NOTIFYs the table's channel (`leasehold.TABLE`)
//! with the key, in the same statement (delivered when it commits). Each
//! backend that has a waiter keeps one more connection that LISTENs on the
//! channel (started on the first wait; reconnected with back-off) and
//! wakes that key's waiters through
//! [`Backend::watch_release`](leasehold::backend::Backend::watch_release), so a
//! waiter on another machine tries again at once instead of at its next
//! poll. Polling stays the fallback: a notification missed while the
//! LISTEN connection is down, or an expiry (which nobody announces), is
//! found by the next poll. Measured on loopback (`examples/handoff.rs`,
//! debug build, a shared 2-core machine): other-process handoff p50 4.6 ms
//! with wake-ups, 80 ms with polling only (default 50-100 ms polls); test
//! `tests/wake_ups.rs`. LISTEN is session state: **behind a
//! transaction-mode pooler, turn wake-ups off** (`wake_ups=off` in the
//! URL, or [`PostgresBackendBuilder::wake_ups`]`(false)`, which also drops
//! the NOTIFY and, unless `prepared=` says otherwise, prepared statements). With LISTEN through PgBouncer 1.18 in transaction mode the
//! conformance suite's elections saw renewals fail and leases expire (safe:
//! the holders were told lost; not diagnosed further); with `wake_ups=off`
//! the whole suite passes through it (`scripts/test.sh` runs it so). NOTIFY serialises committing transactions that notify
//! on a server-wide lock: cheap at lease rates, but it is there.
//!
//! # Prepared statements
//! Each statement is prepared once per pooled connection (named, cached by
//! deadpool-postgres) and then only bound and executed: the server parses
//! and plans it once, not at every request. Measured with `pgbench` on
//! these 2-core machines (acquire + release of one key, one client, the
//! test server): 885 cycles/s parsed every time, 1890 prepared (2.1×);
//! PostgreSQL's own `pg_advisory_lock` + `pg_advisory_unlock`, for scale,
//! 3030 and 3360. (The rest of a cycle, measured the same way: the
//! `NOTIFY` in a release costs about 5 %, the epoch row's `FOR SHARE` in an
//! acquire about 7 %.) Named prepared statements are session state: behind
//! a transaction-mode pooler they must be off, or a statement could be
//! bound on a server connection where another client prepared another one
//! under the same name. They follow `wake_ups` by default (the setting a
//! transaction-mode pooler needs already), and `prepared=on|off` in the URL
//! ([`PostgresBackendBuilder::prepared`]) says it outright; off, each
//! statement is sent as an unnamed statement with typed parameters
//! (`query_typed`), still one round trip.
//!
//! # Unlogged table
//! `unlogged=on` ([`PostgresBackendBuilder::unlogged`]) creates the table
//! `UNLOGGED`: PostgreSQL writes none of its changes to the WAL, so a
//! grant commits without waiting for a disk flush, which a logged table's
//! grant must (it is durable before it is answered). What PostgreSQL does
//! with such a table, and what leasehold makes of it:
//!
//! * A clean shutdown (`smart` or `fast`) writes it out; after the restart
//!   it is as it was, and holders keep their leases.
//! * After a crash (anything that ends the server without a shutdown
//!   checkpoint: power loss, the postmaster killed, an `immediate`
//!   shutdown), crash recovery empties it, whole: every row, the epoch row
//!   with them. A promoted standby and a restored base backup (PITR) have it
//!   empty too, as it is never replicated or archived. Nothing of it comes
//!   back partly, so an empty table is the only state other than the one
//!   last committed.
//! * An empty table is a lost store, handled as a dropped one: every
//!   holder's next renewal finds no row and no epoch row, a definitive
//!   loss; the next acquirer starts a new epoch, whose first tokens lie
//!   above every earlier one; grants wait the quarantine (one
//!   [confirmation window](leasehold::CONFIRMATION_WINDOW), 60 s).
//! * `pg_dump` includes its rows; a restored dump is detected as with a
//!   logged table (its OID and the cluster's system identifier).
//!
//! Measured on loopback with the server's `fsync=on` (docs/benchmarks.md,
//! section 10): 5147 uncontended cycles a second against 1567 with a
//! logged table (3.3×; 0.56× PostgreSQL's own advisory lock against
//! 0.19×), other-process handoff p50 1.21 ms against 1.57 ms.
//!
//! So the guarantees are the same as with a logged table, and one gap is
//! closed (PITR and asynchronous failover, not detected with a logged
//! table, leave an unlogged one empty, which is detected); the price is
//! that every server crash and every failover is a store loss: every
//! holder is told its lease is lost, and nothing is granted for 60 s. Test:
//! `unlogged_table_survives_a_restart_and_a_crash_is_a_store_loss`
//! (`tests/restart.rs`: a fast restart keeps the holder's lease; an
//! immediate shutdown, then the conformance store-loss test's checks; with
//! a logged table that test fails, as the crash keeps the data).
//!
//! The setting is the table's: `unlogged=on` makes a new table UNLOGGED
//! and refuses to open a logged one (the message names the `ALTER TABLE
//! … SET UNLOGGED` that converts it), `unlogged=off` the other way round,
//! and without the parameter a new table is logged and an existing one is
//! used as it is (checking costs one more statement at opening, made only
//! when the parameter is given).
//!
//! # Why tokio-postgres and deadpool-postgres
//! tokio-postgres is the maintained async PostgreSQL client that the others
//! (deadpool, bb8, sqlx's peers) build on; its `query_typed` sends an
//! unnamed statement with typed parameters in one round trip, which is what
//! a transaction-mode pooler needs (named prepared statements are session
//! state), and it prepares and caches named ones where the connection is
//! a session of its own. It speaks
//! LISTEN/NOTIFY on the same connection type. deadpool-postgres is a small
//! pool around it: a connection per concurrent operation (so a statement
//! waiting on a row lock never delays another key's renewal), dead
//! connections dropped on recycle. sqlx would bring a second async stack,
//! macros and a much larger build for the same few statements.
//!
//! # TTL range
//! 1 s to the table's max TTL (at most 24 h).

#![warn(missing_docs)]

mod backend;
mod builder;
mod epoch;
mod error;
mod listen;
mod record;
mod statements;
mod tls;

use std::time::Duration;

pub use backend::PostgresBackend;
pub use builder::{PostgresBackendBuilder, DEFAULT_TABLE};
pub use tls::SslMode;

/// Re-exported for building a client configuration in code.
pub use tokio_postgres;

/// Shortest TTL (and store max TTL) this backend accepts.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longest store max TTL this backend accepts.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
