#!/usr/bin/env python3
"""What a binary's relative relocations write at every start (docs/benchmarks.md
section 11): the dynamic loader applies every R_X86_64_RELATIVE relocation of a
position-independent executable when it starts, and each page they are on is
copied (a copy-on-write fault) in every process that runs the binary.

  scripts/relocations.py BINARY

Build BINARY with symbols, e.g. `cargo build --profile profiling -p
leasehold-cli --bin leasehold` (target/profiling/leasehold: the release build
with symbols and line tables). Prints the count and pages of relocations by
the symbol they are in (a crate's name for Rust symbols, "?" for unnamed
data), then the unnamed ones by the section they point into, and the pointers
to Rust source file names (panic locations, log metadata) by crate. Needs
`nm` and `readelf` (binutils).
"""
import bisect
import collections
import re
import subprocess
import sys


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    syms = []
    for line in run("nm", "-n", "-S", "--defined-only", binary).splitlines():
        parts = line.split()
        if len(parts) == 4:
            syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    syms.sort()
    if not syms:
        sys.exit(f"{binary} has no symbols: build it with them (see --help)")
    starts = [s[0] for s in syms]
    relocs = []
    for line in run("readelf", "-r", "-W", binary).splitlines():
        if "R_X86_64_RELATIVE" in line:
            fields = line.split()
            relocs.append((int(fields[0], 16), int(fields[-1], 16)))
    secs = []
    for line in run("readelf", "-S", "-W", binary).splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and int(m.group(2), 16):
            secs.append((int(m.group(2), 16), int(m.group(4), 16), m.group(1), int(m.group(3), 16)))

    def section(addr):
        for start, size, name, offset in secs:
            if start <= addr < start + size:
                return name, offset + addr - start
        return "?", None

    data = open(binary, "rb").read()
    by_symbol = collections.Counter()
    pages = collections.defaultdict(set)
    targets = collections.Counter()
    files = collections.Counter()
    for where, target in relocs:
        i = bisect.bisect_right(starts, where) - 1
        name = "?"
        if i >= 0 and syms[i][0] <= where < syms[i][0] + max(syms[i][1], 1):
            name = syms[i][2]
        m = re.match(r"_ZN(\d+)(\w+)", name)
        key = m.group(2)[: int(m.group(1))] if m else name
        by_symbol[key] += 1
        pages[key].add(where // 4096)
        if name != "?":
            continue
        sec, offset = section(target)
        targets[sec] += 1
        if sec == ".rodata" and offset is not None:
            m = re.match(rb"([A-Za-z0-9_./\-]+?\.rs)", data[offset:offset + 160])
            if m:
                path = m.group(1).decode()
                crate = re.search(r"/([A-Za-z0-9_\-]+?)-\d+\.\d+\.\d+", path)
                files[crate.group(1) if crate else "/".join(path.split("/")[:2])] += 1
    print(f"{len(relocs)} relative relocations on "
          f"{len({w // 4096 for w, _ in relocs})} pages")
    print("\nby the symbol they are in (count, pages):")
    for key, n in by_symbol.most_common(25):
        print(f"{n:8d} {len(pages[key]):5d}p  {key}")
    print("\nunnamed, by the section they point into:")
    for sec, n in targets.most_common():
        print(f"{n:8d}  {sec}")
    print(f"\npointers to source file names: {sum(files.values())}, by crate:")
    for crate, n in files.most_common(25):
        print(f"{n:8d}  {crate}")


if __name__ == "__main__":
    main()
