#!/usr/bin/env python3
"""Other-process handoff on PostgreSQL, three ways side by side (docs/benchmarks.md
section 10): how close a grant written to a table can come to the session
advisory lock's handoff.

  a  leasehold's protocol: the release frees the row and NOTIFYs; the waiter,
     woken, sends its own grant (an UPDATE): two commits, one after the other.
  b  the release itself grants the row to a waiter that registered in it and
     NOTIFYs the grant; the waiter only reads the notification: one commit.
  c  pg_advisory_lock / pg_advisory_unlock: the waiter is blocked in the
     server and the unlock, which writes nothing, wakes it.

All three in Python (psycopg) on both sides, autocommit, prepared statements,
rounds interleaved in random order; the holder keeps the key 20-40 ms, then
releases; the time is from just before the release is sent to the waiter
seeing its grant (CLOCK_MONOTONIC, shared by both processes).

  URL="$(scripts/postgres.sh url)" .cache/bench-venv/bin/python scripts/pg-handoff-floor.py [ROUNDS]

It makes a table `leasehold_handoff_floor` (one row) and leaves it.
"""
import os
import random
import statistics
import subprocess
import sys
import time

import psycopg

URL = os.environ["URL"]
TABLE = "leasehold_handoff_floor"
ADVISORY = 424242
MODES = "abc"


def connect():
    return psycopg.connect(URL, autocommit=True)


def waiter(mode):
    """A waiting process: one handoff per line read, its grant's time printed."""
    c = connect()
    listen = None
    if mode in "ab":
        listen = connect()
        listen.execute(f"LISTEN {TABLE}_{mode}")
    for _ in sys.stdin:
        if mode == "b":
            # Registered before the holder releases: the release grants it.
            c.execute(f"UPDATE {TABLE} SET next_lease = 'W' WHERE key = 'k'", prepare=True)
        print("ready", flush=True)
        if mode == "c":
            c.execute(f"SELECT pg_advisory_lock({ADVISORY})")
            t1 = time.monotonic_ns()
            c.execute(f"SELECT pg_advisory_unlock({ADVISORY})")
        else:
            note = next(listen.notifies())
            if mode == "a":
                row = c.execute(
                    f"UPDATE {TABLE} SET lease_id = 'W', fence = fence + 1"
                    " WHERE key = 'k' AND lease_id IS NULL RETURNING fence",
                    prepare=True,
                ).fetchone()
                t1 = time.monotonic_ns()
                assert row is not None, "a: not granted"
            else:
                t1 = time.monotonic_ns()
                assert note.payload.split()[1] == "W", note.payload
            c.execute(
                f"UPDATE {TABLE} SET lease_id = NULL WHERE key = 'k' AND lease_id = 'W'",
                prepare=True,
            )
        print(t1, flush=True)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    c = connect()
    c.execute(
        f"CREATE TABLE IF NOT EXISTS {TABLE}"
        " (key text PRIMARY KEY, lease_id text, fence bigint, next_lease text)"
    )
    c.execute(
        f"INSERT INTO {TABLE} VALUES ('k', NULL, 0, NULL)"
        " ON CONFLICT (key) DO UPDATE SET lease_id = NULL, next_lease = NULL"
    )
    procs = {
        m: subprocess.Popen(
            [sys.executable, __file__, "--waiter", m],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for m in MODES
    }
    times = {m: [] for m in MODES}
    for _ in range(rounds):
        for m in random.sample(MODES, len(MODES)):
            if m == "c":
                c.execute(f"SELECT pg_advisory_lock({ADVISORY})")
            else:
                row = c.execute(
                    f"UPDATE {TABLE} SET lease_id = 'H', fence = fence + 1"
                    " WHERE key = 'k' AND lease_id IS NULL RETURNING fence",
                    prepare=True,
                ).fetchone()
                assert row is not None, "the holder found the key taken"
            p = procs[m]
            p.stdin.write("go\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "ready"
            time.sleep(random.uniform(0.02, 0.04))
            t0 = time.monotonic_ns()
            if m == "c":
                c.execute(f"SELECT pg_advisory_unlock({ADVISORY})")
            elif m == "a":
                c.execute(
                    f"WITH u AS (UPDATE {TABLE} SET lease_id = NULL"
                    " WHERE key = 'k' AND lease_id = 'H' RETURNING key)"
                    f" SELECT pg_notify('{TABLE}_a', key) FROM u",
                    prepare=True,
                )
            else:
                c.execute(
                    f"WITH u AS (UPDATE {TABLE} SET lease_id = next_lease, next_lease = NULL,"
                    " fence = fence + 1 WHERE key = 'k' AND lease_id = 'H'"
                    " RETURNING key, lease_id, fence)"
                    f" SELECT pg_notify('{TABLE}_b', key || ' ' || coalesce(lease_id, '-') || ' ' || fence)"
                    " FROM u",
                    prepare=True,
                )
            t1 = int(p.stdout.readline())
            times[m].append((t1 - t0) / 1e6)
    for p in procs.values():
        p.stdin.close()
        p.wait()
    names = {
        "a": "release + NOTIFY, then the waiter's grant (leasehold)",
        "b": "the release grants a registered waiter + NOTIFY",
        "c": "session advisory lock",
    }
    for m in MODES:
        v = sorted(times[m])
        print(
            f"{m}  p50 {statistics.median(v):.3f} ms  p90 {v[int(len(v) * 0.9)]:.3f} ms"
            f"  n={len(v)}  {names[m]}"
        )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--waiter":
        waiter(sys.argv[2])
    else:
        main()
