//! docs/benchmarks.md from one run's [`Results`].

use std::fmt::Write as _;

use crate::results::Results;
use crate::stats::Latency;
use crate::stores::S3_LABEL;

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**missed**"
    }
}

/// Figure 1's target ratio for a row (issue 12: the embedded store against
/// the raw loop in async code; the synchronous raw loop is a floor, not a
/// target).
pub(crate) fn overhead_target(store: &str) -> Option<f64> {
    match store {
        crate::results::SQLITE_HOP => Some(0.9),
        "SQLite" => None,
        _ => Some(0.95),
    }
}

/// Figure 5's target: `leasehold run` at most this many times `flock`
/// (issue 12's, restated by issue 55).
pub(crate) const CLI_TARGET: f64 = 2.75;

/// Figure 6's targets on etcd (issue 55): leasehold's cycles at least this
/// share of the peer's (the fencing record and the compare-and-delete
/// release cost the rest), and its handoff p50 no longer than the peer's.
pub(crate) const ETCD_PEER_CYCLES_TARGET: f64 = 0.88;

/// Figure 2's target for another process's handoff, p50 in ms: stores that
/// wake waiters in other processes (SQLite on one machine, the servers
/// across machines) < 5 ms; the stores that only poll (the emulators,
/// MySQL) < 50 ms.
pub(crate) fn handoff_target_ms(store: &str) -> f64 {
    match store {
        "Azurite" | "DynamoDB Local" | S3_LABEL | "MySQL" => 50.0,
        _ => 5.0,
    }
}

/// Figure 3's longest-wait target in ms: 2 s on SQLite, 5 s elsewhere.
fn longest_wait_target_ms(store: &str) -> f64 {
    if store == "SQLite" {
        2_000.0
    } else {
        5_000.0
    }
}

/// How fast one client's requests to moto went in figure 1 (the raw
/// loop's, one after the other), as " (figure 1: …)", or nothing.
fn moto_scale(r: &Results) -> String {
    r.overhead
        .iter()
        .find(|o| o.store == S3_LABEL)
        .map(|o| o.raw_cps * o.raw_requests_per_cycle)
        .filter(|rate| *rate > 0.0)
        .map(|rate| {
            format!(
                " (figure 1: {rate:.0} requests/s to one client, {:.1} ms each)",
                1000.0 / rate
            )
        })
        .unwrap_or_default()
}

/// Figure 1's target for a row: the ratio at its target and the requests
/// per cycle at the protocol's minimum; `None` for a row without a target.
pub(crate) fn overhead_ok(o: &crate::results::Overhead) -> Option<bool> {
    let minimum_ok = (o.leasehold_requests_per_cycle - o.minimum as f64).abs() < 0.05;
    overhead_target(&o.store).map(|t| o.ratio >= t && minimum_ok)
}

/// Figure 4's target: no lease lost or failed, and none longer than 1.5
/// renewal intervals without a grant or a renewal.
pub(crate) fn many_ok(x: &crate::worker::ManyReport) -> bool {
    x.lost == 0 && x.failed == 0 && x.max_gap_ms <= x.renew_every_ms as f64 * 1.5
}

/// Figure 3's targets: no task unserved, the longest wait within its
/// target, the most served process at most 3× the least served.
pub(crate) fn contention_ok(c: &crate::results::Contention) -> bool {
    c.starved_tasks == 0
        && c.longest_wait_ms <= longest_wait_target_ms(&c.store)
        && c.max_process_passes <= c.min_process_passes.saturating_mul(3)
}

fn lat(l: &Option<Latency>) -> String {
    match l {
        Some(l) => format!("{:.2} / {:.2} ms (n={})", l.p50_ms, l.p99_ms, l.n),
        None => "–".into(),
    }
}

/// The results page.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    let tiny = r.plan.as_ref().is_some_and(|p| p.tiny);
    let _ = writeln!(s, "# Benchmarks\n");
    if tiny {
        let _ = writeln!(
            s,
            "> **A `--tiny` run** (CI's smoke check): loads far too small for the figures to mean anything.\n"
        );
    }
    s.push_str(&crate::summary::markdown(r));
    let _ = writeln!(
        s,
        "## How it is measured\n\n\
Everything on 127.0.0.1. The machine is shared and noisy, so every comparison is measured side \
by side in the same run (interleaved rounds where it can be) and given as a ratio; absolute \
numbers move between runs, ratios much less. Raw data: `results.json` beside the page when \
written to another directory (`scripts/bench.sh --out DIR`).\n"
    );

    // Figure 1.
    let _ = writeln!(s, "## 1. Overhead over the raw SDK\n");
    let _ = writeln!(
        s,
        "Uncontended `lock.acquire()` + `guard.release()` cycles per second, against a loop \
that sends the same minimal requests directly: rusqlite on its own connection with the same \
pragmas and statements (run synchronously on one blocking thread: no async hop at all), \
`azure_storage_blob` with the same client options (API version, retry policy, reqwest \
transport, shared-key signing), `aws-sdk-dynamodb` on leasehold's own client with the \
same update and condition expressions, `aws-sdk-s3` on leasehold's own client with the same \
requests as leasehold's warm path (a conditional `PutObject` of a record of leasehold's layout with a \
fresh nonce, `If-Match` the ETag of the last write, and a `GetObject` of the store's epoch marker to \
acquire; a conditional `PutObject` to release), `tokio-postgres`, `mysql_async` and redis-rs on connections of their own \
with leasehold's statements and scripts (over TCP to the URL's address, as leasehold connects: \
`mysql_async` would otherwise move a loopback connection to the server's Unix socket), `etcd-client` on a client of its own with leasehold's \
etcd requests (a compare-and-put `Txn` on a session's etcd lease to acquire, a compare-and-delete \
`Txn` to release, a new session's `LeaseGrant` now and then), and `zookeeper-client` on a session of its own \
with leasehold's ZooKeeper requests (a read of the key's record and a `setData` conditional on its version \
to acquire, a `setData` conditional on the version of that write to release). Many short rounds (a quarter of a second of each loop) \
alternate which loop goes first, so that both loops see the same machine (disk and scheduling \
latency drift over seconds); a quarter of a second is shorter than the fairness probe \
(section 3: after 1 s of local handoffs, an acquisition first leaves the key free for a poll \
interval, 100 ms where waiters poll, 10 ms where the store wakes them), so no round pays it, \
where a loop that takes one key back to back for longer does (about 9% and 1% of its time); \
the ratio is the median of the rounds' ratios, and the rounds' \
column gives their number and the range of the middle half of them. Requests are counted on the wire (an Azure pipeline policy, \
the DynamoDB and S3 clients' interceptors, the etcd and ZooKeeper backends' own counts of their requests; SQLite: \
transactions; PostgreSQL, MySQL and Redis: statements and scripts, i.e. backend calls, a MySQL acquisition counted as one).\n\
Targets: leasehold ≥ 0.95× the raw loop (SQLite: ≥ 0.9× the raw loop in async code; the \
synchronous raw loop has no target), and requests per cycle = the protocol's minimum.\n"
    );
    let _ = writeln!(
        s,
        "| store | leasehold cycles/s | raw cycles/s | ratio | rounds: middle half | requests/cycle (leasehold / raw / minimum) | target |\n|---|---|---|---|---|---|---|"
    );
    for o in &r.overhead {
        let rounds = middle_half(&o.round_ratios);
        let target = overhead_ok(o).map_or("–", verdict);
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | **{:.2}×** | {} | {:.2} / {:.2} / {} | {} |",
            o.store,
            o.leasehold_cps,
            o.raw_cps,
            o.ratio,
            rounds,
            o.leasehold_requests_per_cycle,
            o.raw_requests_per_cycle,
            o.minimum,
            target
        );
    }
    let _ = writeln!(s);
    if r.overhead.iter().any(|o| o.store == S3_LABEL) {
        let _ = writeln!(
            s,
            "{S3_LABEL} is S3's protocol on moto, a Python emulator of S3 (one process, in memory): \
its absolute numbers are moto's, far below S3's own and below the other emulators'; what the \
figures say about leasehold is the ratio to the raw loop on the same emulator in the same run, and \
the requests per cycle. The minimum is leasehold-s3's warm path (this process wrote the key last): \
a conditional `PutObject` and a read of the epoch marker to acquire (the marker tells a grant on our \
own last write from one on a restored copy of it), a conditional `PutObject` to release.\n"
        );
    }
    for o in &r.overhead {
        if let Some(target) = overhead_target(&o.store).filter(|t| o.ratio < *t) {
            let why = match o.store.as_str() {
                crate::results::SQLITE_HOP => "This raw loop hops onto tokio's blocking pool for each of its two transactions, as async code must, so what is left is leasehold's own work per cycle: the protocol's epoch check and file-identity checks inside the transactions, the shared `flock` on the database's directory that proves no lease is held there (see the SQLite module docs), the guard (its renewal task starts only when the first renewal is due, from one scheduler per runtime), the local queue and metrics.",
                "SQLite" => "Each leasehold operation is a `spawn_blocking` hop onto tokio's blocking pool, plus the work listed for the next row; the raw loop runs both statements back to back on one thread. A cycle is one fsync (the acquisition commits with `synchronous=FULL`, the release with `NORMAL`), so the fixed costs show as far as the disk is fast.",
                "Azurite" => "The raw loop and leasehold send the same three requests; the difference is leasehold's per-call work (the guard, record encoding, the snapshot cache) and the noise of a node.js emulator sharing two cores.",
                "PostgreSQL" => "Both send the same two statements, one round trip each, each prepared once on its connection; leasehold takes a connection from its pool for each statement (the raw loop keeps one), and adds its per-call work (the guard, metrics). The server shares the two cores with both.",
                "MySQL" => "Both send the same six statements (the acquire's transaction: begin, the epoch row shared, the key's row locked, the grant, commit; the release), each prepared once on its connection; leasehold takes a connection from its pool for each operation (the raw loop keeps one), and adds its per-call work (the guard, metrics). The server shares the two cores with both.",
                "Redis" => "Both send the same two scripts (EVALSHA), one round trip each, each on one multiplexed connection; the difference is leasehold's per-call work (the guard, metrics, the epoch check of each answer). The server shares the two cores with both.",
                S3_LABEL => "Both send the same three requests on the same client (a conditional `PutObject` of a whole record of a few hundred bytes with a fresh nonce and a read of the epoch marker to acquire, a conditional `PutObject` to release); the difference is leasehold's per-call work (the guard, encoding the record, the backend's memory of its last write) and the noise of a Python emulator sharing two cores.",
                "etcd" => "Both send the same two requests on one gRPC channel each, the minimum of the protocol: acquire one `Txn` (comparing the marker's and the record's values with those last seen and the holder key's absence, putting the holder key on the process's session lease and the record with the next fencing token), release one `Txn` (deleting the holder key if it still has our value), and a new session (`LeaseGrant`) every 1.5 s. The difference is leasehold's per-call work (the guard, JSON encoding of the records). etcd commits every write with an fsync and shares the two cores with both.",
                "ZooKeeper" => "Both send the same three requests on one session each (a read of the record and a version-checked `setData` to acquire, a `setData` checked against that write's version to release), records of the same JSON layout. The difference is leasehold's per-call work (the guard, the record's encoding, the backend's memory of its last write for renewals). ZooKeeper logs every write with an fsync and, a JVM, shares the two cores with both.",
                _ => "Both send the same two requests on the same client; the difference is leasehold's per-call work (the guard, decoding the returned item) and the noise of a JVM emulator sharing two cores.",
            };
            let _ = writeln!(
                s,
                "- **{}: {:.2}×, below {target}×.** {why}\n",
                o.store, o.ratio
            );
        }
        if (o.leasehold_requests_per_cycle - o.minimum as f64).abs() >= 0.05 {
            let _ = writeln!(
                s,
                "- **{}: {:.2} requests per cycle, minimum {}.** See the report's notes.\n",
                o.store, o.leasehold_requests_per_cycle, o.minimum
            );
        }
    }

    // Figure 2.
    let _ = writeln!(s, "## 2. Handoff latency\n");
    let _ = writeln!(
        s,
        "From the moment a holder calls `release()` to the moment a waiter's `acquire()` \
returns the guard, p50 / p99, default options (polling every 50–100 ms, random). The holder \
keeps the lock for a random time (same process 25–40 ms, other process 100–200 ms), then leaves it to the waiter so that \
the release falls at a random point of the waiter's polling; only acquisitions by a waiter \
that was already waiting count. Timestamps are `CLOCK_MONOTONIC`, shared by all processes.\n\
Targets: p50 < 1 ms in the same process; from another process p50 < 5 ms where the store \
wakes waiters (SQLite on one machine; PostgreSQL, Redis, etcd and ZooKeeper across machines) and < 50 ms \
where waiters poll (the emulators, MySQL); a waiting process makes at most 20 requests/s whatever its \
number of waiting tasks.\n"
    );
    let _ = writeln!(
        s,
        "| store | same process p50 / p99 | target < 1 ms | other process p50 / p99 | target |\n|---|---|---|---|---|"
    );
    for h in &r.handoff {
        let same_ok = h.same_process.is_some_and(|l| l.p50_ms < 1.0);
        let target = handoff_target_ms(&h.store);
        let other = match &h.other_process {
            Some(l) => format!("< {target:.0} ms: {}", verdict(l.p50_ms < target)),
            None => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            h.store,
            lat(&h.same_process),
            verdict(same_ok),
            lat(&h.other_process),
            other
        );
    }
    let tasks: Vec<usize> = r
        .handoff
        .iter()
        .find(|h| !h.waiting_requests.is_empty())
        .map(|h| h.waiting_requests.iter().map(|w| w.0).collect())
        .unwrap_or_default();
    if !tasks.is_empty() {
        let _ = writeln!(
            s,
            "\nRequests per second sent by one process whose tasks all wait on a key held by another process:\n"
        );
        let head: Vec<String> = tasks.iter().map(|t| format!("{t} task(s)")).collect();
        let _ = writeln!(
            s,
            "| store | {} | target ≤ 20/s |\n|---|{}---|",
            head.join(" | "),
            "---|".repeat(tasks.len())
        );
        for h in r.handoff.iter().filter(|h| !h.waiting_requests.is_empty()) {
            let cells: Vec<String> = h
                .waiting_requests
                .iter()
                .map(|(_, v)| format!("{v:.1}"))
                .collect();
            let ok = h.waiting_requests.iter().all(|(_, v)| *v <= 20.0);
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                h.store,
                cells.join(" | "),
                verdict(ok)
            );
        }
    }
    let _ = writeln!(
        s,
        "\nA waiter in the same process is woken by the release itself and makes one attempt, so \
its latency is the release request plus one acquire request. A waiter in another process is \
woken by the release where the store can tell it (`Backend::watch_release`: PostgreSQL's \
LISTEN/NOTIFY, Redis's pub/sub, etcd's watch, ZooKeeper's persistent watch on the store's records, \
SQLite's same-machine notification), and otherwise learns of the release at its next poll: with pauses drawn from 50–100 ms the wait \
for that poll is about 37 ms at the median, plus the request(s) of the attempt (Azure: read, \
write, lease; S3: read, write and a read of the store's epoch marker, as the key was last written \
by another process). Only the first task of a process polls; the others queue behind it in the \
process, so the request rate does not grow with the number of tasks.\n"
    );
    for h in &r.handoff {
        if let Some(l) = h.same_process.filter(|l| l.p50_ms >= 1.0) {
            let why = match h.store.as_str() {
                "etcd" => "The waiter is woken at once, but the holder's release is one `Txn` and the waiter's acquisition another (two when the key was granted elsewhere since the waiter last saw it), each a Raft write committed with an fsync by a server sharing the two cores. The target is below those round trips on this machine, so it cannot be met by the library alone on this store.",
                "SQLite" => "The waiter is woken at once, but the holder's release is a transaction and the waiter's attempt another, committed with an fsync (a grant is durable before it is answered), each a hop onto tokio's blocking pool and back: the two transactions are most of the time.",
                S3_LABEL => "The waiter is woken at once, but the holder's release is one conditional `PutObject`, and the waiter's attempt another and a read of the epoch marker (its process's last write to the key is the holder's release: no read of the key), each a full round trip to a Python emulator sharing the two cores. The target is below one moto round trip on this machine, so it cannot be met by the library alone on this store.",
                "MySQL" => "The waiter is woken at once by the release in its own process, but the holder's release is one statement and the waiter's attempt a transaction of five (each a round trip, the commit flushed to the server's log), with a server sharing the two cores.",
                "ZooKeeper" => "The waiter is woken at once, but the holder's release is a version-checked `setData`, and the waiter's attempt a read and another `setData`, each write logged with an fsync by a JVM server sharing the two cores.",
                "PostgreSQL" => "The waiter is woken at once, but the holder's release is one statement (committed without waiting for a WAL flush: a lost release only holds the key to its expiry) and the waiter's attempt another, whose commit the server flushes to its WAL before answering (a grant is durable before it is answered), with a server sharing the two cores.",
                _ => "The waiter is woken at once, but its attempt is a full round trip to the store (Azurite: a read, a conditional write and a lease request; DynamoDB Local: one conditional update), after the holder's own release request. The target is below one emulator round trip on this machine, so it cannot be met by the library alone on these stores.",
            };
            let _ = writeln!(
                s,
                "- **{}, same process: p50 {:.2} ms, target < 1 ms missed.** {why}\n",
                h.store, l.p50_ms
            );
        }
        let target = handoff_target_ms(&h.store);
        if let Some(l) = h.other_process.filter(|l| l.p50_ms >= target) {
            let why = match h.store.as_str() {
                S3_LABEL => format!(
                    " The waiter learns of the release at its next poll (about 37 ms at the \
median), then sends three requests one after the other, each a round trip to moto{}: the read that \
finds the key free, the conditional write, and the read of the store's epoch marker that a grant on \
a record another process wrote needs (leasehold-s3's docs, \"A grant lands only in its epoch\"). \
The poll and those three round trips are the protocol's cost on this emulator, above the target.",
                    moto_scale(r)
                ),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "- **{}, other process: p50 {:.1} ms, target < {target:.0} ms missed.**{why}\n",
                h.store, l.p50_ms
            );
        }
    }

    // Figure 3.
    let _ = writeln!(s, "## 3. Contention\n");
    if let Some(c) = r.contention.first() {
        let _ = writeln!(
            s,
            "{} processes × {} tasks, each task in a loop: `acquire()` (default options), hold 1 ms, \
`release()`, for a fixed time. Passes are acquisitions; the longest wait is the longest single \
`acquire()` of any task (a task still waiting at the end counts its wait so far); \"to another \
process\" is the share of consecutive passes that changed process.\n",
            c.procs, c.tasks
        );
    }
    let _ = writeln!(
        s,
        "| store | seconds | passes/s | requests/s (all processes) | longest wait | passes to another process | passes per process (min–max) | tasks never served | errors | targets |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for c in &r.contention {
        let wait_target = longest_wait_target_ms(&c.store);
        let ok = contention_ok(c);
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} ms | {:.0} % | {}–{} | {} | {} | longest wait ≤ {:.0} s, none unserved, max ≤ 3× min: {} |",
            c.store,
            c.seconds,
            c.passes_per_s,
            c.requests_per_s,
            c.longest_wait_ms,
            c.cross_process_share * 100.0,
            c.min_process_passes,
            c.max_process_passes,
            c.starved_tasks,
            c.errors,
            wait_target / 1000.0,
            verdict(ok)
        );
    }
    let _ = writeln!(
        s,
        "\nInside a process the lock passes in FIFO order with a direct wake-up. So that a process \
whose tasks queue does not keep the lock, a local waiter taking over from a local release first \
leaves the key free for a moment when another process held the key in the last 2 s (the store \
answered \"held\" to this process, or its fencing token jumped), or after 10 poll intervals of local \
handoffs (1 s): for 10 ms on stores whose releases wake other processes' waiters (SQLite, \
PostgreSQL, Redis, etcd, ZooKeeper), else for one longest poll interval, in which every other process's \
waiter polls. Targets (issue 12): no task never \
served, the longest single wait ≤ 2 s on SQLite and ≤ 5 s on the other stores, and the most served \
process at most 3× the least served.\n"
    );
    for c in r.contention.iter().filter(|c| !contention_ok(c)) {
        let tasks = c.procs * c.tasks;
        let why = match c.store.as_str() {
            S3_LABEL => format!(
                " The processes sent {:.0} requests/s in all, about what one moto process \
serves on this machine{}: moto is the bottleneck. Every waiting process polls (10–20 requests/s \
each, figure 2), so the other processes' polls are most of that load, and each pass's own requests \
(the release, then the next holder's read, conditional write and marker read) queue behind them. \
At {:.0} passes/s, {tasks} tasks need {:.1} s for one turn each, and the order among processes is \
whichever poll comes first.",
                c.requests_per_s,
                moto_scale(r),
                c.passes_per_s,
                tasks as f64 / c.passes_per_s.max(1e-9)
            ),
            _ => String::new(),
        };
        let mut missed = Vec::new();
        if c.longest_wait_ms > longest_wait_target_ms(&c.store) {
            missed.push(format!(
                "longest wait {:.1} s, target ≤ {:.0} s",
                c.longest_wait_ms / 1000.0,
                longest_wait_target_ms(&c.store) / 1000.0
            ));
        }
        if c.starved_tasks > 0 {
            missed.push(format!("{} task(s) never served", c.starved_tasks));
        }
        if c.max_process_passes > c.min_process_passes.saturating_mul(3) {
            missed.push(format!(
                "passes per process {}–{}, more than 3×",
                c.min_process_passes, c.max_process_passes
            ));
        }
        let _ = writeln!(s, "- **{}: {}.**{why}\n", c.store, missed.join("; "));
    }

    // Figure 4.
    let _ = writeln!(s, "## 4. Holding many leases\n");
    let _ = writeln!(
        s,
        "One process acquires N leases (32 at a time), holds them, then releases them. Renewal is \
every TTL/3 (default). \"On schedule\": the longest time any lease went without a grant or a \
successful renewal, at most 1.5 intervals; none may be lost (\"expected\" renewals: whole intervals in the hold, so a lease whose last renewal falls just after the end counts one short). CPU and memory are per held lease \
(memory: resident set while holding minus before acquiring).\n"
    );
    let _ = writeln!(
        s,
        "| store | leases | TTL / renew every | acquire all | held | renewals (expected) | longest gap | lost | CPU per lease per s | RSS per lease | on schedule |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for m in &r.many {
        let x = &m.report;
        let cpu_per = x.cpu_ms * 1000.0 / (x.leases.max(1) as f64 * (x.held_ms / 1000.0).max(1e-9));
        let rss_per = x.rss_holding.saturating_sub(x.rss_before) as f64 / x.leases.max(1) as f64;
        let ok = many_ok(x);
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} s / {:.1} s | {:.1} s | {:.1} s | {} ({}) | {:.2} s | {} | {:.1} µs | {:.1} KiB | {} |",
            m.store,
            x.leases,
            x.ttl_ms as f64 / 1000.0,
            x.renew_every_ms as f64 / 1000.0,
            x.acquire_ms / 1000.0,
            x.held_ms / 1000.0,
            x.renewals,
            x.renewals_expected,
            x.max_gap_ms / 1000.0,
            x.lost,
            cpu_per,
            rss_per / 1024.0,
            verdict(ok)
        );
    }
    let _ = writeln!(
        s,
        "\nEvery lease has its own renewal task (a tokio timer), started when its first renewal is due by one \
scheduler task per runtime (a lease released before then costs no task); renewals are one request each \
(S3: two, the write and a read of the epoch marker; SQLite: one fsync'd transaction, so the disk sets the ceiling: N / (TTL/3) renewals per second).\n"
    );
    if r.many.iter().any(|m| m.store == S3_LABEL) {
        let _ = writeln!(
            s,
            "{S3_LABEL} holds fewer leases than the other emulators: a renewal on S3 is two requests \
(the conditional write and a read of the epoch marker), and one moto process serves less on this \
machine{} than 1,000 leases' renewals ask (400 requests/s), so it would measure moto's queue rather \
than the renewals' schedule. Each key's first grant waits a second (leasehold-s3's \
docs, \"A key's first object\"), so acquiring them all takes N / 32 seconds at least.\n",
            moto_scale(r)
        );
    }

    // Figure 5.
    let _ = writeln!(s, "## 5. The CLI\n");
    if let Some(c) = &r.cli {
        let _ = writeln!(
            s,
            "Wall time of one `leasehold --store sqlite:FILE run k -- true` against \
`flock FILE.lock true` (util-linux), in pairs (`flock`, then `leasehold run`, nothing else \
between them, as issue 55 timed it), median of {} pairs{}. Target (issue 12, \
restated by issue 55): leasehold ≤ 2.75× flock on a quiet machine.\n\n\
| leasehold run | flock | ratio | target ≤ 2.75× |\n|---|---|---|---|\n| {:.2} ms | {:.2} ms | **{:.2}×** | {} |\n\n\
`flock` is one `flock(2)` on a file and a fork/exec. `leasehold run` also loads a larger binary \
(every store's client but the cloud stores', which `leasehold-cloud` has, for the dynamic loader to relocate at every start), starts a \
tokio runtime, opens SQLite (WAL; the store's epoch is read once, at opening), commits the \
acquisition (`synchronous=FULL`: one fsync, and SQLite syncs the directory on a connection's first \
WAL write) and the release (`NORMAL`: none), and runs the command \
under the watchdog that stops its whole process tree on its own (a copy of leasehold forked as it \
starts: a second process, which makes the command's cgroup, starts the keeper and forks the \
command's process into the cgroup while the lock is taken, so that the grant is followed by the \
command's exec alone; the command in a process group and, where the machine allows, that \
cgroup). The WAL is left for the next run \
while it is under 256 KiB (checkpointing it at every close cost two more fsyncs, and re-creating \
it one more). A few milliseconds in all, for a lease that survives a crash of its holder, carries \
a fencing token and works the same on every store.\n",
            c.runs,
            cli_when(c),
            c.leasehold_ms,
            c.flock_ms,
            c.ratio,
            verdict(c.ratio <= CLI_TARGET)
        );
        if c.parts.len() == crate::results::CLI_PARTS.len() {
            cli_parts(&mut s, c);
        }
        if c.binary_bytes > 0 {
            let _ = writeln!(
                s,
                "The `leasehold` binary measured ({} build, as `cargo install` makes it when \
`release`: stripped, no debug info, one codegen unit with fat LTO): **{:.1} MB**.\n",
                c.binary_profile,
                c.binary_bytes as f64 / 1e6
            );
        }
    }

    // Figure 6.
    let _ = writeln!(s, "## 6. Peers, same emulator, same run\n");
    if !r.peers.is_empty() {
        let _ = writeln!(
            s,
            "The lock most code takes on each store, beside leasehold on the same store in the \
same run: Python libraries (`scripts/peers/`), and on etcd `etcd-client`'s own lock \
(`Lock`/`Unlock` on a session lease, as `etcdctl lock`; run by the bench binary, \
`leasehold-bench peer-etcd`, as Python has no maintained etcd client). Each runs uncontended \
cycles, then a handoff to a waiter in another process (held 0.1–0.2 s, then released).\n"
        );
        let _ = writeln!(
            s,
            "| peer | store | peer cycles/s | leasehold cycles/s | leasehold / peer | peer requests/cycle | peer handoff p50 / p99 (other process) | leasehold handoff p50 / p99 | peer p50 / leasehold p50 |\n|---|---|---|---|---|---|---|---|---|"
        );
        for p in &r.peers {
            let ratio = match (p.ratio, p.leasehold_cps) {
                // Side by side in figure 1's rounds: their median, and the
                // middle half.
                (Some(r), _) => format!("**{r:.2}×** (rounds {})", middle_half(&p.round_ratios)),
                (None, Some(l)) => format!("**{:.2}×**", l / p.peer_cps),
                (None, None) => "–".into(),
            };
            let h = match (&p.peer_handoff, &p.leasehold_handoff) {
                // A peer faster than leasehold (etcd's, whose waiter is
                // answered by the server itself) needs decimals.
                (Some(a), Some(b)) if a.p50_ms < 10.0 * b.p50_ms => {
                    format!("**{:.2}×**", a.p50_ms / b.p50_ms)
                }
                (Some(a), Some(b)) => format!("**{:.0}×**", a.p50_ms / b.p50_ms),
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
                p.peer,
                p.store,
                p.peer_cps,
                p.leasehold_cps
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or_else(|| "–".into()),
                ratio,
                p.peer_requests_per_cycle
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or_else(|| "–".into()),
                lat(&p.peer_handoff),
                lat(&p.leasehold_handoff),
                h
            );
        }
        let _ = writeln!(s);
        for p in &r.peers {
            if !p.note.is_empty() {
                let _ = writeln!(s, "- {}: {}\n", p.peer, p.note);
            }
        }
    } else {
        let _ = writeln!(s, "Not run (see notes).\n");
    }

    if !r.notes.is_empty() {
        let _ = writeln!(s, "## Notes\n");
        for n in &r.notes {
            let _ = writeln!(s, "- {n}");
        }
        let _ = writeln!(s);
    }
    // Section 7 is measured apart (a clean clone's builds and test run
    // take half an hour): scripts/setup-times.sh writes it beside the page.
    let setup = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/setup-times.md");
    if let Ok(section) = std::fs::read_to_string(setup) {
        let _ = writeln!(s, "{}\n", section.trim_end());
    }
    // Section 8, the Python package against Rust, likewise:
    // scripts/python-bench.py writes it.
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/python-bench.md");
    if let Ok(section) = std::fs::read_to_string(python) {
        let _ = writeln!(s, "{}\n", section.trim_end());
    }
    rw_lock(&mut s, r);
    wait_cost(&mut s, r);
    multi_key(&mut s, r);
    let _ = writeln!(
        s,
        "## Reproduce\n\n```sh\nscripts/bench.sh          # this page and its chart (several minutes)\nscripts/bench.sh --tiny   # a few seconds, to a temporary directory (CI)\nscripts/bench.sh --stores s3 --only 1,2,3 --out DIR   # some stores and figures only\nscripts/bench.sh --only 9 --out DIR   # section 9 alone\nscripts/setup-times.sh    # section 7 (half an hour)\nscripts/python-bench.py --out docs/python-bench.md sqlite:PATH URL   # section 8 (with the package installed)\nURL=\"$(scripts/postgres.sh url)\" .cache/bench-venv/bin/python scripts/pg-handoff-floor.py   # section 10's last handoff comparison\nscripts/cli-builds.py default=target/release/leasehold slim=target/slim/release/leasehold   # section 11 (builds: see the script)\nURL=\"$(scripts/postgres.sh url)\" cargo run --release -p leasehold-bench --example pg_layers -- --spawned   # section 13 (without --spawned: on the block_on thread)\n```"
    );
    s
}

/// "N: low–high", the number of rounds and the range of the middle half of
/// their ratios.
fn middle_half(ratios: &[f64]) -> String {
    let mut sorted = ratios.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => "–".into(),
        n => format!("{n}: {:.2}–{:.2}", sorted[n / 4], sorted[(3 * n) / 4]),
    }
}

/// When figure 5 was measured, as its text says it.
pub(crate) fn cli_when(c: &crate::results::Cli) -> &'static str {
    if c.before_servers {
        ", measured before `scripts/bench.sh` started the servers the other figures need, from \
a copy of the binary written as the figure started"
    } else {
        ", from a copy of the binary written as the figure started"
    }
}

/// Figure 5's ladder: what each command adds to the one before, and the
/// durable floor measured on its own.
fn cli_parts(s: &mut String, c: &crate::results::Cli) {
    let _ = writeln!(
        s,
        "What a run is made of, measured in rounds of their own after the pairs (each round runs \
the commands in another order; median of {} each), so its `run` row need not equal the figure \
above: each command does a part more than the one before.\n\n\
| command | what it adds | wall time | more than the row before |\n|---|---|---|---|",
        c.runs
    );
    let mut before: Option<f64> = None;
    for (part, (_, adds)) in c.parts.iter().zip(crate::results::CLI_PARTS) {
        let more = before.map_or("–".to_string(), |b| format!("{:+.2} ms", part.ms - b));
        let _ = writeln!(s, "| {} | {adds} | {:.2} ms | {more} |", part.name, part.ms);
        before = Some(part.ms);
    }
    let [exec, version, status, run] = [0, 1, 2, 3].map(|i| c.parts[i].ms);
    let durable = c.synced_append_ms + c.synced_dir_ms;
    let rest = run - status - durable - exec;
    let _ = writeln!(
        s,
        "\nThe durable part on its own, in the same rounds: a 4 KiB append to a file and \
`fdatasync` (the acquisition's WAL commit at `synchronous=FULL`) took {:.2} ms, an `fsync` of \
the directory (SQLite's, at a connection's first write to a new WAL) {:.2} ms: {durable:.2} ms \
in all. So of the {:.2} ms that `run` takes over `status`, {durable:.2} ms are the disk's and \
{exec:.2} ms the command's own fork/exec (as `true` alone); the other {rest:.2} ms are the two \
transactions' CPU and the watchdog's work. Loading the binary (`--version` over `true`): \
{:.2} ms; the runtime and opening SQLite (`status` over `--version`): {:.2} ms. A lock with \
leasehold's guarantees on SQLite cannot skip the disk, the command's fork/exec or opening the \
database: `flock` + {durable:.2} ms + {exec:.2} ms = {:.2} ms, {:.1}× `flock`, is the floor of \
this design on this machine before any of leasehold's own work.\n",
        c.synced_append_ms,
        c.synced_dir_ms,
        run - status,
        version - exec,
        status - version,
        c.flock_ms + durable + exec,
        (c.flock_ms + durable + exec) / c.flock_ms,
    );
}

/// Figure 9's longest writer wait (ms): the longest granted, or a longer
/// one cut short by the end of its window.
pub(crate) fn writer_longest_ms(f: &crate::results::RwLockFigure) -> f64 {
    f.writer_wait
        .map_or(0.0, |l| l.max_ms)
        .max(f.writer_cut_short_ms)
}

/// Figure 9's target: the writer's longest wait (a wait cut short by its
/// window's end included) within its bound, and no write hold meeting a
/// read hold.
pub(crate) fn rw_lock_ok(f: &crate::results::RwLockFigure) -> bool {
    writer_longest_ms(f) <= f.bound_ms && f.overlaps == 0
}

/// Section 9: a writer among readers on a reader-writer lock.
fn rw_lock(s: &mut String, r: &Results) {
    let _ = writeln!(s, "## 9. Reader-writer lock: a writer among readers\n");
    let Some(first) = r.rw_lock.first() else {
        let _ = writeln!(s, "Not run (see notes).\n");
        return;
    };
    let _ = writeln!(
        s,
        "{readers} reader processes and one writer process, each a process of its own, on one key's \
`Store::rw_lock_with(KEY, {readers}, options)` (at most {readers} readers at once: every reader \
always finds a slot). Each reader loops: `read_timeout`, hold for a random {r0}–{r1} ms, release, \
pause {think} ms; so their holds overlap all the time, and a writer that had to find no reader \
holding would never get in. The writer loops: pause a random {p0}–{p1} ms, `write_timeout`, hold \
{w} ms, release; its wait is from the call to the grant. The same {readers} reader processes then \
loop the same way on a semaphore of {readers} permits (`Store::semaphore_with`, same TTL) with no \
writer: the throughput a reader-writer lock's readers would have without a writer and without the \
reader's extra read of the key. The run alternates {rounds} window(s) of {win:.1} s on the lock \
with as many on the semaphore (a short gap after each lets holds that straddle its end finish); \
read holds per second are all readers' holds in those windows over their time. Default options \
but the TTL: the shortest of 4 s and the store's minimum (Azure's 15 s), so that the bound says \
something (the default 30 s would allow 20 s). Timestamps are `CLOCK_MONOTONIC`, shared by all \
processes; the machine has two cores shared with the servers, the emulators and other work, so \
the absolute numbers are noisy.\n\
Target (issue 33): the writer's longest wait ≤ 2 × (the longest read + TTL/3), the longest read \
being the longest read hold seen in the run (grant to release call); and no write hold may meet \
a read hold (spans from grant to release call; a meeting would be a safety failure, not a slow \
figure).\n",
        readers = first.readers,
        r0 = first.read_ms.0,
        r1 = first.read_ms.1,
        think = first.think_ms,
        p0 = first.pause_ms.0,
        p1 = first.pause_ms.1,
        w = first.write_ms,
        rounds = first.rounds,
        win = first.window_ms as f64 / 1000.0,
    );
    let _ = writeln!(
        s,
        "| store | TTL | writes | writer's wait p50 / p99 | writer's longest wait | longest read | bound 2 × (longest read + TTL/3) | writes meeting a read | errors | target |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for f in &r.rw_lock {
        let (n, p50p99) = match &f.writer_wait {
            Some(l) => (l.n, format!("{:.1} / {:.1} ms", l.p50_ms, l.p99_ms)),
            None => (0, "–".into()),
        };
        let cut = if f.writer_cut_short_ms > f.writer_wait.map_or(0.0, |l| l.max_ms) {
            " (cut short by the window's end)"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "| {} | {:.0} s | {n} | {p50p99} | **{:.0} ms**{cut} | {:.1} ms | {:.0} ms | {} | {} | {} |",
            f.store,
            f.ttl_ms as f64 / 1000.0,
            writer_longest_ms(f),
            f.longest_read_ms,
            f.bound_ms,
            f.overlaps,
            f.errors,
            if f.writer_wait.is_none() && rw_lock_ok(f) {
                "never granted (a short run)"
            } else {
                verdict(rw_lock_ok(f))
            }
        );
    }
    let _ = writeln!(
        s,
        "\n| store | read holds/s on the lock (with the writer) | on the semaphore (no writer) | lock / semaphore | readers' wait on the lock p50 / p99 | most reads at once (lock / semaphore) | requests/s, all processes (lock / semaphore) |\n|---|---|---|---|---|---|---|"
    );
    for f in &r.rw_lock {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1} | **{:.2}×** | {} | {} / {} | {:.0} / {:.0} |",
            f.store,
            f.rw_reads_per_s,
            f.sem_reads_per_s,
            f.ratio,
            f.reader_wait
                .map(|l| format!("{:.1} / {:.1} ms", l.p50_ms, l.p99_ms))
                .unwrap_or_else(|| "–".into()),
            f.max_concurrent_reads,
            f.max_concurrent_permits,
            f.rw_requests_per_s,
            f.sem_requests_per_s
        );
    }
    let _ = writeln!(
        s,
        "\nA writer takes the key itself, then reads the reader slots and, while some are held, keeps \
the key and waits for their releases (woken by them where the store tells releases: SQLite, \
PostgreSQL, Redis, etcd, ZooKeeper; else at its next poll, every 50–100 ms); readers that come after find the \
key held and wait behind it. So its wait is about the longest read still running when it asked, \
plus the time to learn of that read's release and its own request(s); the bound's TTL/3 is the \
renewal interval, slack for a reader whose release is slow. Readers pay for the writer twice: \
they wait out each write (its drain, its hold and the handoff back: up to a poll interval where \
releases are polled), and each read hold costs two more requests (the read of the key after the \
slot's grant, and of the slot after that, which a loss of the store's data in between would show), \
which is why the ratio is below 1 even between writes.\n"
    );
    for f in r.rw_lock.iter().filter(|f| !rw_lock_ok(f)) {
        let mut missed = Vec::new();
        if writer_longest_ms(f) > f.bound_ms {
            missed.push(format!(
                "the writer's longest wait {:.0} ms, bound {:.0} ms",
                writer_longest_ms(f),
                f.bound_ms
            ));
        }
        if f.overlaps > 0 {
            missed.push(format!(
                "{} write hold(s) met a read hold: a safety failure of the lock",
                f.overlaps
            ));
        }
        let _ = writeln!(s, "- **{}: {}.**\n", f.store, missed.join("; "));
    }
}

/// Per-request list prices the cost of figure 15 is reckoned at: (store
/// label, the price of one request in US dollars, what the price is).
const REQUEST_PRICES: [(&str, f64, &str); 2] = [
    (
        "DynamoDB Local",
        0.625 / 1e6,
        "DynamoDB on-demand, us-east-1: $0.625 per million write request units (the price since AWS halved it on 2024-11-01; a failed conditional `UpdateItem` of an item under 1 KB costs one)",
    ),
    (
        crate::stores::S3_LABEL,
        0.005 / 1e3,
        "S3 Standard, us-east-1: $0.005 per 1,000 PUT requests (a held attempt may be a GET, $0.0004 per 1,000: this is the upper bound)",
    ),
];

/// Figure 15's target for a row that backed off, on a store that cannot
/// wake waiters (issue 55): at most 1 request a second, at least 10× fewer
/// than the row of the same store that polled throughout, and a handoff
/// p50 after the long wait no longer than the cap. `None` where the row
/// has no target.
pub(crate) fn wait_cost_ok(r: &Results, w: &crate::results::WaitCost) -> Option<bool> {
    let polling_store = matches!(
        w.store.as_str(),
        "Azurite" | "DynamoDB Local" | crate::stores::S3_LABEL
    );
    let before = r.wait_cost_before(w).filter(|_| polling_store)?;
    let fewer = before.requests_per_s / w.requests_per_s.max(1e-9);
    let p50_ok = w.handoff.is_some_and(|l| l.p50_ms <= w.cap_ms as f64);
    Some(w.requests_per_s <= 1.0 && fewer >= 10.0 && p50_ok)
}

fn wait_cost(s: &mut String, r: &Results) {
    let _ = writeln!(s, "## 15. What a long wait costs\n");
    let Some(first) = r.wait_cost.first() else {
        let _ = writeln!(s, "Not run (see notes).\n");
        return;
    };
    let longest = first.waits_s.iter().cloned().fold(0.0, f64::max);
    let _ = writeln!(
        s,
        "On every store at once, {n} waiter(s) per store and way of waiting, each on a key of its own \
that a holder (the default options: TTL 30 s) keeps, each waiter a store client of its own so \
that its requests are its own (HTTP requests on Azurite, DynamoDB Local and moto, gRPC requests \
on etcd and ZooKeeper, transactions or scripts on the others). The holders release from half the longest wait \
({half:.0} s) to its end ({longest:.0} s), spread evenly; the handoff is from the release call to \
the waiter's grant. Two ways of waiting side by side in the same run: backing off to the poll cap \
(`LockOptions::poll_cap`, default 2 s: quick polls for 2 s and whenever the key changes hands, \
then doubling while the same holder keeps it, to 1–2 s), and polling every 50–100 ms throughout, \
as every wait did before the cap (a cap equal to the poll interval's max never backs off). \
Requests a second are all waiters' requests over all their waiting time.\n\
Targets (issue 55): on the stores that cannot wake waiters (Azure Blob, DynamoDB, S3) at most 1 \
request a second averaged over a long wait, at least 10× fewer than before, and a handoff p50 \
after a long wait no longer than the cap.\n",
        n = first.waits_s.len(),
        half = longest / 2.0,
    );
    let _ = writeln!(
        s,
        "| store | way of waiting | requests / s | per hour | requests in the longest wait | handoff after the wait p50 / max | target |\n|---|---|---|---|---|---|---|"
    );
    for w in &r.wait_cost {
        let longest_i = w
            .waits_s
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i);
        let longest_n = longest_i
            .map(|i| format!("{} in {:.0} s", w.requests[i], w.waits_s[i]))
            .unwrap_or_else(|| "–".into());
        let handoff = w
            .handoff
            .map(|l| format!("{:.0} / {:.0} ms", l.p50_ms, l.max_ms))
            .unwrap_or_else(|| "–".into());
        let target = match (r.wait_cost_before(w), wait_cost_ok(r, w)) {
            (Some(b), Some(ok)) => format!(
                "{}: {:.0}× fewer than before",
                verdict(ok),
                b.requests_per_s / w.requests_per_s.max(1e-9)
            ),
            (Some(b), None) => format!(
                "{:.0}× fewer than before",
                b.requests_per_s / w.requests_per_s.max(1e-9)
            ),
            (None, _) => String::new(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.0} | {} | {} | {} |",
            w.store,
            w.mode,
            w.requests_per_s,
            w.requests_per_s * 3600.0,
            longest_n,
            handoff,
            target
        );
    }
    let _ = writeln!(s);
    let priced: Vec<_> = REQUEST_PRICES
        .iter()
        .filter(|(store, _, _)| r.wait_cost.iter().any(|w| w.store == *store))
        .collect();
    if priced.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "What 100 waiters waiting an hour would cost at the rates above, at list prices (as of \
2026-11-28; the emulators' request counts, the real services' prices):\n"
    );
    let _ = writeln!(
        s,
        "| store | way of waiting | requests, 100 waiters × 1 h | cost |\n|---|---|---|---|"
    );
    for (store, price, _) in &priced {
        for w in r.wait_cost.iter().filter(|w| w.store == *store) {
            let n = w.requests_per_s * 3600.0 * 100.0;
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | ${:.2} |",
                w.store,
                w.mode,
                n,
                n * price
            );
        }
    }
    let _ = writeln!(s);
    for (_, _, what) in &priced {
        let _ = writeln!(s, "- {what}.");
    }
    let _ = writeln!(
        s,
        "- Azure Blob bills lease operations by its tier and operation type; its request counts are \
above, and its price per 10,000 operations on the Azure pricing page turns them into dollars the \
same way.\n"
    );
}

fn multi_key(s: &mut String, r: &Results) {
    let _ = writeln!(s, "## 16. Several keys at once\n");
    if r.multi_key.is_empty() {
        let _ = writeln!(s, "Not run (see notes).\n");
        return;
    }
    let _ = writeln!(
        s,
        "Uncontended cycles of a multi-key lock (`Store::lock_all`: every key taken at once where the store \
can, else in byte order one after the other; then all released side by side) against \
the same keys' single locks taken one after the other and released one after the other, as code \
without it would; in alternating rounds, as figure 1's. Requests are counted as figure 1 counts \
them, a batch as one request. On SQLite, PostgreSQL, MySQL, Redis, etcd and DynamoDB a \
multi-key lock's first attempt asks for every key in one request (`Backend::try_acquire_all`: \
one transaction and one commit on the SQL stores, PostgreSQL's two round trips, `BEGIN` \
pipelined with each key's statement, then `COMMIT`; one script on Redis; one `Txn` on etcd; one \
`TransactWriteItems` on DynamoDB, each key's write conditional on the fence last seen for it); \
on the other stores it sends what its keys' single locks send, one acquisition per key \
(ZooKeeper's `multi` is not used yet; Azure and S3 have no request over several blobs or \
objects). Its releases go side by side.\n"
    );
    let _ = writeln!(
        s,
        "| store | keys | multi-key cycles/s | single locks cycles/s | ratio (median of rounds) | requests / cycle: multi-key / single locks |\n|---|---|---|---|---|---|"
    );
    for m in &r.multi_key {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.0} | {:.2}× | {:.1} / {:.1} |",
            m.store,
            m.keys,
            m.multi_cps,
            m.singles_cps,
            m.ratio,
            m.multi_requests_per_cycle,
            m.singles_requests_per_cycle
        );
    }
    let _ = writeln!(s);
}
