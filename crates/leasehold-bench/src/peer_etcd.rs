//! Figure 6's etcd peer: etcd's own lock service (v3lock, what
//! etcd-client's `lock` and `etcdctl lock` call), the way `etcdctl lock`
//! takes a lock: one long-lived etcd lease
//! (a session, kept alive every TTL/3) and `Lock(name, lease)` /
//! `Unlock(key)` on it. Python has no maintained etcd client, so this peer
//! lives in the bench binary (`leasehold-bench peer-etcd`) and prints the
//! same JSON line as the Python peers in `scripts/peers/`:
//!
//! 1. Uncontended lock + unlock cycles for `--cycles-ms` (after a warm-up
//!    of half that).
//! 2. Handoff: a holder (this process) takes the lock, keeps it for a
//!    random 0.1–0.2 s and unlocks it; a waiter (another process: this
//!    binary again, with its own client and session) blocks in `Lock`,
//!    which the server answers when the predecessor's key is deleted (it
//!    watches for that). Times are `CLOCK_MONOTONIC`.
//!
//! The server comes from `$LEASEHOLD_BENCH_ETCD_URL`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use leasehold_etcd::grpc::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest};
use leasehold_etcd::grpc::v3lockpb::{LockRequest, UnlockRequest};
use leasehold_etcd::grpc::Connection;
use rand::Rng;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::stores;
use crate::sys::{mono_ns, sleep_until_ns};

/// The session lease's TTL (`etcdctl lock`'s default).
const SESSION_TTL_S: i64 = 60;

/// Most a single `Lock` may wait.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// `leasehold-bench peer-etcd` options.
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    /// Time of the uncontended cycles (ms).
    #[arg(long, default_value_t = 5_000)]
    pub cycles_ms: u64,
    /// Time of the handoff run (ms; 0: none).
    #[arg(long, default_value_t = 10_000)]
    pub handoff_ms: u64,
    /// Most uncontended cycles.
    #[arg(long, default_value_t = 100_000)]
    pub max_cycles: u64,
    /// (the waiter process) Wait on the lock `--name` until this
    /// monotonic time, then print its acquisitions.
    #[arg(long, hide = true)]
    pub waiter_until_ns: Option<u64>,
    /// (the waiter process) The lock's name.
    #[arg(long, hide = true)]
    pub name: Option<String>,
}

#[derive(serde::Serialize)]
struct PeerReport {
    cycles: u64,
    seconds: f64,
    requests_per_cycle: u64,
    releases: Vec<u64>,
    acquisitions: Vec<(u64, u64)>,
    note: &'static str,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct WaiterReport {
    acquisitions: Vec<(u64, u64)>,
}

const NOTE: &str =
    "etcd's v3lock Lock/Unlock (what etcd-client's `lock` and `etcdctl lock` do with \
their session): one long-lived etcd lease kept alive in the background, 2 requests a cycle from the \
client (the server's lock service adds its own: a keep-alive of the session lease and the \
create-if-absent Txn). The lock key carries no fencing token (the caller can use its revision, \
etcd's global counter, which restarts in a re-created cluster); Unlock deletes the key by name, so \
a retried unlock that lands after the lock passed on deletes the newer holder's key (etcd issue \
22082); one session lease covers every lock it holds, and a holder is not told when it expires. A \
blocked Lock watches its predecessor's key for deletion, so handoff is event driven.";

/// Runs the peer (or, with `--waiter-until-ns`, its waiter process) and
/// prints its JSON report.
pub async fn run(args: PeerArgs) -> anyhow::Result<()> {
    if let Some(until) = args.waiter_until_ns {
        let name = args.name.ok_or_else(|| anyhow!("--name is required"))?;
        let report = waiter(&name, until).await?;
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    let session = Session::open().await?;
    let name = format!("leasehold-bench-peer/etcd-lock-{}", std::process::id());

    let client = session.client.clone();
    let warm_until = Instant::now() + Duration::from_millis(args.cycles_ms / 2);
    while Instant::now() < warm_until {
        cycle(&client, &name, session.lease).await?;
    }
    let (mut n, start) = (0, Instant::now());
    let end = start + Duration::from_millis(args.cycles_ms);
    while n < args.max_cycles && Instant::now() < end {
        cycle(&client, &name, session.lease).await?;
        n += 1;
    }
    let seconds = start.elapsed().as_secs_f64();

    let (mut releases, mut acquisitions) = (Vec::new(), Vec::new());
    if args.handoff_ms > 0 {
        let name = format!("{name}/handoff");
        let until = mono_ns() + args.handoff_ms * 1_000_000;
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .arg("peer-etcd")
            .arg("--waiter-until-ns")
            .arg(until.to_string())
            .arg("--name")
            .arg(&name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the waiter process")?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        // The waiter says "ready" once its session is open.
        match tokio::time::timeout(LOCK_TIMEOUT, lines.next_line()).await {
            Ok(Ok(Some(l))) if l == "ready" => {}
            other => bail!("the waiter process did not start: {other:?}"),
        }
        while mono_ns() < until.saturating_sub(1_000_000_000) {
            let key = lock(&client, &name, session.lease).await?;
            let hold = rand::rng().random_range(100..=200);
            tokio::time::sleep(Duration::from_millis(hold)).await;
            releases.push(mono_ns());
            unlock(&client, key).await?;
            // The waiter takes it, holds it 20 ms, and lets it go.
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .map_err(|_| anyhow!("the waiter process did not report"))??
            .ok_or_else(|| anyhow!("no report from the waiter process"))?;
        let report: WaiterReport = serde_json::from_str(&line)?;
        acquisitions = report.acquisitions;
        let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    }
    session.close().await;

    let report = PeerReport {
        cycles: n,
        seconds,
        requests_per_cycle: 2,
        releases,
        acquisitions,
        note: NOTE,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// The waiter process: waits on `name` in a loop until `until` (less a
/// second), holding it 20 ms each time.
async fn waiter(name: &str, until: u64) -> anyhow::Result<WaiterReport> {
    let session = Session::open().await?;
    let client = session.client.clone();
    println!("ready");
    let mut acquisitions = Vec::new();
    while mono_ns() < until.saturating_sub(1_000_000_000) {
        let call = mono_ns();
        let key = lock(&client, name, session.lease).await?;
        acquisitions.push((call, mono_ns()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        unlock(&client, key).await?;
        // Leave it to the holder before waiting again.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sleep_until_ns(until).await;
    session.close().await;
    Ok(WaiterReport { acquisitions })
}

/// One uncontended `Lock` + `Unlock`: two requests.
pub(crate) async fn cycle(client: &Connection, name: &str, lease: i64) -> anyhow::Result<()> {
    let key = lock(client, name, lease).await?;
    unlock(client, key).await
}

/// A blocking `Lock` on the session's lease; the lock key.
async fn lock(client: &Connection, name: &str, lease: i64) -> anyhow::Result<Vec<u8>> {
    let request = LockRequest {
        name: name.as_bytes().to_vec(),
        lease,
    };
    let resp = tokio::time::timeout(LOCK_TIMEOUT, client.lock().lock(request))
        .await
        .map_err(|_| anyhow!("etcd lock: not granted in {LOCK_TIMEOUT:?}"))?
        .context("etcd lock")?;
    Ok(resp.into_inner().key)
}

/// `Unlock` of the lock key `key` (deletes it by name).
async fn unlock(client: &Connection, key: Vec<u8>) -> anyhow::Result<()> {
    client
        .lock()
        .unlock(UnlockRequest { key })
        .await
        .context("etcd unlock")?;
    Ok(())
}

/// A client and its session: one etcd lease, kept alive every TTL/3.
pub(crate) struct Session {
    pub(crate) client: Connection,
    pub(crate) lease: i64,
    keeper: tokio::task::JoinHandle<()>,
}

impl Session {
    pub(crate) async fn open() -> anyhow::Result<Session> {
        let url = stores::etcd_url().ok_or_else(|| anyhow!("no {} given", stores::ETCD_URL_ENV))?;
        let endpoints: Vec<String> = crate::raw::etcd_endpoints(&url)?
            .into_iter()
            .map(|e| format!("http://{e}"))
            .collect();
        let client = Connection::connect(&endpoints, Duration::from_secs(5), None)
            .await
            .context("connecting to etcd")?;
        let request = LeaseGrantRequest {
            ttl: SESSION_TTL_S,
            id: 0,
        };
        let lease = client.lease().lease_grant(request).await?.into_inner().id;
        let keeper = tokio::spawn({
            let client = client.clone();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(SESSION_TTL_S as u64 / 3)).await;
                    if !matches!(client.keep_alive_once(lease).await, Ok(Some(_))) {
                        eprintln!("peer-etcd: the session's keep-alive stopped");
                        return;
                    }
                }
            }
        });
        Ok(Session {
            client,
            lease,
            keeper,
        })
    }

    /// Stops the keep-alive and revokes the session's lease (deleting any
    /// lock key still on it).
    pub(crate) async fn close(self) {
        self.keeper.abort();
        let request = LeaseRevokeRequest { id: self.lease };
        let _ = self.client.lease().lease_revoke(request).await;
    }
}
