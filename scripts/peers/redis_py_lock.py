#!/usr/bin/env python3
"""Peer benchmark: redis-py's Lock, the lock most Python code takes on
Redis: SET key token NX PX to acquire, a Lua script comparing the token
to release (no fencing token), and a blocking acquire that polls.

1. Uncontended acquire + release cycles for --cycles-ms.
2. Handoff: a holder (this process) takes the lock, keeps it for a random
   0.1-0.2 s and releases it; a waiter (another process, its own
   connection) blocks in acquire(), which retries every `sleep` seconds
   (redis-py's default, 0.1 s). Times are time.monotonic_ns()
   (CLOCK_MONOTONIC, as leasehold-bench reads it).

The server comes from $LEASEHOLD_BENCH_REDIS_URL. Prints one JSON line:
{"cycles", "seconds", "requests_per_cycle", "releases": [ns...],
"acquisitions": [[call_ns, acquired_ns]...], "note"}.
"""
import os

import redis

import peer_bench

KEY = "leasehold-bench-peer:redis-py"


def connect():
    url = os.environ["LEASEHOLD_BENCH_REDIS_URL"].split("?")[0]
    return redis.Redis.from_url(url)


def waiter(deadline_ns, ready, queue):
    lock = connect().lock(KEY + ":handoff", timeout=30)
    got = peer_bench.take_turns(
        deadline_ns,
        ready,
        lambda: lock.acquire(blocking=True, blocking_timeout=30),
        lock.release,
    )
    queue.put(got)


def main():
    args = peer_bench.parse_args(handoff_ms=10000)

    r = connect()
    lock = r.lock(KEY, timeout=30)

    def cycle():
        if not lock.acquire(blocking=False):
            raise RuntimeError("uncontended acquire failed")
        lock.release()

    n, seconds = peer_bench.run_cycles(cycle, args)

    held = r.lock(KEY + ":handoff", timeout=30)
    releases, acquisitions = peer_bench.handoff(
        args,
        waiter,
        lambda: held.acquire(blocking=True, blocking_timeout=30),
        held.release,
    )

    peer_bench.report(
        n, seconds, 2, releases, acquisitions,
        "redis-py Lock: SET NX PX + a compare-and-delete script, 2 requests a cycle; "
        "no fencing token, no store epoch (a restart or failover that lost the key "
        "lets a second holder in at once), expiry that the holder is not told of "
        "unless it extends; a blocked acquire polls every 0.1 s.",
    )


if __name__ == "__main__":
    main()
