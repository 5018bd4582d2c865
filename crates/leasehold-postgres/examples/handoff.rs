//! Measures the other-process handoff on PostgreSQL: how long after one
//! process releases a key a waiting *other process* (its own pool and
//! LISTEN connection) holds it, with the default poll interval (50-100 ms),
//! so that anything well below that is the LISTEN/NOTIFY wake-up.
//!
//! ```sh
//! scripts/postgres.sh start
//! cargo run --release -p leasehold-postgres --example handoff -- "$(scripts/postgres.sh url)" [ROUNDS] [--no-wake-ups]
//! ```

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::Store;
use leasehold_postgres::PostgresBackendBuilder;

fn now_ns() -> u128 {
    // Both processes run on one machine and read the same clock.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

async fn open(url: &str, wake_ups: bool) -> (Store, leasehold_postgres::PostgresBackend) {
    let backend = PostgresBackendBuilder::from_url(url)
        .unwrap()
        .wake_ups(wake_ups)
        .build()
        .await
        .unwrap();
    backend.listening().await;
    (Store::new(backend.clone()), backend)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = format!(
        "{}{}table=leasehold_handoff",
        args[1],
        if args[1].contains('?') { '&' } else { '?' }
    );
    let wake_ups = !args.iter().any(|a| a == "--no-wake-ups");
    if args.iter().any(|a| a == "--waiter") {
        return waiter(&url, wake_ups).await;
    }
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200);
    let (store, backend) = open(&url, wake_ups).await;
    let epoch = backend.epoch().await.unwrap();
    if epoch.age.unwrap_or_default() < epoch.max_ttl {
        eprintln!(
            "a new table: waiting out its quarantine ({:?})",
            epoch.max_ttl
        );
        tokio::time::sleep(
            epoch.max_ttl - epoch.age.unwrap_or_default() + Duration::from_millis(100),
        )
        .await;
    }
    let mut child = Command::new(&args[0])
        .args([&args[1], "0", "--waiter"])
        .args(if wake_ups {
            None
        } else {
            Some("--no-wake-ups")
        })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let lock = store.lock("bench/handoff").unwrap();
    let mut line = String::new();
    let mut took = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let guard = lock.acquire_timeout(Duration::from_secs(30)).await.unwrap();
        writeln!(to_child, "go").unwrap();
        line.clear();
        from_child.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "waiting");
        // Let the waiter settle into its wait.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let released = now_ns();
        guard.release().await.unwrap();
        line.clear();
        from_child.read_line(&mut line).unwrap();
        let got: u128 = line.trim().parse().unwrap();
        took.push(Duration::from_nanos((got - released) as u64));
    }
    drop(to_child);
    child.wait().unwrap();
    took.sort();
    let q = |p: f64| took[((took.len() - 1) as f64 * p) as usize];
    println!(
        "other-process handoff on PostgreSQL ({} rounds, wake-ups {}): p50 {:?}, p90 {:?}, p99 {:?}, max {:?}",
        took.len(),
        if wake_ups { "on" } else { "off" },
        q(0.5),
        q(0.9),
        q(0.99),
        took[took.len() - 1]
    );
}

async fn waiter(url: &str, wake_ups: bool) {
    let (store, _backend) = open(url, wake_ups).await;
    let lock = store.lock("bench/handoff").unwrap();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        if line.unwrap() != "go" {
            break;
        }
        let mut told = false;
        let guard = lock
            .acquire_reporting(Duration::from_secs(30), |_| {
                if !told {
                    told = true;
                    let mut out = std::io::stdout();
                    writeln!(out, "waiting").unwrap();
                    out.flush().unwrap();
                }
            })
            .await
            .unwrap();
        let got = now_ns();
        guard.release().await.unwrap();
        writeln!(out, "{got}").unwrap();
        out.flush().unwrap();
    }
}
