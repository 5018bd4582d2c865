//! The Lua scripts that carry out the protocol (see the crate docs), one
//! a operation, each with the shared prelude in front.

use redis::Script;

/// The Lua of every operation, each with the shared prelude in front.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) acquire_all: Script,
    pub(crate) epoch: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) break_lease: Script,
    pub(crate) record_run: Script,
    pub(crate) inspect: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let script = |body: &str| Script::new(&with_prelude(body));
        Scripts {
            acquire: script(ACQUIRE),
            acquire_all: script(ACQUIRE_ALL),
            epoch: script(include_str!("lua/epoch.lua")),
            renew: script(include_str!("lua/renew.lua")),
            release: script(include_str!("lua/release.lua")),
            break_lease: script(include_str!("lua/break.lua")),
            record_run: script(include_str!("lua/record_run.lua")),
            inspect: script(include_str!("lua/inspect.lua")),
        }
    }
}

const PRELUDE: &str = include_str!("lua/prelude.lua");

/// One key's acquisition, behind the prelude.
const ACQUIRE: &str = concat!(
    include_str!("lua/grant.lua"),
    include_str!("lua/acquire.lua")
);

/// Several keys' acquisition, all or none, behind the prelude.
const ACQUIRE_ALL: &str = concat!(
    include_str!("lua/grant.lua"),
    include_str!("lua/acquire_all.lua")
);

/// The store protocol of a marker whose epoch carries the leases of
/// earlier ones (after a promotion, see the crate docs): protocol 1, but
/// records of the carried epochs are read as live. Written only into such
/// markers, so that builds that know nothing of the carry (which would
/// grant a carried lease's key as free) refuse the store instead.
pub(crate) const CARRYING_PROTOCOL: u64 = 2;

/// `body` with the prelude in front, and in front of that the protocol a
/// new epoch records (the prelude's `PROTOCOL`) and the one an epoch that
/// carries leases records, the highest this build reads
/// (`CARRYING_PROTOCOL`; see the crate docs).
fn with_prelude(body: &str) -> String {
    let protocol = leasehold::backend::protocol::PROTOCOL;
    format!(
        "local PROTOCOL = {protocol}\nlocal CARRYING_PROTOCOL = {CARRYING_PROTOCOL}\n{PRELUDE}\n{body}"
    )
}

/// The script texts, for tools that run the same protocol by hand (the
/// benchmarks' raw client loop): (acquire, release), prelude included.
pub fn acquire_and_release_scripts() -> (String, String) {
    (
        with_prelude(ACQUIRE),
        with_prelude(include_str!("lua/release.lua")),
    )
}
