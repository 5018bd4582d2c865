"""What the peer benchmarks in this folder share: their arguments, the
uncontended acquire + release loop, the handoff between a holder and a
waiter in another process, and the JSON line they print. They are run as scripts
(`python scripts/peers/NAME.py`), so this module, beside them, is on their
path."""
import argparse
import json
import multiprocessing
import random
import time


def parse_args(handoff_ms):
    """--cycles-ms (default 5000), --handoff-ms (default `handoff_ms`) and
    --max-cycles (default 100000)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles-ms", type=int, default=5000)
    parser.add_argument("--handoff-ms", type=int, default=handoff_ms)
    parser.add_argument("--max-cycles", type=int, default=100000)
    return parser.parse_args()


def run_cycles(cycle, args):
    """Runs cycle() (one uncontended acquire + release) for half of
    --cycles-ms to warm up, then for --cycles-ms or --max-cycles cycles,
    whichever ends first; returns the cycles counted and their seconds."""
    warm_until = time.monotonic() + args.cycles_ms / 2000
    while time.monotonic() < warm_until:
        cycle()
    n = 0
    start = time.monotonic()
    end = start + args.cycles_ms / 1000
    while n < args.max_cycles and time.monotonic() < end:
        cycle()
        n += 1
    return n, time.monotonic() - start


def take_turns(deadline_ns, ready, acquire, release):
    """The waiter's side of handoff(): sets `ready`, then until a second
    before `deadline_ns` calls acquire() (which blocks until it has the
    lock), holds the lock 20 ms, release()s it and leaves it to the holder
    for 50 ms. Returns [(call_ns, acquired_ns)...]."""
    got = []
    ready.set()
    while time.monotonic_ns() < deadline_ns - 1_000_000_000:
        call = time.monotonic_ns()
        acquire()
        acquired = time.monotonic_ns()
        got.append((call, acquired))
        time.sleep(0.02)
        release()
        # Leave it to the holder before waiting again.
        time.sleep(0.05)
    return got


def handoff(args, waiter, acquire, release):
    """For --handoff-ms (nothing when it is 0): starts
    waiter(deadline_ns, ready, queue) in another process (it calls
    take_turns() and puts what it returns on `queue`), waits for it to be
    ready, then until a second before the deadline acquire()s the lock,
    holds it a random 0.1-0.2 s and release()s it, leaving the waiter
    40 ms to take it. Returns (releases, acquisitions): the release times
    (ns) and the waiter's [(call_ns, acquired_ns)...]."""
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
            acquire()
            time.sleep(random.uniform(0.1, 0.2))
            releases.append(time.monotonic_ns())
            release()
            # The waiter takes it, holds it 20 ms, and lets it go.
            time.sleep(0.04)
        acquisitions = queue.get(timeout=60)
        proc.join(timeout=30)
    return releases, acquisitions


def report(n, seconds, requests_per_cycle, releases, acquisitions, note):
    """Prints the one JSON line leasehold-bench reads: {"cycles",
    "seconds", "requests_per_cycle", "releases", "acquisitions", "note"}."""
    print(json.dumps({
        "cycles": n,
        "seconds": seconds,
        "requests_per_cycle": requests_per_cycle,
        "releases": releases,
        "acquisitions": acquisitions,
        "note": note,
    }))
