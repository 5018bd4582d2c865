#!/usr/bin/env python3
"""What the build of the `leasehold` binary costs each run (docs/benchmarks.md
section 11): builds of the CLI side by side, each timed on the same three
commands as figure 5's ladder, beside `flock FILE true` and `true`.

  scripts/cli-builds.py [--rounds N] NAME=BINARY [NAME=BINARY ...]

The builds of section 11 (each into a target directory of its own, so that
none overwrites another; the second and fourth link the binary without PIE,
the others as cargo does by default):

  cargo build --release -p leasehold-cli      # default: target/release/leasehold (every store
                                              # but the cloud stores) and leasehold-cloud (every store)
  CARGO_TARGET_DIR=target/nopie cargo rustc --release -p leasehold-cli --bin leasehold -- -C relocation-model=static
  CARGO_TARGET_DIR=target/slim cargo build --release -p leasehold-cli --no-default-features   # SQLite only
  CARGO_TARGET_DIR=target/slim-nopie cargo rustc --release -p leasehold-cli --no-default-features --bin leasehold -- -C relocation-model=static

Rounds alternate the builds' order; each command's wall time is the median
of the rounds (time from before the spawn to the child's exit, as Python's
subprocess sees it). The SQLite file is in a temporary directory, made by
each build's first `run` and then shared (every build reads and writes the
same schema); nothing else is left behind.

What is timed is a copy of each binary, written into that directory when
the script starts, not the file named. The same bytes started up to 0.15 ms
slower per process from a file that had been in the page cache for hours
(one the kernel's reclaim had been trimming) than from a copy just written,
and `run`, four processes of the binary, up to 0.5 ms slower
(docs/benchmarks.md section 11, 2026-11-29): builds of different ages were
not on the same footing. Fresh copies are, as a fresh install is.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time


def timed(args):
    start = time.perf_counter()
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("builds", nargs="+", metavar="NAME=BINARY")
    opts = parser.parse_args()
    if opts.rounds < 1:
        parser.error("--rounds: at least 1")
    if shutil.which("flock") is None:
        parser.error("no flock (util-linux) on PATH: it is what the builds are compared with")
    builds = []
    for spec in opts.builds:
        name, sep, path = spec.partition("=")
        if not sep or not os.access(path, os.X_OK):
            parser.error(f"{spec}: want NAME=BINARY, an executable file")
        builds.append((name, path))
    sizes = {name: os.path.getsize(path) / 1e6 for name, path in builds}
    with tempfile.TemporaryDirectory(prefix="leasehold-cli-builds.") as tmp:
        copies = []
        for i, (name, path) in enumerate(builds):
            copy = os.path.join(tmp, f"build-{i}")
            shutil.copy2(path, copy)
            copies.append((name, copy))
        builds = copies
        store = f"sqlite:{tmp}/cli.db"
        lockfile = f"{tmp}/cli.lock"
        commands = {
            "--version": ["--version"],
            "status": ["--store", store, "status", "k"],
            "run": ["--store", store, "run", "k", "--", "true"],
        }
        for _, path in builds:
            timed([path] + commands["run"])
        times = {}
        for i in range(opts.rounds):
            order = builds if i % 2 else list(reversed(builds))
            times.setdefault("flock", []).append(timed(["flock", lockfile, "true"]))
            times.setdefault("true", []).append(timed(["true"]))
            for name, path in order:
                for command, args in commands.items():
                    times.setdefault((name, command), []).append(timed([path] + args))
    median = {k: statistics.median(v) for k, v in times.items()}
    flock = median["flock"]
    print(f"{opts.rounds} rounds; flock {flock:.2f} ms, true {median['true']:.2f} ms")
    print("| build | size | " + " | ".join(f"`{c}`" for c in commands) + " | `run` / flock |")
    print("|---|---|" + "---|" * (len(commands) + 1))
    for name, _ in builds:
        size = sizes[name]
        cells = " | ".join(f"{median[(name, c)]:.2f} ms" for c in commands)
        print(f"| {name} | {size:.1f} MB | {cells} | {median[(name, 'run')] / flock:.2f}× |")


if __name__ == "__main__":
    main()
