//! Where an uncontended PostgreSQL cycle's time goes, layer by layer
//! (docs/benchmarks.md, section 13): loops in interleaved rounds on one
//! server, each a quarter of a second a round, the order reversed every
//! other round:
//!
//! * `raw`: tokio-postgres on a connection of its own, leasehold's two
//!   statements prepared once (as figure 1's raw loop);
//! * `backend`: the store's backend called directly (`try_acquire`, then
//!   `release`), through the `Arc<dyn Backend>` the store holds;
//! * `lock`: `Lock::acquire` and `LeaseGuard::release`, the whole library;
//! * `backend type`: the backend's own type called directly, built
//!   without a store;
//! * `lock, try`: `Lock::try_acquire` (one round, no wait loop) and
//!   `release`.
//!
//! Each is reported as cycles per second and as the median of the rounds'
//! ratios to `raw`, with the process's CPU time per cycle (user + system,
//! every thread: the connections' tasks too).
//!
//! ```sh
//! URL="$(scripts/postgres.sh url)" cargo run --release -p leasehold-bench --example pg_layers -- [--spawned] [--spin-us N]
//! ```
//!
//! `--spawned` runs the loops in a task of the runtime (on a worker
//! thread, as most code runs) instead of on the thread that `block_on`s
//! `main` (where figure 1's harness ran its loops until section 13);
//! `--spin-us N` adds a loop, the raw
//! loop busy for N µs after each statement's answer, before its next
//! statement, to show what a client's time between round trips costs on
//! loopback. `ONLY=N` in the environment runs only loop N, for a profiler
//! (0 raw, 1 backend, 2 lock, 3 backend type, 4 the busy raw loop, 5 lock,
//! try).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::backend::{AcquireOutcome, AcquireRequest, Backend, Lease, LeaseId, Owner};
use leasehold_bench::{stats, sys};
use tokio_postgres::types::Type;

const LOOPS: [&str; 6] = [
    "raw",
    "backend",
    "lock",
    "backend type",
    "raw, busy",
    "lock, try",
];
const ROUNDS: usize = 24;
const PHASE: Duration = Duration::from_millis(250);

/// This process's CPU time (user + system) so far.
fn cpu_time() -> Duration {
    Duration::from_nanos(sys::cpu_ns())
}

fn request(key: &str, epoch: u64) -> AcquireRequest {
    AcquireRequest {
        key: leasehold::Key::new(key).expect("a valid key"),
        lease_id: LeaseId::random(),
        ttl: Duration::from_secs(30),
        owner: Owner::current(),
        data: None,
        epoch: Some(epoch),
        queue: false,
    }
}

async fn backend_cycle(backend: &dyn Backend, key: &str, epoch: u64) {
    let req = request(key, epoch);
    let AcquireOutcome::Acquired(grant) = backend.try_acquire(&req).await.unwrap() else {
        panic!("{key}: not granted");
    };
    let lease = Lease {
        key: req.key,
        lease_id: req.lease_id,
        ttl: req.ttl,
        fencing_token: grant.fencing_token,
        epoch,
    };
    backend.release(&lease).await.unwrap();
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Cycles per second of `cycle` for one phase, and CPU time per cycle.
async fn phase<F, Fut>(mut cycle: F) -> (f64, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (t, c) = (Instant::now(), cpu_time());
    let mut n = 0u32;
    while t.elapsed() < PHASE {
        cycle().await;
        n += 1;
    }
    (
        f64::from(n) / t.elapsed().as_secs_f64(),
        (cpu_time() - c) / n.max(1),
    )
}

async fn measure(url: String, spin_for: Duration) {
    let table_url = format!("{url}?table=bench_layers");
    let store = leasehold_stores::open(Some(&table_url)).await.unwrap();
    let backend: Arc<dyn Backend> = store.backend().clone();
    let own = leasehold_postgres::PostgresBackendBuilder::from_url(&table_url)
        .unwrap()
        .build()
        .await
        .unwrap();
    let epoch = own.epoch().await.unwrap().epoch;
    let (acquire_sql, release_sql) = own.acquire_release_sql();
    let config = leasehold_postgres::PostgresBackendBuilder::from_url(&url)
        .unwrap()
        .config()
        .clone();
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let text_int = [Type::TEXT, Type::TEXT, Type::INT8, Type::INT8];
    let rest = [Type::TEXT, Type::INT8, Type::TEXT, Type::TEXT];
    let acquire = client
        .prepare_typed(acquire_sql, &[&text_int[..], &rest[..]].concat())
        .await
        .unwrap();
    let release = client
        .prepare_typed(release_sql, &[Type::TEXT, Type::TEXT])
        .await
        .unwrap();
    let lock = store.lock("bench-layers/lock").unwrap();
    let (client, acquire, release) = (&client, &acquire, &release);
    let raw_cycle = move |spin_for: Duration| async move {
        let id = LeaseId::random();
        let (ttl_ms, pid, epoch) = (30_000i64, i64::from(std::process::id()), epoch as i64);
        let (label, data) = (Option::<String>::None, Option::<String>::None);
        let key = "bench-layers/raw";
        let host = "host";
        client
            .query(
                acquire,
                &[
                    &key,
                    &id.as_str(),
                    &ttl_ms,
                    &epoch,
                    &host,
                    &pid,
                    &label,
                    &data,
                ],
            )
            .await
            .unwrap();
        spin(spin_for);
        client.query(release, &[&key, &id.as_str()]).await.unwrap();
        spin(spin_for);
    };
    let mut rates: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut cpu: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
    for round in 0..=ROUNDS {
        let mut order = vec![0, 1, 2, 3, 5];
        if !spin_for.is_zero() {
            order.push(4);
        }
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            if std::env::var("ONLY").is_ok_and(|o| o != i.to_string()) {
                continue;
            }
            let (rate, per) = match i {
                0 => phase(|| raw_cycle(Duration::ZERO)).await,
                4 => phase(|| raw_cycle(spin_for)).await,
                5 => {
                    phase(|| async { lock.try_acquire().await.unwrap().release().await.unwrap() })
                        .await
                }
                1 => phase(|| backend_cycle(backend.as_ref(), "bench-layers/backend", epoch)).await,
                2 => {
                    phase(|| async { lock.acquire().await.unwrap().release().await.unwrap() }).await
                }
                _ => phase(|| backend_cycle(&own, "bench-layers/type", epoch)).await,
            };
            // Round 0 warms up the connections and caches.
            if round > 0 {
                rates.entry(i).or_default().push(rate);
                cpu.entry(i).or_default().push(per);
            }
        }
    }
    for (i, name) in LOOPS.iter().enumerate() {
        if !rates.contains_key(&i) {
            continue;
        }
        let base = rates.get(&0).unwrap_or(&rates[&i]);
        let ratios: Vec<f64> = rates[&i].iter().zip(base).map(|(a, r)| a / r).collect();
        let per_us: Vec<f64> = cpu[&i].iter().map(|d| d.as_secs_f64() * 1e6).collect();
        println!(
            "{:>16}: {:6.0} cycles/s, {:.2}x raw (median of {} rounds), CPU {:5.1} us a cycle",
            if i == 4 {
                format!("{name} {spin_for:?}")
            } else {
                name.to_string()
            },
            rates[&i].iter().sum::<f64>() / rates[&i].len() as f64,
            stats::median(&ratios).unwrap_or(f64::NAN),
            rates[&i].len(),
            stats::median(&per_us).unwrap_or(f64::NAN),
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = std::env::var("URL").expect("URL: a postgres:// URL (scripts/postgres.sh url)");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spawned = args.iter().any(|a| a == "--spawned");
    let spin_for = args
        .iter()
        .position(|a| a == "--spin-us")
        .and_then(|i| args.get(i + 1))
        .map_or(Duration::ZERO, |n| {
            Duration::from_micros(n.parse().expect("--spin-us N: microseconds"))
        });
    println!(
        "loops on {}; raw loop busy {spin_for:?} after each answer",
        if spawned {
            "a worker thread (a spawned task)"
        } else {
            "the thread that block_ons main"
        }
    );
    if spawned {
        tokio::spawn(measure(url, spin_for)).await.unwrap();
    } else {
        measure(url, spin_for).await;
    }
}
