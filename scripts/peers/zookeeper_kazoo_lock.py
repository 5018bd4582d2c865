#!/usr/bin/env python3
"""Peer benchmark: ZooKeeper's lock recipe as Python code takes it, kazoo's
Lock (the recipe Curator's InterProcessMutex also follows): an ephemeral
sequential node under the lock's node, held while it is the lowest.

1. Uncontended lock + unlock cycles for --cycles-ms.
2. Handoff: a holder (this process) takes the lock, keeps it for a random
   0.1-0.2 s and unlocks it; a waiter (another process, its own session)
   waits on a watch of the node ahead of it, which fires at the unlock.
   Times are time.monotonic_ns() (CLOCK_MONOTONIC, as leasehold-bench
   reads it).

The server comes from $LEASEHOLD_BENCH_ZOOKEEPER_URL
(zk://HOST:PORT[,HOST:PORT...]). Prints one JSON line:
{"cycles", "seconds", "requests_per_cycle", "releases": [ns...],
"acquisitions": [[call_ns, acquired_ns]...], "note"}.
"""
import os

from kazoo.client import KazooClient

import peer_bench

PATH = "/leasehold-bench-peer-%d" % os.getpid()


def connect():
    url = os.environ["LEASEHOLD_BENCH_ZOOKEEPER_URL"]
    hosts = url.removeprefix("zk://").split("?")[0].split("/")[0]
    client = KazooClient(hosts=hosts.rsplit("@", 1)[-1])
    client.start(timeout=30)
    return client


def waiter(path):
    def run(deadline_ns, ready, queue):
        client = connect()
        lock = client.Lock(path, "waiter")
        got = peer_bench.take_turns(deadline_ns, ready, lock.acquire, lock.release)
        client.stop()
        client.close()
        queue.put(got)

    return run


class Lazy:
    """The holder's lock of the handoff, on a session opened at its first
    use: after the waiter's process was started, so that no session's
    threads are forked."""

    def __init__(self, path):
        self.path = path
        self.client = None
        self.lock = None

    def acquire(self):
        if self.lock is None:
            self.client = connect()
            self.lock = self.client.Lock(self.path, "holder")
        self.lock.acquire()

    def release(self):
        self.lock.release()

    def close(self):
        if self.client is not None:
            self.client.delete(self.path, recursive=True)
            self.client.stop()
            self.client.close()


def main():
    args = peer_bench.parse_args(handoff_ms=10000)
    client = connect()
    lock = client.Lock(PATH, "cycles")

    def cycle():
        lock.acquire()
        lock.release()

    n, seconds = peer_bench.run_cycles(cycle, args)
    client.delete(PATH, recursive=True)
    client.stop()
    client.close()
    holder = Lazy(PATH + "-handoff")
    releases, acquisitions = peer_bench.handoff(
        args, waiter(PATH + "-handoff"), holder.acquire, holder.release
    )
    holder.close()
    peer_bench.report(
        n, seconds, 3, releases, acquisitions,
        "kazoo's Lock: create an ephemeral sequential node, list the lock's "
        "children, delete the node: 3 requests a cycle; no fencing token, and "
        "the holder learns of its session's expiry only after the fact; a "
        "waiter watches the node ahead of it and is woken by its deletion.",
    )


if __name__ == "__main__":
    main()
