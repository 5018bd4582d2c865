//! Opening the store: within `--connect-timeout`, trying again after a
//! failure that may pass, and saying when the URL asks for what the store
//! does not have.

use leasehold_stores as stores;

use crate::describe::exact;
use crate::exit::error_chain;
use crate::output::say;

/// Opens the store, trying again after a failure that may pass (a server
/// restarting, refusing connections for a moment) until `limit` has
/// passed; a failure that will not pass (a bad URL, credentials refused)
/// ends it at once.
pub async fn open_within(
    url: Option<&str>,
    access: stores::Access,
    limit: std::time::Duration,
) -> anyhow::Result<leasehold::Store> {
    let started = tokio::time::Instant::now();
    let deadline = started + limit;
    let mut pause = std::time::Duration::from_millis(50);
    let mut last: Option<anyhow::Error> = None;
    loop {
        let attempt =
            tokio::time::timeout_at(deadline, stores::open_with_in(crate::linked(), url, access))
                .await;
        let err = match attempt {
            Ok(Ok(store)) => return Ok(store),
            Ok(Err(err)) => anyhow::Error::from(err).context(format!(
                "cannot open store {}",
                stores::redact(stores::effective_url(url))
            )),
            Err(_) => {
                let cause = last
                    .map(|e| format!(": {}", error_chain(&e)))
                    .unwrap_or_default();
                // A TLS client facing a server without TLS waits for an
                // answer to its handshake that never comes.
                let tls = ["rediss://", "etcds://"]
                    .iter()
                    .find(|s| url.is_some_and(|u| u.trim().starts_with(**s)))
                    .map(|s| {
                        format!(
                            " ({s} speaks TLS: a server without TLS never answers it; use {}:// if it has none)",
                            &s[..s.len() - "s://".len()]
                        )
                    })
                    .unwrap_or_default();
                anyhow::bail!(
                    "cannot open store {}: no answer within --connect-timeout ({}){cause}{tls}",
                    stores::redact(url.unwrap_or("sqlite:")),
                    exact(limit)
                );
            }
        };
        let retryable = err
            .downcast_ref::<leasehold::Error>()
            .is_some_and(leasehold::Error::is_retryable);
        if !retryable || tokio::time::Instant::now() + pause >= deadline {
            return Err(err);
        }
        tracing::debug!(error = %error_chain(&err), retry_in = ?pause, "opening the store failed; trying again");
        last = Some(err);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_secs(1));
    }
}

/// Says so when the URL asks for a max TTL the store does not have: a
/// store keeps the max TTL it was created with, and `?max_ttl=` on an
/// existing store was ignored without a word.
pub fn warn_if_max_ttl_ignored(url: Option<&str>, store: &leasehold::Store) {
    use leasehold::backend::params::{split_query, QueryParams};
    // The store has accepted its URL: its query decodes, and a max_ttl in
    // it is a duration.
    let Some(query) = url.and_then(|u| split_query(u).1) else {
        return;
    };
    let Ok(Some(asked)) = QueryParams::parse_any(query).and_then(|q| q.duration("max_ttl")) else {
        return;
    };
    let has = store.backend().capabilities().max_ttl;
    if asked != has {
        say!(
            "?max_ttl={} is not this store's: it keeps the max TTL it was created with ({}); leases of up to {} are allowed",
            exact(asked),
            exact(has),
            exact(has)
        );
    }
}
