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
import json
import multiprocessing
import os
import random
import time

import redis

import peer_bench

KEY = "leasehold-bench-peer:redis-py"


def connect():
    url = os.environ["LEASEHOLD_BENCH_REDIS_URL"].split("?")[0]
    return redis.Redis.from_url(url)


def waiter(deadline_ns, ready, queue):
    got = []
    r = connect()
    lock = r.lock(KEY + ":handoff", timeout=30)
    ready.set()
    while time.monotonic_ns() < deadline_ns - 1_000_000_000:
        call = time.monotonic_ns()
        lock.acquire(blocking=True, blocking_timeout=30)
        acquired = time.monotonic_ns()
        got.append((call, acquired))
        time.sleep(0.02)
        lock.release()
        # Leave it to the holder before waiting again.
        time.sleep(0.05)
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

    releases = []
    acquisitions = []
    if args.handoff_ms > 0:
        held = r.lock(KEY + ":handoff", timeout=30)
        deadline = time.monotonic_ns() + args.handoff_ms * 1_000_000
        queue = multiprocessing.Queue()
        ready = multiprocessing.Event()
        proc = multiprocessing.Process(target=waiter, args=(deadline, ready, queue))
        proc.start()
        ready.wait(30)
        while time.monotonic_ns() < deadline - 1_000_000_000:
            held.acquire(blocking=True, blocking_timeout=30)
            time.sleep(random.uniform(0.1, 0.2))
            releases.append(time.monotonic_ns())
            held.release()
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
        "note": "redis-py Lock: SET NX PX + a compare-and-delete script, 2 requests a cycle; "
                "no fencing token, no store epoch (a restart or failover that lost the key "
                "lets a second holder in at once), expiry that the holder is not told of "
                "unless it extends; a blocked acquire polls every 0.1 s.",
    }))


if __name__ == "__main__":
    main()
