//! `leasehold init`: creates the store explicitly and says what it made,
//! and how long its new epoch is quarantined and why.

use std::process::ExitCode;
use std::time::Duration;

use leasehold::{backend::StoreEpoch, Error, Store};
use leasehold_stores::{self as stores, Access};

use crate::describe::short;
use crate::open::open_within;
use crate::output::print;

/// Creates the store at `url` (the default SQLite file when `None`), or
/// says it exists and changes nothing (also when another process created
/// it between this one's look and its creating, where the backend can
/// tell: [`Backend::created_at_open`](leasehold::backend::Backend::created_at_open)). With `new` (the operator's
/// statement that no store existed here before), the new epoch is proven:
/// settled at once; refused when a store exists. Each opening is bounded
/// by `connect_timeout` (`--connect-timeout`), as every command's is.
pub async fn init(
    url: Option<&str>,
    new: bool,
    connect_timeout: Duration,
) -> anyhow::Result<ExitCode> {
    let shown = stores::redact(url.unwrap_or("sqlite:"));
    // First a look, which creates nothing: a store that exists is left as
    // it is. (The look at a missing default SQLite file answers with an
    // empty in-memory store.)
    match open_within(url, Access::Look, connect_timeout).await {
        Ok(store) if store.backend().name() != "memory" => {
            let epoch = describe_epoch(&store);
            if new {
                return Err(Error::invalid(
                    "--new",
                    format!(
                        "a leasehold store already exists at {shown}{epoch}: --new states that no store existed here before, which would let a new epoch skip the wait for holders of its data; nothing changed"
                    ),
                )
                .into());
            }
            print(&format!(
                "a leasehold store already exists at {shown}{epoch}; nothing changed\n"
            ))?;
            return Ok(ExitCode::SUCCESS);
        }
        Ok(_) => {}
        Err(e) if matches!(e.downcast_ref::<Error>(), Some(Error::NoStore { .. })) => {}
        Err(e) => return Err(e),
    }
    let store = open_within(url, Access::Create { proven: new }, connect_timeout).await?;
    // The look found none, but another process created the store since:
    // its creator settled it, and this one changed nothing (with `--new`
    // too, whose statement was true when this one looked).
    if store.backend().created_at_open() == Some(false) {
        let epoch = describe_epoch(&store);
        print(&format!(
            "a leasehold store already exists at {shown}{epoch} (created by another process at the same moment); nothing changed\n"
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let window = store.confirmation_window();
    let epoch = store.backend().epoch_at_open();
    let made = made(store.backend().name());
    let mut text = format!("created the leasehold store at {shown}: {made}");
    if let Some(e) = &epoch {
        text.push_str(&format!(" (store epoch {})", e.epoch));
    }
    text.push_str(".\n");
    text.push_str(&quarantine(epoch.as_ref(), window, new));
    text.push('\n');
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// " (store epoch E, ...)" for a store found by a look, or nothing.
fn describe_epoch(store: &Store) -> String {
    match store.backend().epoch_at_open() {
        Some(e) if e.is_proven() => format!(" (store epoch {}, settled)", e.epoch),
        Some(e) => match e.age {
            Some(age) => format!(" (store epoch {}, begun {} ago)", e.epoch, short(age)),
            None => format!(" (store epoch {})", e.epoch),
        },
        None => String::new(),
    }
}

/// What creating a store of backend `name` makes.
fn made(name: &str) -> &'static str {
    match name {
        "sqlite" => "the database file, its tables and its epoch row",
        "postgres" | "mysql" => "the table and its epoch row",
        "dynamodb" => "the table and its epoch marker item",
        "azblob" => "the container and its epoch marker blob",
        "redis" => "the epoch marker under the prefix",
        "etcd" => "the epoch marker under the prefix",
        "s3" => "the bucket (if missing) and the epoch marker object under the prefix",
        "zookeeper" => "the root node and its epoch marker node",
        _ => "the store and its epoch marker",
    }
}

/// How long the new epoch grants nothing, and why.
fn quarantine(epoch: Option<&StoreEpoch>, window: Duration, new: bool) -> String {
    match epoch {
        Some(e) if e.is_proven() && new => "Its epoch is settled at once, no quarantine: you stated with --new that no store existed here before, so no holder of lost data can be live. Leases are granted now, in every process.".to_string(),
        Some(e) if e.is_proven() => "Its epoch is settled at once, no quarantine: the store proved that no lease of an earlier store can be live (no process on this machine holds a lease in its directory). Leases are granted now.".to_string(),
        _ => {
            let left = epoch
                .and_then(|e| e.age)
                .map_or(window, |age| window.saturating_sub(age));
            let raced = if new {
                " (--new did not apply: another process created the store at the same moment)"
            } else {
                ""
            };
            format!(
                "Nothing of an earlier store is known: grants wait one confirmation window, {}, so that any holder of lost data has stopped; about {} from now{raced}. This store exists now, so `init --new` would be refused: wait, or, if no store ever existed here and nothing uses this one yet, remove it and run `leasehold init --new`, which settles a store at once when it creates it.",
                short(window),
                short(left)
            )
        }
    }
}
