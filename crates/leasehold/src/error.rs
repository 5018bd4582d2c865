//! The one public error type.

use std::time::Duration;

use crate::backend::HolderInfo;

/// Result alias used throughout leasehold.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Boxed error used as the source of a backend failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong with a lease, in a form callers can match.
///
/// Backends map their own errors into this enum in one place each; the
/// variants say what happened, not which backend it happened on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is held by somebody else. `holder` describes them when the
    /// backend could tell (a backend may know a lease exists but not whose).
    ///
    /// The message says when the holder is this very process (another
    /// [`Lock`](crate::Lock) or guard of it, such as an earlier guard still
    /// held: see [`Owner::is_this_process`](crate::Owner::is_this_process)),
    /// and when a writer of a [`RwLock`](crate::RwLock) was kept out by
    /// readers (`readers` of them, `holder` one of them), not by one
    /// exclusive holder.
    #[error("{}", describe_held(key, holder.as_deref(), *readers))]
    Held {
        /// The key that was asked for.
        key: String,
        /// Who holds it, as far as the backend knows (with `readers` above
        /// zero, one of the readers).
        holder: Option<Box<HolderInfo>>,
        /// How many readers of a reader-writer lock hold it, when readers
        /// are what kept a writer out; 0 otherwise (an exclusive holder, a
        /// writer, or a full semaphore).
        readers: u32,
    },

    /// The [`Store`](crate::Store) was closed with
    /// [`Store::close`](crate::Store::close): it takes, inspects and
    /// breaks nothing any more (guards taken before keep their leases until
    /// released or dropped). Open the store again to go on.
    #[error("the store was closed (Store::close); open it again to use it")]
    Closed,

    /// Waiting for the key took longer than the caller allowed.
    #[error("timed out after {waited:?} waiting for {key}")]
    TimedOut {
        /// The key that was waited for.
        key: String,
        /// How long was waited.
        waited: Duration,
    },

    /// The lease is no longer ours: it expired before it could be renewed,
    /// was broken, or was taken over by someone else.
    #[error("lease on {key} lost: {reason}")]
    LeaseLost {
        /// The key whose lease was lost.
        key: String,
        /// Why the lease counts as lost.
        reason: LossReason,
    },

    /// The store's data is new to this process (a new store epoch: created,
    /// or re-created after its data was lost) and no lease is granted in it
    /// until holders of the old data have certainly stopped; see
    /// [store epochs](crate::backend#store-epochs-tokens-that-survive-the-loss-of-the-stores-data).
    /// Waiting acquisitions wait it out; it is retryable.
    #[error("{key}: the store's data is new to this process (epoch {epoch}); no lease is granted for another {remaining:?}, until holders of any lost data have stopped (quarantine)")]
    Quarantined {
        /// The key that was asked for.
        key: String,
        /// The new store epoch.
        epoch: u64,
        /// How long the quarantine lasts from now, on this process's clock.
        remaining: Duration,
    },

    /// The caller passed something leasehold cannot accept (a bad key, TTL,
    /// store URL, size). The message says what is allowed.
    #[error("invalid {what}: {message}")]
    InvalidInput {
        /// What was invalid ("key", "ttl", "store URL", ...).
        what: &'static str,
        /// What is wrong and what is allowed.
        message: String,
    },

    /// The requested feature or store is not available in this build.
    #[error("{0}")]
    NotSupported(String),

    /// There is no store where the URL points (no file, table or
    /// container, no epoch marker under the prefix), and the backend was
    /// opened not to create one ([`Creation::Never`](crate::Creation::Never):
    /// looking never creates or changes anything). `what` says what is
    /// missing.
    #[error("no leasehold store there: {what}")]
    NoStore {
        /// What is missing ("table leasehold_leases does not exist", ...).
        what: String,
    },

    /// The store was written by a leasehold **protocol** this build does
    /// not speak (a newer release's): its epoch marker names protocol
    /// `found`, and this build speaks protocols up to `supported`
    /// ([`PROTOCOL`](crate::backend::protocol::PROTOCOL)). Nothing was
    /// granted, written or broken: the backend refuses as soon as it reads
    /// the marker, before any write. Not retryable: upgrade this process.
    /// See [protocol versions](crate::backend::protocol).
    #[error("the {backend} store is in leasehold protocol {found}, and this leasehold (version {this_version}) speaks protocol {supported} and older: it takes, changes and breaks nothing in that store; upgrade this process to a leasehold that speaks protocol {found} (docs/guarantees.md, \"Upgrading\")")]
    UnsupportedProtocol {
        /// Name of the backend ("sqlite", "redis", ...).
        backend: &'static str,
        /// The protocol the store's marker names, as stored.
        found: String,
        /// The newest protocol this build speaks.
        supported: u64,
        /// This build's version of the leasehold crate.
        this_version: &'static str,
    },

    /// The storage backend failed. `retryable` says whether trying again
    /// later can help (timeouts, throttling, 5xx) or not (bad credentials,
    /// missing permissions, corrupt data).
    #[error("{backend} backend failed during {operation}: {source}")]
    Backend {
        /// Name of the backend ("sqlite", "azblob", ...).
        backend: &'static str,
        /// The operation that failed ("acquire", "renew", ...).
        operation: &'static str,
        /// Whether a retry may succeed.
        retryable: bool,
        /// The underlying error. Never carries secrets.
        #[source]
        source: BoxError,
    },
}

/// The message of [`Error::Held`].
fn describe_held(key: &str, holder: Option<&HolderInfo>, readers: u32) -> String {
    let mine = holder.is_some_and(|h| h.owner.is_this_process());
    match (readers, holder) {
        (0, Some(h)) if mine => format!(
            "{key} is held by this process ({}): another lock or guard of this process holds it (an earlier guard not yet released or dropped?)",
            h.owner
        ),
        (0, Some(h)) => format!("{key} is held by another holder ({})", h.owner),
        (0, None) => format!("{key} is held by another holder"),
        (n, holder) => {
            let readers = if n == 1 {
                "1 reader".to_string()
            } else {
                format!("{n} readers")
            };
            let among = match holder {
                Some(h) if mine => format!(" (among them this process: {})", h.owner),
                Some(h) => format!(" (among them {})", h.owner),
                None => String::new(),
            };
            format!("{key} is held by {readers}{among}: a writer waits until every reader has released")
        }
    }
}

impl Error {
    /// Builds an [`Error::InvalidInput`].
    pub fn invalid(what: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidInput {
            what,
            message: message.into(),
        }
    }

    /// Builds an [`Error::Backend`].
    pub fn backend(
        backend: &'static str,
        operation: &'static str,
        retryable: bool,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Backend {
            backend,
            operation,
            retryable,
            source: source.into(),
        }
    }

    /// Whether trying the same operation again later may succeed.
    ///
    /// True for transient backend failures, and for [`Error::Held`],
    /// [`Error::TimedOut`] (the holder may go away) and
    /// [`Error::Quarantined`] (the quarantine ends).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Backend { retryable, .. } => *retryable,
            Error::Held { .. } | Error::TimedOut { .. } | Error::Quarantined { .. } => true,
            _ => false,
        }
    }

    /// Builds an [`Error::LeaseLost`] with [`LossReason::Revoked`]: the
    /// store says definitively that the lease on `key` is not ours, and
    /// `why`.
    pub fn revoked(key: impl std::fmt::Display, why: impl Into<String>) -> Self {
        Error::LeaseLost {
            key: key.to_string(),
            reason: LossReason::Revoked(why.into()),
        }
    }

    /// Builds an [`Error::NoStore`].
    pub fn no_store(what: impl Into<String>) -> Self {
        Error::NoStore { what: what.into() }
    }

    /// Whether this error says the lease is definitively not ours.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }
}

/// Why a lease counts as lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// No renewal succeeded before the safety deadline (last successful
    /// request's send time + TTL − safety margin). The backend may not have
    /// handed the lease to anyone yet, but it could soon.
    Expired,
    /// The backend said definitively that the lease is not ours any more
    /// (someone else holds it, it was broken, the record is gone).
    Revoked(String),
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossReason::Expired => f.write_str("no renewal succeeded before the safety deadline"),
            LossReason::Revoked(why) => write!(f, "revoked by the backend ({why})"),
        }
    }
}

/// The `Display` texts of `err` and of its sources, joined by `: `, each
/// source left out where the text so far already contains it (many errors
/// repeat their source's text in their own). For messages built from a
/// client library's error, whose `Display` alone often leaves out the cause.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{error_chain, Error};
    use crate::backend::{HolderInfo, Owner};

    fn held(owner: Owner, readers: u32) -> String {
        Error::Held {
            key: "k".into(),
            holder: Some(Box::new(HolderInfo::new(owner, 7))),
            readers,
        }
        .to_string()
    }

    #[test]
    fn held_says_when_the_holder_is_this_process() {
        let me = Owner::current();
        let text = held(me.clone(), 0);
        assert!(text.starts_with("k is held by this process ("), "{text}");
        let other = Owner {
            pid: me.pid.wrapping_add(1),
            ..me.clone()
        };
        let text = held(other.clone(), 0);
        assert_eq!(text, format!("k is held by another holder ({other})"));
        let elsewhere = Owner {
            host: format!("{}-other", me.host),
            ..me
        };
        assert!(held(elsewhere, 0).contains("another holder"));
    }

    #[test]
    fn held_by_readers_says_readers() {
        let other = Owner {
            host: "vm".into(),
            pid: 1,
            label: None,
        };
        let text = held(other.clone(), 3);
        assert!(
            text.starts_with("k is held by 3 readers (among them vm, pid 1)"),
            "{text}"
        );
        assert!(held(other, 1).starts_with("k is held by 1 reader "));
        assert!(held(Owner::current(), 2).contains("among them this process"));
    }

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn error_chain_adds_each_source_the_text_does_not_already_say() {
        let refused = E("connection refused", None);
        let connect = E("connect error", Some(Box::new(refused)));
        let err = E("dispatch failure: connect error", Some(Box::new(connect)));
        assert_eq!(
            error_chain(&err),
            "dispatch failure: connect error: connection refused"
        );
        assert_eq!(error_chain(&E("alone", None)), "alone");
    }
}
