#!/usr/bin/env python3
"""Peer benchmark: MySQL's named lock, as the libraries people use for
locking on MySQL take it (DistributedLock's MySQL provider, many PHP and
Rails job runners): GET_LOCK(name, timeout) and RELEASE_LOCK(name) on one
connection, with PyMySQL.

1. Uncontended lock + unlock cycles for --cycles-ms.
2. Handoff: a holder (this process) takes the lock, keeps it for a random
   0.1-0.2 s and unlocks it; a waiter (another process, its own
   connection) blocks in GET_LOCK, which the server wakes at the unlock.
   Times are time.monotonic_ns() (CLOCK_MONOTONIC, as leasehold-bench
   reads it).

The server comes from $LEASEHOLD_BENCH_MYSQL_URL
(mysql://USER:PASSWORD@HOST:PORT/DB). Prints one JSON line:
{"cycles", "seconds", "requests_per_cycle", "releases": [ns...],
"acquisitions": [[call_ns, acquired_ns]...], "note"}.
"""
import os
from urllib.parse import unquote, urlsplit

import pymysql

import peer_bench

NAME = "leasehold-bench-peer"


def connect():
    url = urlsplit(os.environ["LEASEHOLD_BENCH_MYSQL_URL"].split("?")[0])
    return pymysql.connect(
        host=url.hostname,
        port=url.port or 3306,
        user=unquote(url.username or ""),
        password=unquote(url.password or ""),
        database=url.path.lstrip("/") or None,
        autocommit=True,
    )


def lock(conn, name):
    with conn.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, 60)", (name,))
        if cur.fetchone()[0] != 1:
            raise RuntimeError("GET_LOCK did not grant")


def unlock(conn, name):
    with conn.cursor() as cur:
        cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
        cur.fetchone()


def waiter(deadline_ns, ready, queue):
    conn = connect()
    got = peer_bench.take_turns(
        deadline_ns,
        ready,
        lambda: lock(conn, NAME + "-handoff"),
        lambda: unlock(conn, NAME + "-handoff"),
    )
    conn.close()
    queue.put(got)


def main():
    args = peer_bench.parse_args(handoff_ms=10000)
    conn = connect()

    def cycle():
        lock(conn, NAME)
        unlock(conn, NAME)

    n, seconds = peer_bench.run_cycles(cycle, args)
    releases, acquisitions = peer_bench.handoff(
        args,
        waiter,
        lambda: lock(conn, NAME + "-handoff"),
        lambda: unlock(conn, NAME + "-handoff"),
    )
    conn.close()
    peer_bench.report(
        n, seconds, 2, releases, acquisitions,
        "GET_LOCK / RELEASE_LOCK on one connection: 2 statements a cycle, no fencing "
        "token, no expiry (the lock lives as long as the connection, so a pooled or "
        "proxied connection breaks it); a waiter blocks in the server and is woken by "
        "the release.",
    )


if __name__ == "__main__":
    main()
