//! Opening the store named on the command line.
//!
//! The built-in stores (`sqlite:`, `memory:`) come from the library; each
//! cloud store comes from its own crate, compiled in by a cargo feature of
//! this crate, so a build without it still parses its URLs and says so.

use anyhow::Context;
use leasehold::{Error, Store};

/// Opens `url`, or the default SQLite file when none is given.
pub async fn open(url: Option<&str>) -> anyhow::Result<Store> {
    let url = url.unwrap_or("sqlite:");
    let opened = match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("azblob") => open_azblob(url).await,
        Some("dynamodb") => open_dynamodb(url).await,
        _ => Store::open(url),
    };
    opened.with_context(|| format!("cannot open store {}", redact(url)))
}

async fn open_azblob(_url: &str) -> leasehold::Result<Store> {
    Err(not_in_build("azblob"))
}

async fn open_dynamodb(_url: &str) -> leasehold::Result<Store> {
    Err(not_in_build("dynamodb"))
}

#[allow(dead_code)]
fn not_in_build(scheme: &str) -> Error {
    Error::NotSupported(format!(
        "this leasehold was built without the {scheme}:// store (cargo feature \"{scheme}\")"
    ))
}

/// The URL without its query string, which may carry credentials.
fn redact(url: &str) -> &str {
    url.split_once('?').map(|(base, _)| base).unwrap_or(url)
}
