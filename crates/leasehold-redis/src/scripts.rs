//! The Lua scripts that carry out the protocol (see the crate docs), one
//! a operation, each with the shared prelude in front.

use redis::Script;

/// The Lua of every operation, each with the shared prelude in front.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) epoch: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) break_lease: Script,
    pub(crate) record_run: Script,
    pub(crate) inspect: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let with_prelude = |body: &str| Script::new(&format!("{PRELUDE}\n{body}"));
        Scripts {
            acquire: with_prelude(include_str!("lua/acquire.lua")),
            epoch: with_prelude(include_str!("lua/epoch.lua")),
            renew: with_prelude(include_str!("lua/renew.lua")),
            release: with_prelude(include_str!("lua/release.lua")),
            break_lease: with_prelude(include_str!("lua/break.lua")),
            record_run: with_prelude(include_str!("lua/record_run.lua")),
            inspect: with_prelude(include_str!("lua/inspect.lua")),
        }
    }
}

const PRELUDE: &str = include_str!("lua/prelude.lua");

/// The script texts, for tools that run the same protocol by hand (the
/// benchmarks' raw client loop): (acquire, release), prelude included.
pub fn acquire_and_release_scripts() -> (String, String) {
    (
        format!("{PRELUDE}\n{}", include_str!("lua/acquire.lua")),
        format!("{PRELUDE}\n{}", include_str!("lua/release.lua")),
    )
}
