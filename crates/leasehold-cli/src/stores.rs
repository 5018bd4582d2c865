//! Opening any store by URL: the built-in ones (`sqlite:`, `memory:`) from
//! the library, each cloud store from its own crate, compiled in by a cargo
//! feature of this crate (`azblob`, `dynamodb`; both on by default). A build
//! without one still recognises its URLs and says what is missing.

use anyhow::Context;
use leasehold::Store;

/// Opens `url`, or the default SQLite file when none is given.
///
/// # Errors
/// As [`Store::open`], and the cloud backends' URL and credential errors;
/// the message names the URL without its query string.
pub async fn open(url: Option<&str>) -> anyhow::Result<Store> {
    let url = url.unwrap_or("sqlite:");
    let opened = match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("azblob") => open_azblob(url).await,
        Some("dynamodb") => open_dynamodb(url).await,
        _ => Store::open(url),
    };
    opened.with_context(|| format!("cannot open store {}", redact(url)))
}

#[cfg(feature = "azblob")]
async fn open_azblob(url: &str) -> leasehold::Result<Store> {
    Ok(Store::new(
        leasehold_azure::AzureBackend::from_url(url).await?,
    ))
}

#[cfg(not(feature = "azblob"))]
async fn open_azblob(_url: &str) -> leasehold::Result<Store> {
    Err(not_in_build("azblob"))
}

#[cfg(feature = "dynamodb")]
async fn open_dynamodb(url: &str) -> leasehold::Result<Store> {
    Ok(Store::new(
        leasehold_dynamodb::DynamoDbBackend::from_url(url).await?,
    ))
}

#[cfg(not(feature = "dynamodb"))]
async fn open_dynamodb(_url: &str) -> leasehold::Result<Store> {
    Err(not_in_build("dynamodb"))
}

#[cfg(not(all(feature = "azblob", feature = "dynamodb")))]
fn not_in_build(scheme: &str) -> leasehold::Error {
    leasehold::Error::NotSupported(format!(
        "this leasehold was built without the {scheme}:// store (cargo feature \"{scheme}\")"
    ))
}

/// The URL without its query string, which may carry credentials.
pub fn redact(url: &str) -> &str {
    url.split_once('?').map(|(base, _)| base).unwrap_or(url)
}
