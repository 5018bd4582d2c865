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
import os

import psycopg

import peer_bench

KEY = 74_210_001


def connect():
    url = os.environ["LEASEHOLD_BENCH_POSTGRES_URL"].split("?")[0]
    return psycopg.connect(url, autocommit=True)


def waiter(deadline_ns, ready, queue):
    with connect() as conn:
        got = peer_bench.take_turns(
            deadline_ns,
            ready,
            lambda: conn.execute("SELECT pg_advisory_lock(%s)", (KEY + 1,)),
            lambda: conn.execute("SELECT pg_advisory_unlock(%s)", (KEY + 1,)),
        )
    queue.put(got)


def main():
    args = peer_bench.parse_args(handoff_ms=10000)

    with connect() as conn:

        def cycle():
            conn.execute("SELECT pg_advisory_lock(%s)", (KEY,))
            conn.execute("SELECT pg_advisory_unlock(%s)", (KEY,))

        n, seconds = peer_bench.run_cycles(cycle, args)

        releases, acquisitions = peer_bench.handoff(
            args,
            waiter,
            lambda: conn.execute("SELECT pg_advisory_lock(%s)", (KEY + 1,)),
            lambda: conn.execute("SELECT pg_advisory_unlock(%s)", (KEY + 1,)),
        )

    peer_bench.report(
        n, seconds, 2, releases, acquisitions,
        "pg_advisory_lock / pg_advisory_unlock on one session: 2 statements a cycle, "
        "no fencing token, no expiry (the lock lives as long as the connection, "
        "so it cannot be used through a transaction-mode pooler); a waiter blocks "
        "in the server and is woken by the unlock.",
    )


if __name__ == "__main__":
    main()
