//! Runs a job under a lock, as a program that exits afterwards does:
//! `cargo run -p leasehold --example run_under_lock -- sqlite:/tmp/leases.db`
//! (the default store, `sqlite:`, when no URL is given).
//!
//! Run it twice at once: the second waits for the first (up to 10 s).

use std::time::Duration;

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "sqlite:".into());
    let store = leasehold::Store::open(&url)?;
    let lock = store.lock("examples/nightly-import")?;
    // Waits up to 10 s; the job is cancelled if the lease is lost, and the
    // lock is released when it ends.
    let result = lock
        .run(Duration::from_secs(10), |held| async move {
            println!("importing with fencing token {}", held.fencing_token());
            tokio::time::sleep(Duration::from_secs(3)).await;
            println!("imported");
        })
        .await;
    // Last: nothing leasehold still does in the background is cut short
    // by the exit.
    store.close().await?;
    result
}
