//! The README's library example, as written there (`tests/readme.rs` keeps
//! the two the same): `cargo run -p leasehold --example readme`.

use leasehold::{LockOptions, Store};
use std::time::Duration;

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    // A SQLite file shared by every process on this machine (`sqlite:` alone
    // is the default file; see "Stores" for the other stores).
    let path = std::env::temp_dir().join("leasehold-readme.db");
    let store = Store::open(&format!("sqlite:{}", path.display()))?;
    let lock = store.lock_with(
        "import-A",
        LockOptions::new()
            .ttl(Duration::from_secs(30))
            .owner_label("vm-1")
            .data("nightly import"),
    )?;

    match lock.try_acquire().await {
        Ok(guard) => {
            let token = guard.fencing_token(); // pass it to what you write to
            tokio::select! {
                _ = async { println!("importing with token {token}") } => {}
                reason = guard.lost() => eprintln!("stopping: lease lost ({reason})"),
            }
            guard.release().await?; // reports an error if the lease was lost
        }
        Err(leasehold::Error::Held { holder, .. }) => {
            eprintln!("someone else is importing: {holder:?}");
        }
        Err(e) => return Err(e),
    }

    // Or wait for it: up to a minute (`acquire()` waits as long as it takes).
    let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
    drop(guard); // released in the background, best effort (see `close` below)

    // Or let the lock run the work: it waits (here up to a minute), runs it,
    // cancels it if the lease is lost (`Error::LeaseLost`), then releases.
    let imported = lock
        .run(Duration::from_secs(60), |held| async move {
            held.fencing_token() // the import, writing with this token
        })
        .await?;
    println!("imported with token {imported}");

    // At most 3 holders at once; one leader at a time.
    let permit = store.semaphore("exports", 3)?.acquire().await?;
    println!("slot {} (token {})", permit.slot(), permit.fencing_token());
    permit.release().await?;
    let election = store.election("scheduler")?;
    let leadership = election.campaign().await?;
    println!("term {}: {:?}", leadership.term(), election.leader().await?);
    leadership.resign().await?;

    // Last, before `main` returns: releases still in the background (of a
    // guard dropped, not released) end before the process does, or the
    // lease would stay held until its TTL ran out.
    store.close().await
}
