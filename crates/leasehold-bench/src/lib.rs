//! What the benchmark binary and its examples (`examples/pg_layers.rs`)
//! share: medians and percentiles, and the process figures read from the
//! kernel.

pub mod stats;
pub mod sys;
