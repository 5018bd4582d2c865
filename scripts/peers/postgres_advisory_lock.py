#!/usr/bin/env python3
"""Peer benchmark: a session-level advisory lock on PostgreSQL, as the
libraries people use for locking on PostgreSQL take it (DistributedLock's
Postgres provider, sqlx's PgAdvisoryLock): pg_advisory_lock(key) and
pg_advisory_unlock(key) on one connection, with psycopg 3.

1. Uncontended lock + unlock cycles for --cycles-ms.
2. Handoff: a holder (this process) takes the lock, keeps it for a random
   0.1-0.2 s and unlocks it; a waiter (another process, its own
   connection) blocks in pg_advisory_lock, which the server wakes at the
   unlock. Times are time.monotonic_ns() (CLOCK_MONOTONIC, as
   leasehold-bench reads it).

The server comes from $LEASEHOLD_BENCH_POSTGRES_URL. Prints one JSON line:
{"cycles", "seconds", "requests_per_cycle", "releases": [ns...],
"acquisitions": [[call_ns, acquired_ns]...], "note"}.
"""
import json
import multiprocessing
import os
import random
import time

import psycopg

import peer_bench

KEY = 74_210_001


def connect():
    url = os.environ["LEASEHOLD_BENCH_POSTGRES_URL"].split("?")[0]
    return psycopg.connect(url, autocommit=True)


def waiter(deadline_ns, ready, queue):
    got = []
    with connect() as conn:
        ready.set()
        while time.monotonic_ns() < deadline_ns - 1_000_000_000:
            call = time.monotonic_ns()
            conn.execute("SELECT pg_advisory_lock(%s)", (KEY + 1,))
            acquired = time.monotonic_ns()
            got.append((call, acquired))
            time.sleep(0.02)
            conn.execute("SELECT pg_advisory_unlock(%s)", (KEY + 1,))
            # Leave it to the holder before waiting again.
            time.sleep(0.05)
    queue.put(got)


def main():
    args = peer_bench.parse_args(handoff_ms=10000)

    with connect() as conn:

        def cycle():
            conn.execute("SELECT pg_advisory_lock(%s)", (KEY,))
            conn.execute("SELECT pg_advisory_unlock(%s)", (KEY,))

        n, seconds = peer_bench.run_cycles(cycle, args)

        releases = []
        acquisitions = []
        if args.handoff_ms > 0:
            deadline = time.monotonic_ns() + args.handoff_ms * 1_000_000
            queue = multiprocessing.Queue()
            ready = multiprocessing.Event()
            proc = multiprocessing.Process(target=waiter, args=(deadline, ready, queue))
            proc.start()
            ready.wait(30)
            while time.monotonic_ns() < deadline - 1_000_000_000:
                conn.execute("SELECT pg_advisory_lock(%s)", (KEY + 1,))
                time.sleep(random.uniform(0.1, 0.2))
                releases.append(time.monotonic_ns())
                conn.execute("SELECT pg_advisory_unlock(%s)", (KEY + 1,))
                # The waiter takes it, holds it 20 ms, and lets it go.
                time.sleep(0.04)
            acquisitions = queue.get(timeout=60)
            proc.join(timeout=30)

    print(json.dumps({
        "cycles": n,
        "seconds": seconds,
        "requests_per_cycle": 2,
        "releases": releases,
        "acquisitions": acquisitions,
        "note": "pg_advisory_lock / pg_advisory_unlock on one session: 2 statements a cycle, "
                "no fencing token, no expiry (the lock lives as long as the connection, "
                "so it cannot be used through a transaction-mode pooler); a waiter blocks "
                "in the server and is woken by the unlock.",
    }))


if __name__ == "__main__":
    main()
