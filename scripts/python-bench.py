#!/usr/bin/env python3
"""Acquire + release cycles per second from Python against the same cycles
from Rust, side by side, on the same store in the same process.

The Python loop is `held = lock.acquire(); held.release()` through the
`leasehold` package; the Rust loop is `lock.acquire().await?.release()
.await?` in the extension's own Rust code (Target.bench_rust_cycles: the
same library, the same build and the same store, no Python between
cycles). Short rounds alternate which loop goes first; the ratio is the
median of the rounds' ratios (Python / Rust), as in docs/benchmarks.md.

    python scripts/python-bench.py [--new] [--rounds 16 --seconds 0.25] [--out FILE] \\
        SQLite=sqlite:/tmp/bench.db PostgreSQL=postgres://... redis://...

Run it with the `leasehold` package installed (built with which profile
is the caller's to say: see docs/benchmarks.md).
"""

import argparse
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


def measure(url: str, rounds: int, seconds: float, new: bool) -> dict:
    # --new: the caller states the stores are new (`leasehold init --new`),
    # so they grant at once, without a new store's quarantine.
    store = leasehold.init(url, new=True) if new else leasehold.open(url)
    lock = store.lock(f"bench-{uuid.uuid4().hex[:8]}")
    lock.acquire().release()  # warm: connections, the store's epoch
    py_rates, rust_rates, ratios = [], [], []
    for i in range(rounds):
        order = ["py", "rust"] if i % 2 == 0 else ["rust", "py"]
        rate = {}
        for which in order:
            start = time.perf_counter()
            if which == "py":
                n = python_cycles(lock, seconds)
            else:
                n = lock._native.bench_rust_cycles(seconds)
            rate[which] = n / (time.perf_counter() - start)
        py_rates.append(rate["py"])
        rust_rates.append(rate["rust"])
        ratios.append(rate["py"] / rate["rust"])
    q = statistics.quantiles(ratios, n=4)
    return {
        "store": store.url,
        "python": statistics.median(py_rates),
        "rust": statistics.median(rust_rates),
        "ratio": statistics.median(ratios),
        "q1": q[0],
        "q3": q[2],
        "rounds": rounds,
    }


SECTION = """## 8. Python

Uncontended acquire + release cycles per second from Python (the
`leasehold` package: `held = lock.acquire(); held.release()`) against the
same cycles from Rust (`lock.acquire().await?.release().await?` in a loop
in the extension's own Rust code: the same library build, the same store,
the same process, no Python between cycles), {rounds} short rounds of
{seconds} s of each loop alternating which goes first; the ratio is the
median of the rounds' ratios. Target: Python ≥ 0.8× Rust. Written by
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
    args = parser.parse_args()
    lines = [
        "| store | Python cycles/s | Rust cycles/s | ratio | rounds: middle half | target ≥ 0.8× |",
        "|---|---|---|---|---|---|",
    ]
    for line in lines:
        print(line, flush=True)
    for arg in args.urls:
        # LABEL=URL names the store in the table (else its URL, redacted).
        label, _, url = arg.partition("=") if "=" in arg.split(":", 1)[0] else ("", "", arg)
        r = measure(url, args.rounds, args.seconds, args.new)
        if label:
            r["store"] = label
        met = "**met**" if r["ratio"] >= 0.8 else "**missed**"
        line = (
            f"| {r['store']} | {r['python']:.0f} | {r['rust']:.0f} | **{r['ratio']:.2f}×** "
            f"| {r['rounds']}: {r['q1']:.2f}–{r['q3']:.2f} | {met} |"
        )
        lines.append(line)
        print(line, flush=True)
    if args.out:
        when = time.strftime("%Y-%m-%d", time.gmtime())
        with open(args.out, "w") as f:
            f.write(SECTION.format(rounds=args.rounds, seconds=args.seconds, when=when, build=args.build))
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
