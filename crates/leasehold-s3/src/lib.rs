//! S3 backend for [leasehold]: leases kept in a bucket with S3's
//! conditional writes (`If-None-Match: *`, `If-Match`), safe when clocks
//! disagree, with fencing tokens that never go back. No table, no other
//! service: a bucket (or a prefix in one) is the store.
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{LockOptions, Store};
//! use leasehold_s3::S3Backend;
//!
//! # async fn f() -> leasehold::Result<()> {
//! // Credentials come from the standard AWS chain; the bucket is created if missing.
//! let backend = S3Backend::from_url("s3://my-locks/jobs?region=eu-west-1").await?;
//! let store = Store::new(backend);
//! let lock = store.lock_with("import-A", LockOptions::new().ttl(Duration::from_secs(30)))?;
//! let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
//! // … work, handing guard.fencing_token() to the protected resource …
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Store URL
//! `s3://BUCKET[/PREFIX]?region=REGION&endpoint=URL&profile=NAME&max_ttl=DURATION&create_bucket=true|false`,
//! every parameter optional: `PREFIX` (a key-shaped path) keeps the store
//! under that prefix, a store of its own; `region` (else `AWS_REGION` or
//! the profile's); `endpoint` for an emulator or an S3-compatible service
//! (path-style requests); `profile` for an AWS profile; `max_ttl` for the
//! max TTL a store started now records; `create_bucket=false` to refuse
//! creating a missing bucket. Credentials come from aws-config's standard
//! chain. See [`S3Backend::builder`] for the same in code.
//!
//! # Objects
//! One object per key, `PREFIX/KEY` (a `.` that ends a path segment is
//! written `~2E`, see [`leasehold::backend::names`]), holding one JSON
//! record: the last fencing token (`fence`), the epoch the key was last
//! granted in, the lease (id, owner, data, TTL, and the holder's wall-clock
//! times, for display only), `released_by`, the key's
//! [run records](leasehold::backend#run-records), and a `nonce`: fresh
//! random bytes in every write. One more object, `PREFIX/!leasehold-epoch`,
//! is the store's *epoch marker* (its [protocol version](leasehold::backend::protocol)
//! in `"protocol"`, missing on a marker of a build from before versions
//! were recorded: protocol 1, checked first at every read of the marker,
//! before anything is written, a newer one refused with
//! [`Error::UnsupportedProtocol`](leasehold::Error::UnsupportedProtocol);
//! its max TTL, and whether its epoch is
//! proven). leasehold never deletes a key's object.
//!
//! # Protocol
//! S3 has no server-side expiry and no clock a client may compare with its
//! own: the protocol is clock-free, as the DynamoDB store's default. Every
//! write replaces a whole object on a condition: `If-None-Match: *` (there
//! is no object) or `If-Match: ETAG` (the object is the version we read or
//! wrote). S3 serialises conditional writes on one object and is strongly
//! consistent (a read after a successful write sees it), so of two writers
//! holding the same ETag, exactly one succeeds; the other gets 412 (or 409
//! `ConditionalRequestConflict` while the first is in flight), reads again
//! and decides on what is there.
//!
//! * **ETags and the nonce.** The ETag of a plain upload is the MD5 of its
//!   bytes: two writes of the same bytes have the same ETag, and a
//!   condition on an old ETag would match a later write (ABA: a waiter that
//!   watched a holder's record would take a renewed lease for a dead one).
//!   Every write carries a fresh nonce, so no two of leasehold's writes
//!   have the same bytes. Test `renewals_change_the_etag_even_with_a_frozen_wall_clock`
//!   (`tests/s3.rs`): with the nonce taken out, a waiter takes over a live
//!   holder.
//! * **Acquire** reads the key's object and writes the granted record
//!   (`fence` + 1 in the request's epoch, our lease) `If-Match` its ETag.
//!   A free key is granted at once. A held one is *observed*: the waiter
//!   notes, on its own monotonic clock, when it first saw that ETag
//!   (after the answer arrived, so after the holder's write), and only once
//!   it has seen the same ETag for the holder's whole TTL, plus 0.1 % for
//!   clock rates, plus a margin (200 ms), does it write `If-Match` that
//!   ETag. A live holder rewrites its record within its TTL, which changes
//!   the ETag and voids the takeover; a holder that could not has been
//!   told its lease is lost by its own clock first (below). So recovering
//!   a dead holder's key takes up to two TTLs
//!   ([`Capabilities::takeover_needs_observation`](leasehold::backend::Capabilities)).
//!   A record already held by the request's own lease id (a retry after an
//!   ambiguous failure) is extended with the same token.
//! * **A key's first object** is written with `If-None-Match: *`. Its
//!   fence starts above the second S3 said "no such key" in: the first
//!   token is `next_token(C << 22, epoch)` where `C` is that answer's
//!   `Date` in seconds since 2024, and the write is sent only once that
//!   second is over (1.011 s after the answer arrived). An object of that
//!   name deleted earlier (by hand, or by a deletion of the store that has
//!   not reached the marker yet) was written before the deletion, which
//!   was before the 404, and its own tokens started at a second *before*
//!   its first write: so every token of the new object is greater than
//!   every token of every earlier object of that name. The cost: a key's
//!   first grant in a store waits about a second.
//! * **Renew** rewrites the record (new expiry, new nonce) `If-Match` the
//!   ETag of our last write, then reads the epoch marker: a renewal stands
//!   only if the marker, read after the write, still names the lease's
//!   epoch (see "Holders of lost data" below). **Release** writes it free, keeping `fence`
//!   and setting `released_by`. A refused condition makes the holder read
//!   the record: still our lease (our earlier write went through but its
//!   answer was lost) → write again on the new ETag; freed by us
//!   (`released_by`) → a release already done; anything else, or no
//!   object, or no bucket → [`Error::LeaseLost`](leasehold::Error::LeaseLost).
//! * **Break** reads and writes the record free `If-Match` its ETag.
//! * **Record a run** rewrites the holder's record with the run
//!   `If-Match`. When the lease is gone, a run that did not succeed is
//!   stored as the last run only if the key is free (writing a record held
//!   by another would change its ETag, a false sign of its holder's life).
//!   The times are the writer's wall clock.
//! * **Inspect** is one `GetObject`; **list** is `ListObjectsV2` under the
//!   prefix and a `GetObject` per key (an operator's tool).
//!
//! **Why a holder stops before anyone else takes over.** A holder's
//! guard trusts its lease until the *send* time of its last successful
//! write plus its TTL, less a safety margin, on its own clock (the
//! engine's rule for every store). A waiter takes over only after seeing
//! one ETag for a whole TTL (+0.1 % + 200 ms) on its clock, counted from
//! *after* that write's answer reached it, so from after the holder's
//! send. Only clock *rates* matter, and the 0.1 % covers them: by the
//! time the takeover is sent, the holder's deadline has passed.
//!
//! # Requests
//! The backend remembers its own last write to each key (ETag and record).
//!
//! | case | requests |
//! |---|---:|
//! | warm: this process released the key last | 2 to acquire (write, marker), 1 to release |
//! | cold: the key was last written by another process | 3 to acquire (read, write, marker), 1 to release |
//! | a key's first grant | 3 (read, create, marker), after a 1 s wait |
//! | attempt on a held key | 1 |
//! | renewal | 2 (write, marker) |
//!
//! The marker read of a warm grant is what a restored copy of the store
//! costs: the restored object has the bytes, so the ETag, of this
//! process's last write, and only the marker (written again by the
//! restore, so a new epoch) tells the two apart (test
//! `a_restored_copy_repeats_no_token_for_a_process_that_wrote_it`).
//!
//! # Store epoch and quarantine
//! A store (bucket and prefix) loses its data when its objects are
//! deleted: the prefix emptied, the bucket emptied and deleted (S3 deletes
//! a bucket only once it is empty, so both are a series of object
//! deletions), or replaced by a copy. The rules of
//! [store epochs](leasehold::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data)
//! hold as follows.
//!
//! * **The epoch** is the marker's `Last-Modified` (S3's clock, whole
//!   seconds since 2024-01-01). leasehold writes the marker only after S3
//!   answered that there is none, a second past that answer, with
//!   `If-None-Match: *` (one writer wins), and writes it again if its
//!   `Last-Modified` is not in a later second than that answer's `Date`: any
//!   earlier marker here was written before it was deleted, before that
//!   404, so every new epoch is later than every earlier one. A copy of
//!   the store put back (a restored backup) rewrites the marker, so it is
//!   a new epoch too.
//! * **Records carry their epoch**, and a grant's token is
//!   `next_token(fence, epoch)`: in a new epoch every key starts above
//!   `epoch << 22`, above every token of the lost data.
//! * **A grant lands only in its epoch.** After every grant the marker is
//!   read; unless it still names the grant's epoch, the grant is undone
//!   (the key written free, its fence kept) and the new epoch is read (and
//!   started, if the marker is gone). This holds for a grant on this
//!   process's own last write too: its `If-Match` proves that no other
//!   process wrote the object since, but a copy of the store restored over
//!   it has the very bytes, so the ETag, it wrote.
//! * **Holders of lost data are told at their next renewal**: their
//!   `If-Match` finds no object (404), another record (412), or no bucket;
//!   or, where their own object is not deleted yet, the marker read after
//!   the renewal finds no marker or another epoch. Each is a definitive
//!   loss. So a renewal extends a holder's trust only if the marker was
//!   still there *after* the renewal's write: a deletion of the store that
//!   begins with the marker (below) began after every write a holder still
//!   trusts, which is what the quarantine's argument needs (test
//!   `a_holder_is_told_of_loss_once_the_epoch_marker_is_gone`).
//! * **Quarantine.** A process grants nothing in an epoch new to it until
//!   one [confirmation window](leasehold::CONFIRMATION_WINDOW) (60 s, +0.1 %)
//!   has passed since it first saw it, less the marker's age (the `Date`
//!   of a read of the marker less its `Last-Modified`, less a second). A
//!   holder of the lost data wrote last before the loss, so its guard
//!   stops at most one window after the loss. A store older than a window
//!   costs no wait.
//! * **Proven epochs, and looking without writing.** A marker written by a
//!   backend built with `Creation::NewProven` (`leasehold init --new`)
//!   says its epoch is proven: settled at once in every process, unless
//!   objects are left under the prefix (a store being deleted, or
//!   restored, whose holders may still run): then the statement is not
//!   taken, and the new epoch is quarantined as any other (test
//!   `a_new_store_over_left_objects_is_not_settled_at_once`). A backend
//!   built with `Creation::Never` (`leasehold list`, `status`, `leader`)
//!   writes nothing and creates no bucket: a missing bucket or marker is
//!   `Error::NoStore`.
//!
//! What this trusts: S3's strong read-after-write consistency and its
//! serialised conditional writes; that `Date` and `Last-Modified` come from
//! one clock that does not go back by a second.
//!
//! Not covered, and said plainly: S3 deletes and restores objects one by
//! one, and two orders are not covered.
//!
//! * **A key's object gone while the marker is not** (one object deleted
//!   by hand, a deletion that does not begin with the marker, a lifecycle
//!   rule, or the tail of a deletion that began before a new epoch was
//!   started and cleared). A process that asks for that key is granted it
//!   at once, while the deleted object's holder may run on until its next
//!   renewal fails, or its deadline (its TTL, at most the confirmation
//!   window, after its last renewal) if it cannot reach S3. **Its tokens
//!   stay greater** (a key's first object, above; test
//!   `a_key_deleted_by_hand_still_gets_greater_tokens`), so a resource that
//!   checks fencing tokens rejects the old holder, but the two overlap in
//!   time. The marker sorts before every key's object, so a deletion in
//!   listing order (a recursive `aws s3 rm`, emptying a bucket in the
//!   console, [`S3Backend::delete_store`]) removes it first; delete a
//!   store's marker first when deleting by hand, and let a deletion end
//!   before the store is used again.
//! * **A copy restored in place with key objects before the marker.** A
//!   grant on a restored record is then in the old epoch, above the
//!   record's fence as the backup had it: **tokens can repeat** ones issued
//!   after the backup. Restore the marker first (it gets a new
//!   `Last-Modified`, so a new epoch, above every earlier token), or delete
//!   the store's objects first and restore into an empty prefix.
//!
//! Two stores must not overlap: store `a` with key `b/x` and store `a/b`
//! with key `x` are the same object. Give stores prefixes that are not
//! prefixes of one another.
//!
//! # S3-compatible services
//! Checked: Amazon S3's documented semantics, and moto 5 (the test
//! suite's emulator). Not tested: Cloudflare R2, MinIO, Ceph RGW and
//! others that accept the same headers; a service that ignores `If-Match`
//! or `If-None-Match` on `PutObject` breaks every guarantee here.
//!
//! # TTL range
//! 4 seconds to 24 hours: a key's first grant waits a second before its
//! write, and then writes and reads the marker, all within the lease's
//! safety deadline (its TTL less the grace), which a shorter lease would
//! miss whenever S3 (or an emulator) is slow.
//!
//! # IAM permissions (least privilege)
//! `s3:GetObject` and `s3:PutObject` on `arn:aws:s3:::BUCKET/PREFIX*`,
//! `s3:ListBucket` on `arn:aws:s3:::BUCKET` (opening, and `list`), and
//! `s3:DeleteObject` on the marker only if it must be written again (see
//! above); `s3:CreateBucket` only if leasehold is to create the bucket.
//!
//! # Cargo features
//! * `https` (default): the SDK's HTTPS client with rustls on *ring*, as
//!   the DynamoDB store (leasehold-aws).
//! * `sso`, `credentials-process`: those entries of AWS profiles.

#![warn(missing_docs)]

mod backend;
mod builder;
mod epoch;
mod error;
mod record;
mod url;

use std::time::Duration;

#[doc(hidden)]
pub use backend::object_names;
pub use backend::S3Backend;
pub use builder::S3BackendBuilder;

/// Re-exported for building credentials providers and SDK configurations.
pub use aws_config;
/// Re-exported for building credentials providers and SDK configurations.
pub use aws_sdk_s3;

#[doc(inline)]
pub use leasehold_aws::WallClock;

/// Shortest TTL this backend accepts.
pub const MIN_TTL: Duration = Duration::from_secs(4);
/// Longest TTL this backend accepts.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
