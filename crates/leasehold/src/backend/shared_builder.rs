//! What the stores' builders and backends do alike, written once: the
//! URL's scheme, the max TTL's range, the store's recorded max TTL as
//! the backend last read it (the server stores'
//! [`capabilities`](crate::backend::Backend::capabilities)), the builder
//! methods every store has (`leasehold::store_builder_methods!`), the
//! backend methods the server stores share
//! (`leasehold::server_backend_methods!`) and `Debug` impls that show only
//! some fields (`leasehold::debug_fields!`). The three macros are
//! `#[macro_export]`ed, so they live at the crate root; they are hidden
//! there (the root is for users) and documented in this file's source.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::backend::params::QueryParams;
use crate::backend::{
    Capabilities, EpochRead, Listener, ReleaseWatch, StoreEpoch, DEFAULT_STORE_MAX_TTL,
};
use crate::clock::{SharedClock, SystemClock};
use crate::{Creation, Error, Key, Result};

/// The scheme and the rest of a store URL `SCHEME://REST` whose scheme is
/// one of `schemes`.
///
/// # Errors
/// [`Error::InvalidInput`] ("store URL", the message `form`) for any other.
pub fn split_scheme<'a>(url: &'a str, schemes: &[&str], form: &str) -> Result<(&'a str, &'a str)> {
    match url.split_once("://") {
        Some((scheme, rest)) if schemes.contains(&scheme) => Ok((scheme, rest)),
        _ => Err(Error::invalid("store URL", form)),
    }
}

/// Checks the max TTL a builder is to record against the store's range.
///
/// # Errors
/// [`Error::InvalidInput`] ("max ttl") naming the value and the range.
pub fn check_max_ttl(max_ttl: Duration, min: Duration, max: Duration) -> Result<()> {
    check_range("max ttl", max_ttl, min, max, || {
        format!("{max_ttl:?} is outside {min:?}..={max:?}")
    })
}

/// Checks that `value` (of the parameter `what`) is within `min..=max`.
///
/// # Errors
/// [`Error::InvalidInput`] (`what`, the message `message` writes).
pub fn check_range(
    what: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
    message: impl FnOnce() -> String,
) -> Result<()> {
    require(what, (min..=max).contains(&value), message)
}

/// `Ok` when `ok`, else [`Error::InvalidInput`] (`what`, the message
/// `message` writes): the end of the stores' checks of names and values.
///
/// # Errors
/// As said.
pub fn require(what: &'static str, ok: bool, message: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(what, message()))
    }
}

/// The capabilities of a store shared across processes and machines (every
/// store but memory and SQLite): leases from `min_ttl` to `max_ttl`.
pub fn shared_capabilities(min_ttl: Duration, max_ttl: Duration) -> Capabilities {
    Capabilities::new(min_ttl, max_ttl)
        .shared_across_processes(true)
        .shared_across_machines(true)
}

/// A store's recorded max TTL as the backend last read it (in ms).
#[derive(Debug)]
pub struct RecordedMaxTtl(AtomicU64);

impl RecordedMaxTtl {
    /// `max_ttl`, until the store says otherwise.
    pub fn new(max_ttl: Duration) -> Self {
        RecordedMaxTtl(AtomicU64::new(max_ttl.as_millis() as u64))
    }

    /// The max TTL as last read.
    pub fn get(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }

    /// Keeps the max TTL just read.
    pub fn set(&self, max_ttl: Duration) {
        self.0.store(max_ttl.as_millis() as u64, Ordering::Relaxed);
    }

    /// A server store's capabilities: leases from `min_ttl` to the max TTL
    /// as last read, shared across processes and machines.
    pub fn capabilities(&self, min_ttl: Duration) -> Capabilities {
        shared_capabilities(min_ttl, self.get())
    }
}

/// What every server store's builder (PostgreSQL, Redis, etcd) takes
/// alike: the max TTL a new store records, how long one request may take,
/// whether waiters hear of releases, and what opening may do.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The max TTL a store started by the backend records (default
    /// [`DEFAULT_STORE_MAX_TTL`]).
    pub max_ttl: Duration,
    /// How long one request may take (default 5 s).
    pub request_timeout: Duration,
    /// Whether waiters hear of releases (default: yes).
    pub wake_ups: bool,
    /// What opening may do (default [`Creation::IfMissing`]).
    pub creation: Creation,
    /// The monotonic clock the backend times what it relies on with (the
    /// system's, which counts a suspend, unless set; tests inject a
    /// [`ManualClock`](crate::backend::ManualClock)).
    pub clock: Option<SharedClock>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_ttl: DEFAULT_STORE_MAX_TTL,
            request_timeout: Duration::from_secs(5),
            wake_ups: true,
            creation: Creation::IfMissing,
            clock: None,
        }
    }
}

impl ServerOptions {
    /// The clock set with `clock`, or the system's.
    pub fn clock_or_system(&self) -> SharedClock {
        self.clock.clone().unwrap_or_else(SystemClock::shared)
    }

    /// Takes `max_ttl` and `wake_ups` from a store URL's parsed query.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed value.
    pub fn read_query(&mut self, query: &QueryParams) -> Result<()> {
        if let Some(max_ttl) = query.duration("max_ttl")? {
            self.max_ttl = max_ttl;
        }
        if let Some(on) = query.boolean("wake_ups")? {
            self.wake_ups = on;
        }
        Ok(())
    }
}

/// What a server store's backend keeps alike: the store's epoch as read
/// while opening (and whether opening created the store), and the listener for releases when wake-ups are on. The
/// backend's [`Backend`](crate::backend::Backend) methods that ask for them
/// are written by `leasehold::server_backend_methods!` (this file).
#[derive(Debug, Default)]
pub struct ServerCommon {
    opened: OnceLock<EpochRead>,
    created: OnceLock<bool>,
    listener: Option<Listener>,
}

impl ServerCommon {
    /// With `listener` for releases (none: waiters only poll).
    pub fn new(listener: Option<Listener>) -> Self {
        ServerCommon {
            opened: OnceLock::new(),
            created: OnceLock::new(),
            listener,
        }
    }

    /// Keeps `epoch`, read just now while opening (the first one only).
    pub fn opened(&self, epoch: StoreEpoch) {
        let _ = self.opened.set(EpochRead::now(epoch));
    }

    /// Keeps whether opening created the store (the first call only): see
    /// [`Backend::created_at_open`](crate::backend::Backend::created_at_open).
    pub fn created(&self, created: bool) {
        let _ = self.created.set(created);
    }

    /// Whether opening created the store, if the backend said.
    pub fn created_at_open(&self) -> Option<bool> {
        self.created.get().copied()
    }

    /// The epoch read while opening, its age as of now.
    pub fn epoch_at_open(&self) -> Option<StoreEpoch> {
        self.opened.get().map(EpochRead::as_of_now)
    }

    /// The listener for releases, when wake-ups are on.
    pub fn listener(&self) -> Option<&Listener> {
        self.listener.as_ref()
    }

    /// A watch for the release of `keys`, when wake-ups are on.
    pub fn watch_release(&self, keys: &[Key]) -> Option<ReleaseWatch> {
        self.listener.as_ref()?.watch(keys)
    }

    /// Waits until the listener listens (started on the first wait
    /// otherwise); at once when wake-ups are off.
    ///
    /// # Cancel safety
    /// Cancel safe: the listening goes on.
    pub async fn listening(&self) {
        if let Some(l) = &self.listener {
            l.listening().await;
        }
    }
}

/// The [`Backend`](crate::backend::Backend) methods a server store's
/// backend answers alike (`name`, and from its [`ServerCommon`]
/// `epoch_at_open`, `created_at_open` and `watch_release`), written once: expand it inside the
/// backend's `impl Backend`, giving the store's name and the field path of
/// its `ServerCommon` from `self`; with `capabilities: PATH, MIN_TTL`, also
/// `capabilities` from the [`RecordedMaxTtl`] at `PATH`
/// ([`RecordedMaxTtl::capabilities`]).
// For store authors: hidden at the crate root, where `macro_export` puts
// it (the root is for users; see the module docs).
#[doc(hidden)]
#[macro_export]
macro_rules! server_backend_methods {
    ($name:expr, $($path:ident).+, capabilities: $($recorded:ident).+, $min_ttl:expr) => {
        $crate::server_backend_methods!($name, $($path).+);

        fn capabilities(&self) -> $crate::backend::Capabilities {
            self.$($recorded).+.capabilities($min_ttl)
        }
    };
    ($name:expr, $($path:ident).+) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn epoch_at_open(&self) -> Option<$crate::backend::StoreEpoch> {
            self.$($path).+.epoch_at_open()
        }

        fn created_at_open(&self) -> Option<bool> {
            self.$($path).+.created_at_open()
        }

        fn watch_release(&self, keys: &[$crate::Key]) -> Option<$crate::backend::ReleaseWatch> {
            self.$($path).+.watch_release(keys)
        }
    };
}

/// The builder methods the stores' builders have alike, written once:
/// expand it inside the `impl` of a builder, naming the methods it has,
/// each after its own doc comment (what it means for that store), with `in
/// PATH` when the field is in a field of the builder (such as its
/// [`ServerOptions`]):
///
/// - `prefix`: `prefix(impl Into<String>)` sets the field `prefix`;
/// - `prefix_name`: `prefix_name()` returns it;
/// - `max_ttl`: `max_ttl(Duration)` sets `max_ttl` (a `Duration`, or an
///   `Option<Duration>` set to `Some`);
/// - `request_timeout`: `request_timeout(Duration)` sets `request_timeout`
///   (likewise);
/// - `wake_ups`: `wake_ups(bool)` sets `wake_ups`;
/// - `creation`: `creation(Creation)` sets `creation`.
///
/// ```ignore
/// impl MyBuilder {
///     leasehold::store_builder_methods! {
///         /// The max TTL a store started by this backend records.
///         max_ttl in options;
///         /// What opening may do to the store.
///         creation;
///     }
/// }
/// ```
// For store authors: hidden at the crate root, where `macro_export` puts
// it (the root is for users; see the module docs).
#[doc(hidden)]
#[macro_export]
macro_rules! store_builder_methods {
    (@method [$($doc:tt)*] [$($path:tt)*] prefix) => {
        $crate::store_builder_methods!(@set [$($doc)*] prefix(prefix: impl Into<String>) => $($path)* prefix = prefix.into());
    };
    (@method [$($doc:tt)*] [$($path:tt)*] max_ttl) => {
        $crate::store_builder_methods!(@set [$($doc)*] max_ttl(max_ttl: ::std::time::Duration) => $($path)* max_ttl = max_ttl.into());
    };
    (@method [$($doc:tt)*] [$($path:tt)*] request_timeout) => {
        $crate::store_builder_methods!(@set [$($doc)*] request_timeout(timeout: ::std::time::Duration) => $($path)* request_timeout = timeout.into());
    };
    (@method [$($doc:tt)*] [$($path:tt)*] wake_ups) => {
        $crate::store_builder_methods!(@set [$($doc)*] wake_ups(on: bool) => $($path)* wake_ups = on);
    };
    (@method [$($doc:tt)*] [$($path:tt)*] creation) => {
        $crate::store_builder_methods!(@set [$($doc)*] creation(creation: $crate::Creation) => $($path)* creation = creation);
    };
    (@method [$($doc:tt)*] [$($path:tt)*] clock) => {
        $crate::store_builder_methods!(@set [$($doc)*] clock(clock: $crate::backend::SharedClock) => $($path)* clock = Some(clock));
    };
    (@method [$($doc:tt)*] [$($path:tt)*] prefix_name) => {
        $($doc)*
        pub fn prefix_name(&self) -> &str {
            &self.$($path)* prefix
        }
    };
    // `name(param: Type)` sets the field at `path` to `value` (also for
    // other crates' builder macros, such as leasehold-aws's).
    (@set [$($doc:tt)*] $name:ident($param:ident: $ty:ty) => $($path:ident).+ = $value:expr) => {
        $($doc)*
        pub fn $name(mut self, $param: $ty) -> Self {
            self.$($path).+ = $value;
            self
        }
    };
    (@each) => {};
    (@each $(#[$doc:meta])* $method:ident $(in $($path:ident).+)?; $($rest:tt)*) => {
        $crate::store_builder_methods!(@method [$(#[$doc])*] [$($($path .)+)?] $method);
        $crate::store_builder_methods!(@each $($rest)*);
    };
    ($($rest:tt)*) => {
        $crate::store_builder_methods!(@each $($rest)*);
    };
}

/// `impl Debug` for a type that shows only some of its fields (the others
/// hold secrets, or nothing worth showing), written once:
/// `debug_fields!(b: Type { field, name: expr, .. })` shows `field` as it
/// is and `name` as `expr` (in which `b` is the value shown), in that
/// order, under the type's name; a closing `..` marks the output
/// non-exhaustive.
///
/// ```
/// struct Login { user: String, password: String, tries: u32 }
/// leasehold::debug_fields!(b: Login { user, password: b.password.len(), .. });
/// let login = Login { user: "me".into(), password: "hunter2".into(), tries: 1 };
/// assert_eq!(format!("{login:?}"), r#"Login { user: "me", password: 7, .. }"#);
/// ```
// For store authors: hidden at the crate root, where `macro_export` puts
// it (the root is for users; see the module docs).
#[doc(hidden)]
#[macro_export]
macro_rules! debug_fields {
    ($this:ident: $ty:ident { $($fields:tt)* }) => {
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let $this = self;
                let mut out = f.debug_struct(::std::stringify!($ty));
                $crate::debug_fields!(@fields out $this $($fields)*)
            }
        }
    };
    (@fields $out:ident $this:ident ..) => { $out.finish_non_exhaustive() };
    (@fields $out:ident $this:ident) => { $out.finish() };
    (@fields $out:ident $this:ident $name:ident: $value:expr $(, $($rest:tt)*)?) => {{
        $out.field(::std::stringify!($name), &$value);
        $crate::debug_fields!(@fields $out $this $($($rest)*)?)
    }};
    (@fields $out:ident $this:ident $name:ident $(, $($rest:tt)*)?) => {{
        $out.field(::std::stringify!($name), &$this.$name);
        $crate::debug_fields!(@fields $out $this $($($rest)*)?)
    }};
}
