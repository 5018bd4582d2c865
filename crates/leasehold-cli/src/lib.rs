//! Library side of the `leasehold` command: opening any store by URL, with
//! the cloud backends this build includes. Other tools in the workspace
//! (the torture harness, the benchmarks) open stores the same way.

pub mod stores;
