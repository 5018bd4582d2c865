//! DynamoDB backend for [leasehold]: leases that stay safe when
//! clocks disagree, with fencing tokens that never go back.
//!
//! ```no_run
//! use std::time::{Duration, SystemTime};
//! use leasehold::{LockOptions, Store};
//! use leasehold_dynamodb::DynamoDbBackend;
//!
//! # async fn f() -> leasehold::Result<()> {
//! // Credentials come from the standard AWS chain; the table is created if missing.
//! let backend = DynamoDbBackend::from_url("dynamodb://locks?region=eu-west-1").await?;
//! let store = Store::new(backend);
//! let lock = store.lock_with("import-A", LockOptions::new().ttl(Duration::from_secs(30)))?;
//! let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
//! // … work, handing guard.fencing_token() to the protected resource …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Store URL
//! `dynamodb://TABLE?region=REGION&endpoint=URL&profile=NAME&max_clock_skew=DURATION&max_ttl=DURATION&create_table=true|false`,
//! every parameter optional: `region` (else `AWS_REGION` or the profile's),
//! `endpoint` for an emulator such as DynamoDB Local
//! (`http://127.0.0.1:8000`), `profile` for an AWS profile,
//! `max_clock_skew` (such as `2s`) to opt into [`TakeoverMode::TrustClocks`],
//! `max_ttl` (such as `5m`) for the max TTL a table created now records
//! (see [Store epoch and quarantine](#store-epoch-and-quarantine)),
//! `create_table=false` to refuse creating a missing table. Credentials come
//! from aws-config's standard chain: environment, profile files, web
//! identity, ECS and EC2 instance metadata. See [`DynamoDbBackend::builder`]
//! for the same in code.
//!
//! # Table
//! One item per key, in a table with a single string partition key:
//!
//! | attribute     | type | meaning |
//! |---------------|------|---------|
//! | `lease_key`   | S    | partition key: the lock key |
//! | `fence`       | N    | last fencing token issued for the key; only ever grows |
//! | `rvn`         | S    | record version number: a fresh random UUID on every write by the key's holder or a grant |
//! | `lease_id`    | S    | the current lease; absent when the key is free |
//! | `owner_host`, `owner_pid`, `owner_label`, `data` | S, N, S, S | who holds it and their data |
//! | `ttl_ms`      | N    | the holder's lease duration |
//! | `acquired_ms`, `expires_ms` | N | the holder's wall clock at acquisition, and at its last grant or renewal plus `ttl_ms` (Unix ms) |
//! | `released_by` | S    | lease id of the release that freed the key (recognises a retried release) |
//! | `epoch`       | N    | the store epoch the item was last granted in |
//! | `last_success`, `last_run` | S | the key's [run records](leasehold::backend#run-records) (`RunRecord` JSON); kept through releases, expiries and breaks |
//! | `last_run_token` | N | the fencing token of `last_run` |
//!
//! One more item, with key `#leasehold-epoch` (not a leasehold key), is the
//! table's *epoch marker*: attributes `epoch` and `max_ttl_ms`, and
//! `protocol`, the store's [protocol version](leasehold::backend::protocol)
//! (missing on a marker of a build from before versions were recorded:
//! protocol 1). Opening reads the marker before writing anything (the table
//! is created only where it is missing) and refuses a newer protocol with
//! [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol);
//! so does every later read of it (a new epoch learnt). The marker is
//! written once, with the table: a store moves to another protocol only
//! with a new table, a new epoch.
//!
//! A missing table is created (on-demand billing, wait until ACTIVE); an
//! existing one is checked and never altered. Processes that create it at
//! once all succeed: the losers' `CreateTable` answers
//! `ResourceInUseException` and they wait for ACTIVE like the winner; the
//! epoch is the table's creation time, the same for all, and its marker is
//! written with `attribute_not_exists`, so one write wins and the others
//! read it (test: leasehold-cli's `tests/concurrent_open.rs`, ten processes
//! on five new tables). A global table (replicas in
//! other regions) is refused: DynamoDB resolves concurrent writes in two
//! regions by "last writer wins", so two regions could each grant the same
//! lease and a fencing counter could go back. Items never expire (no
//! DynamoDB TTL): an expired item would take its fencing counter with it,
//! and deciding when that is safe would trust some holder's clock.
//!
//! # Store epoch and quarantine
//! The table's epoch (see
//! [store epochs](leasehold::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data))
//! is its `CreationDateTime`, on DynamoDB's clock, in seconds since
//! 2024-01-01: a table deleted and re-created has a later one (unless both
//! creations fall in one second: see below). Its age is the
//! `Date` of the `DescribeTable` response (DynamoDB's clock again, whole
//! seconds, so the age is at most a second short) minus that creation time,
//! so a process that opens a table older than one
//! [confirmation window](leasehold::CONFIRMATION_WINDOW) (60 s) grants at once,
//! and a new or re-created table is
//! quarantined for one window, whatever max TTL the lost table or the new
//! one records ([`max_ttl`](DynamoDbBackendBuilder::max_ttl), recorded in
//! the marker, bounds the new table's leases only; test
//! `store_loss_quarantine_outlasts_a_longer_holder`, `tests/backend.rs`).
//! Nothing is granted in a table until its creation second is over on
//! DynamoDB's clock (a response `Date` after it, or as long after a
//! response as the second had left): a table deleted and created again
//! after a grant has a later epoch, so greater tokens (test
//! `store_recreated_at_once_issues_greater_tokens`; a wait of up to a
//! second, only ever seen for a proven epoch, as any other is quarantined
//! far longer).
//!
//! * Every grant on an existing item is conditional on `epoch` being the
//!   epoch the request names (or absent: an item from before epochs, in the
//!   same table); an item of another epoch makes the backend read the
//!   table's epoch again.
//! * A key's first item is created in a `TransactWriteItems` with a
//!   `ConditionCheck` that the marker still names the epoch, and gets the
//!   epoch's first token (`epoch << 22` + 1): an item can never be created in
//!   a re-created table with the old table's epoch.
//! * A request that finds the table gone (`ResourceNotFoundException`) makes
//!   the backend re-create it (unless `create_table=false`) and read its new
//!   epoch; a renewal or release that finds it gone is a definitive loss;
//!   a read (`inspect`, `list`) finds nothing stored, as after any loss of
//!   the data (a reader-writer lock's gate relies on reads going on: it
//!   then finds its own grant gone and starts over).
//! * Two incarnations of a table created within the same second would share
//!   an epoch: hence no grant until that second is over (above).
//!
//! **Proven epochs, and looking without writing.** An epoch is settled at
//! once, in every process, when its creator states that no store existed
//! there before (`leasehold init --new`): the marker item written by a
//! backend built with `Creation::NewProven` carries `proven = true`; it is
//! reported as [`StoreEpoch::proven`](leasehold::backend::StoreEpoch::proven). A
//! backend built with `Creation::Never` (`leasehold list`, `status`,
//! `leader`) writes nothing: a missing table is `Error::NoStore`, and a
//! missing marker item is not written. Test: leasehold-cli's
//! `tests/init_and_look.rs`.
//!
//! # Protocol
//! Every write is one `UpdateItem` whose condition is what the writer last
//! saw or expects (or several such writes in one `TransactWriteItems`: a
//! key's first grant, and several keys at once, below); nothing is ever
//! put or deleted blindly, and items are never deleted by leasehold.
//!
//! * **Acquire** (in the epoch the request names, see below) sets
//!   `fence = fence + 1`, a new `rvn` and our lease, on
//!   condition `attribute_not_exists(lease_id)` (the key is free or has no
//!   item) `OR rvn = :observed` (a takeover, see below), and in the clock-trusting mode
//!   `OR expires_ms < :now - max_skew`; it returns `ALL_NEW` for
//!   the token. On a failed condition the same response carries the item
//!   (`ReturnValuesOnConditionCheckFailure = ALL_OLD`): it names the
//!   holder, so a failed try-acquire costs exactly one request. If that
//!   holder is our own lease id (a retry after an ambiguous failure, the
//!   SDK's or the caller's), the lease is extended on condition `lease_id =
//!   ours` and the *same* token is answered.
//! * **Several keys at once** (a multi-key lock's first attempt,
//!   [`Backend::try_acquire_all`](leasehold::backend::Backend::try_acquire_all)):
//!   one `TransactWriteItems` holding, per key, the acquire's own write
//!   with its own condition, plus `fence = :last` and `SET fence = :last +
//!   1`: a transaction answers no values, so the token is fixed before the
//!   send from the fence this backend last saw for the key (its own grants,
//!   and every item a refused write answered). A key seen nowhere yet is
//!   written as a first grant (`attribute_not_exists`, with the marker's
//!   `ConditionCheck`); a key already held by the request's own lease id
//!   (a retry) is extended on `lease_id = ours` and answers its stored
//!   token. A cancelled transaction wrote nothing; each refused write
//!   answers its item (`ReturnValuesOnConditionCheckFailure = ALL_OLD`): a
//!   live holder (its version noted, as for one key) ends the batch, naming
//!   it; a stale fence or a missing item is sent again with what was learnt,
//!   a few rounds at most, then the keys go one by one. Each grant is
//!   therefore the one-key grant's write, under the one-key grant's
//!   condition (and one more), so the arguments below hold key by key.
//!   Tests: the conformance suite's `batch_*`; `tests/batch.rs`
//!   (`batch_learns_a_fence_another_process_moved`: a stale fence costs a
//!   round and the token is still one above the other process's;
//!   `batch_takes_over_only_after_watching_the_holder_for_its_ttl`: a
//!   renewal seen meanwhile voids the takeover).
//!   Cost: one request for keys whose fences this process knows, one more
//!   where it does not; twice the write units of single writes, the
//!   transactions' price.
//! * **Renew** sets a new `rvn` and `expires_ms` on condition `lease_id =
//!   ours`; a failed condition is a definitive loss
//!   ([`leasehold::Error::LeaseLost`]).
//! * **Release** removes the lease attributes and sets `released_by = ours`
//!   and a new `rvn`, on condition `lease_id = ours`. When the condition
//!   fails, the returned item tells whether it failed because our own first
//!   attempt already went through (`released_by = ours`, a success) or
//!   because the lease is not ours ([`leasehold::Error::LeaseLost`]).
//! * **Break** removes the lease attributes on condition
//!   `attribute_exists(lease_id)`, returning the old item to say whom it
//!   ended. The fence stays.
//! * **Record a run** ([run records](leasehold::backend#run-records)) sets
//!   `last_run`, `last_run_token`, a new `rvn` and, for a success,
//!   `last_success`, on condition `lease_id = ours` (the release's). When
//!   that fails, a run that did not succeed is still stored as `last_run` on
//!   condition `attribute_exists(fence) AND (attribute_not_exists(last_run_token)
//!   OR last_run_token < ours)`, leaving `rvn` alone (it is no sign of life
//!   of the current holder). DynamoDB gives no clock of its own to a write,
//!   so the times are the writer's wall clock: the once-per-period test is
//!   off by the skew between the writer's and the reader's clocks.
//! * **Inspect** is a strongly consistent `GetItem`. **List** is a strongly
//!   consistent `Scan` filtered with `begins_with(lease_key, :prefix)`, sorted
//!   here: it reads (and is billed for) the whole table whatever the prefix,
//!   about one read unit per 4 KB scanned, so it is an operator's tool, not
//!   something to call in a loop on a big table.
//!
//! An ambiguous outcome (a timeout after the request was sent) is never
//! guessed at: the retried conditional write fails or succeeds on what is
//! stored, and the item returned with a failed condition says whether the
//! earlier attempt took effect.
//!
//! # Clocks: when a waiter may take over
//! In the default [`TakeoverMode::Observe`] no clock is compared with
//! another machine's, as in awslabs' record-version-number lock client.
//! Each failed acquire tells the waiter the holder's `rvn` and `ttl_ms`; the
//! waiter notes, on its own monotonic [`Clock`](leasehold::backend::Clock), when it
//! first saw that `rvn` (taken when the answer *arrived*, which is after the
//! holder sent the write). Only once it has seen the same `rvn` for the
//! holder's whole TTL, plus 0.1 % for clock-rate differences, plus a margin
//! ([`takeover_margin`](DynamoDbBackendBuilder::takeover_margin), 200 ms by
//! default), does it send the takeover, conditional on that `rvn`. A live
//! holder renews well within its TTL, which changes the `rvn` and voids the
//! takeover; a holder that could not renew in time has already stopped by
//! its own clock (leasehold's guard stops before its TTL runs out). Clocks
//! may be set to any time: only their *rates* matter. The cost: after a
//! holder dies, a waiter that only starts watching then waits a whole TTL
//! more, so recovery takes up to two TTLs
//! ([`Capabilities::takeover_needs_observation`](leasehold::backend::Capabilities)).
//!
//! [`TakeoverMode::TrustClocks`] additionally lets a waiter take over once
//! its wall clock is past the stored `expires_ms` plus a stated maximum skew
//! between any two machines' wall clocks. Faster, and safe only while that
//! bound really holds.
//!
//! # Fencing tokens
//! `fence` is raised by one in the same conditional write that grants a
//! lease, and items are only ever marked free, never deleted, so tokens per
//! key never repeat or go back; a key's first token in an epoch is the
//! epoch's base + 1, above every token of an earlier table.
//!
//! # TTL range
//! 1 second to 24 hours. Below a second, request latency to DynamoDB (tens
//! of milliseconds, more on a retry) becomes a real share of the lease.
//!
//! # IAM permissions (least privilege)
//! On `arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE`:
//! `dynamodb:DescribeTable`, `dynamodb:GetItem`, `dynamodb:UpdateItem`,
//! `dynamodb:Scan` (only for `list`), `dynamodb:PutItem` (the epoch marker,
//! once per table) and `dynamodb:ConditionCheckItem` (a key's first grant,
//! in `TransactWriteItems`), plus `dynamodb:CreateTable` only if leasehold is
//! to create the table. `DeleteItem` is never used.
//!
//! ```json
//! {"Version": "2012-10-17", "Statement": [{
//!   "Effect": "Allow",
//!   "Action": ["dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan",
//!              "dynamodb:PutItem", "dynamodb:ConditionCheckItem"],
//!   "Resource": "arn:aws:dynamodb:eu-west-1:123456789012:table/locks"
//! }]}
//! ```
//!
//! # Cargo features
//! * `https` (default): the SDK's HTTPS client (hyper and rustls), with
//!   rustls on *ring* rather than the SDK's default aws-lc (a C library
//!   that adds about a minute to every clean build). Without it, pass an
//!   [`aws_config::SdkConfig`] carrying an HTTP client to
//!   [`DynamoDbBackendBuilder::sdk_config`].
//! * `sso`, `credentials-process`: those entries of AWS profiles.

#![warn(missing_docs)]

mod acquire;
mod backend;
mod batch;
mod builder;
mod epoch;
mod error;
mod record;
mod runs;
mod table;
mod url;
mod write;

use std::time::Duration;

pub use backend::DynamoDbBackend;
pub use builder::DynamoDbBackendBuilder;

/// Re-exported for building credentials providers and SDK configurations.
pub use aws_config;
/// Re-exported for building credentials providers and SDK configurations.
pub use aws_sdk_dynamodb;

#[doc(inline)]
pub use leasehold_aws::WallClock;

/// Shortest TTL this backend accepts.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longest TTL this backend accepts.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// How a waiter decides that a lease it finds held may be taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TakeoverMode {
    /// Only after watching the holder's record version stay unchanged for
    /// the holder's whole TTL on the waiter's own monotonic clock (plus a
    /// margin). Trusts no clock against another; recovering a dead holder's
    /// lease takes up to two TTLs.
    #[default]
    Observe,
    /// Also as soon as the waiter's wall clock is past the holder's stored
    /// expiry plus `max_skew`. Safe only if no two machines' wall clocks
    /// ever differ by more than `max_skew`.
    TrustClocks {
        /// The largest difference between two machines' wall clocks.
        max_skew: Duration,
    },
}
