"""What the peer benchmarks in this folder share: their arguments and the
uncontended acquire + release loop. They are run as scripts
(`python scripts/peers/NAME.py`), so this module, beside them, is on their
path."""
import argparse
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
