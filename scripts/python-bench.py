#!/usr/bin/env python3
"""Acquire + release cycles per second from Python against the same cycles
from Rust, side by side, on the same store in the same process.

The Python loop is `held = lock.acquire(); held.release()` through the
`leasehold` package; the Rust loop is `lock.acquire().await?.release()
.await?` in the extension's own Rust code (Target.bench_rust_cycles: the
same library, the same build and the same store, no Python between
cycles), run as a Rust program runs it (tokio's `block_on`), and again as
the package's blocking calls wait (the wrapper's own cost). Short rounds
alternate which loop goes first; the ratio is the median of the rounds'
ratios (Python / Rust), as in docs/benchmarks.md.

    python scripts/python-bench.py [--new] [--rounds 16 --seconds 0.25] [--out FILE] \\
        SQLite=sqlite:/tmp/bench.db PostgreSQL=postgres://... redis://... \\
        [--peer redis-py=redis://... --peer pg-advisory=postgres://... \\
         --peer dynamodb-lock=http://127.0.0.1:8000 --peer azure-lease=CONNECTION_STRING]

With --peer, the same rounds also run the lock most Python code takes on
that store (the peers of docs/benchmarks.md, figure 6) against leasehold's
Python cycles on the same server, in the same process (the peer's own
library needs to be installed: redis, psycopg, python-dynamodb-lock and
boto3, azure-storage-blob).

Run it with the `leasehold` package installed (built with which profile
is the caller's to say: see docs/benchmarks.md).
"""

import argparse
import json
import pathlib
import statistics
import sys
import time
import uuid

import leasehold


def python_cycles(lock: "leasehold.Lock", seconds: float) -> int:
    cycles = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        lock.acquire().release()
        cycles += 1
    return cycles


def alternate(rounds: int, seconds: float, ours, theirs) -> dict:
    """`rounds` short rounds of two cycle loops (each `fn(seconds) ->
    cycles`), alternating which goes first; their rates' medians and the
    median of the rounds' ratios (ours / theirs)."""
    our_rates, their_rates, ratios = [], [], []
    for i in range(rounds):
        order = [ours, theirs] if i % 2 == 0 else [theirs, ours]
        rate = {}
        for loop in order:
            start = time.perf_counter()
            n = loop(seconds)
            rate[id(loop)] = n / (time.perf_counter() - start)
        our_rates.append(rate[id(ours)])
        their_rates.append(rate[id(theirs)])
        ratios.append(rate[id(ours)] / rate[id(theirs)])
    q = statistics.quantiles(ratios, n=4)
    return {
        "ours": statistics.median(our_rates),
        "theirs": statistics.median(their_rates),
        "ratio": statistics.median(ratios),
        "q1": q[0],
        "q3": q[2],
        "rounds": rounds,
    }


def our_lock(url: str, new: bool):
    # --new: the caller states the stores are new (`leasehold init --new`),
    # so they grant at once, without a new store's quarantine.
    # A store that already exists (a peer's URL names the default table or
    # prefix, which an earlier run made) is opened as it is.
    store = None
    if new:
        try:
            store = leasehold.init(url, new=True)
        except leasehold.UsageError as e:
            if "already exists" not in str(e):
                raise
    if store is None:
        store = leasehold.open(url)
    lock = store.lock(f"bench-{uuid.uuid4().hex[:8]}")
    lock.acquire().release()  # warm: connections, the store's epoch
    return store, lock


def measure(url: str, rounds: int, seconds: float, new: bool) -> dict:
    store, lock = our_lock(url, new)
    ours = lambda s: python_cycles(lock, s)  # noqa: E731
    r = alternate(rounds, seconds, ours, lambda s: lock._native.bench_rust_cycles(s))
    same = alternate(rounds, seconds, ours, lambda s: lock._native.bench_rust_cycles(s, same_wait=True))
    return {
        "store": store.url,
        "python": r["ours"],
        "rust": r["theirs"],
        "same": same,
        **r,
    }


def cycles_of(cycle):
    """A loop of `cycle()` (one acquire + release) for `seconds`."""

    def loop(seconds: float) -> int:
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            cycle()
            n += 1
        return n

    return loop


def peer_redis_py(url: str):
    import redis

    lock = redis.Redis.from_url(url.split("?")[0]).lock(f"peer-{uuid.uuid4().hex[:8]}", timeout=30)

    def cycle():
        if not lock.acquire(blocking=False):
            raise RuntimeError("uncontended acquire failed")
        lock.release()

    return cycle


def peer_pg_advisory(url: str):
    import psycopg

    conn = psycopg.connect(url.split("?")[0], autocommit=True)
    key = 74_210_101

    def cycle():
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    return cycle


def peer_dynamodb_lock(endpoint: str):
    import boto3
    from python_dynamodb_lock.python_dynamodb_lock import DynamoDBLockClient

    # DynamoDB Local's clients as figure 6's peer makes them (scripts/peers).
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "peers"))
    import dynamodb_lock

    dynamodb_lock.ENDPOINT = endpoint
    local = dynamodb_lock.local

    table = "peer_pylock_" + uuid.uuid4().hex[:8]
    low = local(boto3.client)
    DynamoDBLockClient.create_dynamodb_table(low, table_name=table)
    low.get_waiter("table_exists").wait(TableName=table)
    client = DynamoDBLockClient(local(boto3.resource), table_name=table)

    def cycle():
        client.release_lock(client.acquire_lock("cycles"))

    return cycle


def peer_azure_lease(connection_string: str):
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(connection_string)
    container = service.get_container_client("peer" + uuid.uuid4().hex[:12])
    container.create_container()
    blob = container.get_blob_client("lock")
    blob.upload_blob(b"")

    def cycle():
        blob.acquire_lease(lease_duration=30).release()

    return cycle


def azure_url(connection_string: str) -> str:
    import os

    # leasehold's azblob store reads the account from the environment.
    os.environ["AZURE_STORAGE_CONNECTION_STRING"] = connection_string
    return f"azblob://lh-pybench-{uuid.uuid4().hex[:8]}"


# --peer KIND=WHERE: (the peer, its store, how it is made, leasehold's URL
# for the same server given WHERE).
PEERS = {
    "redis-py": ("redis-py Lock", "Redis", peer_redis_py, lambda w: w),
    "pg-advisory": ("session advisory lock, psycopg", "PostgreSQL", peer_pg_advisory, lambda w: w),
    "dynamodb-lock": (
        "python-dynamodb-lock",
        "DynamoDB Local",
        peer_dynamodb_lock,
        lambda w: f"dynamodb://lh-pybench-{uuid.uuid4().hex[:8]}?endpoint={w}&region=us-east-1",
    ),
    "azure-lease": (
        "azure-storage-blob BlobLeaseClient",
        "Azurite",
        peer_azure_lease,
        lambda w: azure_url(w),
    ),
}


PEER_SECTION = """
Against the lock most Python code takes on each store (the peers of
figure 6, which give less: no fencing token, and on Redis and PostgreSQL
no loss signal before takeover), in the same process on the same server,
the same alternating rounds: leasehold's Python cycles / the peer's.

"""


# The line of the --out file after which it is written by hand.
KEEP = "<!-- Below: written by hand; scripts/python-bench.py --out keeps what follows this line. -->"


SECTION = """## 8. Python

Uncontended acquire + release cycles per second from Python (the
`leasehold` package: `held = lock.acquire(); held.release()`) against the
same cycles from Rust (`lock.acquire().await?.release().await?` in a loop
in the extension's own Rust code: the same library build, the same store,
the same process, no Python between cycles, waited for by tokio's
`block_on` as a Rust program waits), {rounds} short rounds of {seconds} s
of each loop alternating which goes first; the ratio is the median of the
rounds' ratios. Target: Python ≥ 0.95× Rust. The last column runs the
Rust loop again the way the package's blocking calls wait (they spin for
up to 0.5 ms before they sleep, in a call's first 5 ms): Python over that
is what the Python layer itself costs. Written by
`scripts/python-bench.py` ({when}; {build}); not by `scripts/bench.sh`,
which includes this file (docs/python-bench.md) as it is.

"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=0.25)
    parser.add_argument("--build", default="the package as installed", help="what build this is, for the page")
    parser.add_argument("--out", help="write the section (markdown) here too")
    parser.add_argument("--new", action="store_true", help="the stores are new: create them settled (leasehold init --new)")
    parser.add_argument("--peer", action="append", default=[], metavar="KIND=WHERE", help=f"also against a peer: {', '.join(PEERS)}")
    args = parser.parse_args()
    lines = [
        "| store | Python cycles/s | Rust cycles/s | ratio | rounds: middle half | target ≥ 0.95× "
        "| Python / Rust waiting as Python waits |",
        "|---|---|---|---|---|---|---|",
    ]
    for line in lines:
        print(line, flush=True)
    results, peer_results = [], []
    for arg in args.urls:
        # LABEL=URL names the store in the table (else its URL, redacted).
        label, _, url = arg.partition("=") if "=" in arg.split(":", 1)[0] else ("", "", arg)
        r = measure(url, args.rounds, args.seconds, args.new)
        if label:
            r["store"] = label
        results.append(r)
        met = "**met**" if r["ratio"] >= 0.95 else "**missed**"
        same = r["same"]
        line = (
            f"| {r['store']} | {r['python']:.0f} | {r['rust']:.0f} | **{r['ratio']:.2f}×** "
            f"| {r['rounds']}: {r['q1']:.2f}–{r['q3']:.2f} | {met} "
            f"| {same['ratio']:.2f}× ({same['q1']:.2f}–{same['q3']:.2f}) |"
        )
        lines.append(line)
        print(line, flush=True)
    peer_lines = []
    if args.peer:
        peer_lines = [
            "| peer | store | leasehold (Python) cycles/s | peer cycles/s | leasehold / peer | rounds: middle half |",
            "|---|---|---|---|---|---|",
        ]
        print(PEER_SECTION + "\n".join(peer_lines), flush=True)
    for arg in args.peer:
        kind, _, where = arg.partition("=")
        if kind not in PEERS or not where:
            parser.error(f"--peer {arg!r}: expected KIND=WHERE, KIND one of {', '.join(PEERS)}")
        name, store_name, make, url_for = PEERS[kind]
        _, lock = our_lock(url_for(where), args.new)
        r = alternate(args.rounds, args.seconds, lambda s: python_cycles(lock, s), cycles_of(make(where)))
        peer_results.append({"peer": name, "store": store_name, "ratio": r["ratio"]})
        line = (
            f"| {name} | {store_name} | {r['ours']:.0f} | {r['theirs']:.0f} | **{r['ratio']:.2f}×** "
            f"| {r['rounds']}: {r['q1']:.2f}–{r['q3']:.2f} |"
        )
        peer_lines.append(line)
        print(line, flush=True)
    if args.out:
        when = time.strftime("%Y-%m-%d", time.gmtime())
        # What follows the marker in the file already there (the section's
        # hand-written commentary) is kept, after the new tables.
        kept = ""
        try:
            old = pathlib.Path(args.out).read_text()
            if KEEP in old:
                kept = KEEP + old.split(KEEP, 1)[1]
        except FileNotFoundError:
            pass
        with open(args.out, "w") as f:
            f.write(SECTION.format(rounds=args.rounds, seconds=args.seconds, when=when, build=args.build))
            f.write("\n".join(lines) + "\n")
            if peer_lines:
                f.write(PEER_SECTION + "\n".join(peer_lines) + "\n")
            if kept:
                f.write("\n" + kept)
        # The ratios, for the summary of docs/benchmarks.md (its targets).
        figures = {
            "date": when,
            "stores": [{"store": r["store"], "ratio": r["ratio"]} for r in results],
            "peers": peer_results,
        }
        pathlib.Path(args.out).with_suffix(".json").write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
