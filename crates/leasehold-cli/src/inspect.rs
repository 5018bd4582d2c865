//! `status`, `list` and `break`: looking at and clearing leases.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use leasehold::{HolderInfo, KeyInfo, Store};

pub async fn status(store: &Store, key: &str, json: bool) -> anyhow::Result<ExitCode> {
    let info = store.inspect(key).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", describe(&info));
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn list(store: &Store, prefix: &str, json: bool) -> anyhow::Result<ExitCode> {
    let infos = store.list(prefix).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&infos)?);
        return Ok(ExitCode::SUCCESS);
    }
    for info in &infos {
        let state = match &info.holder {
            Some(h) => format!("held   by {}", h.owner),
            None => "free".to_string(),
        };
        println!("{}\ttoken {}\t{}", info.key, info.fencing_token, state);
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn break_lease(store: &Store, key: &str) -> anyhow::Result<ExitCode> {
    match store.break_lease(key).await? {
        Some(holder) => println!("broke the lease of {} on {key}", holder.owner),
        None => println!("{key} was not held"),
    }
    Ok(ExitCode::SUCCESS)
}

/// A multi-line, human description of a key.
fn describe(info: &KeyInfo) -> String {
    let mut out = format!("key:           {}\n", info.key);
    match &info.holder {
        None => out += "state:         free\n",
        Some(h) => {
            out += "state:         held\n";
            out += &format!("holder:        {}\n", h.owner);
            if let Some(data) = &h.data {
                out += &format!("data:          {data}\n");
            }
            if let Some(held) = held_for(h) {
                out += &format!("held for:      {}\n", short(held));
            }
            if let Some(left) = h.expires_in {
                out += &format!("expires in:    {} unless renewed\n", short(left));
            }
        }
    }
    out += &format!("fencing token: {} (last issued)\n", info.fencing_token);
    out
}

/// How long the holder has held the key, by the wall clocks of both sides.
pub fn held_for(holder: &HolderInfo) -> Option<Duration> {
    holder
        .acquired_at
        .and_then(|at| SystemTime::now().duration_since(at).ok())
}

/// A duration rounded for people: "2m 5s", "800ms".
pub fn short(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}
