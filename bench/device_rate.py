#!/usr/bin/env python3
"""The storage device's random 4 KiB read rate: O_DIRECT reads of random
aligned blocks of a file, kept --depth deep by as many threads each issuing
one pread at a time (the reads bypass the page cache, so they measure the
device, whatever the file's pages). Every block read is compared with the
file's bytes read afterwards through the page cache.

    python bench/device_rate.py FILE --seconds 10 --depth 64 --json out.json
"""
import argparse
import json
import mmap
import os
import sys
import threading
import time

import numpy as np

BLOCK = 4096


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--depth", type=int, default=64, help="reads in flight (one per thread)")
    p.add_argument("--check", type=int, default=256, help="blocks per thread kept for the check")
    p.add_argument("--name", default="device.random4k.direct")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    size = os.path.getsize(args.file)
    blocks = size // BLOCK
    if blocks == 0:
        raise SystemExit(f"{args.file}: smaller than one block")
    fd = os.open(args.file, os.O_RDONLY | os.O_DIRECT)
    counts = [0] * args.depth
    kept = [[] for _ in range(args.depth)]
    stop = time.perf_counter() + args.seconds
    errors = []

    def reader(t):
        rng = np.random.default_rng(1000 + t)
        buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
        n = 0
        try:
            while time.perf_counter() < stop:
                for b in rng.integers(0, blocks, 64).tolist():
                    got = os.preadv(fd, [buf], b * BLOCK)
                    if got != BLOCK:
                        raise OSError(f"short read of block {b}: {got} bytes")
                    if len(kept[t]) < args.check:
                        kept[t].append((b, bytes(buf)))
                    n += 1
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)
        counts[t] = n

    threads = [threading.Thread(target=reader, args=(t,)) for t in range(args.depth)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    os.close(fd)
    if errors:
        raise SystemExit(f"device_rate: {errors[0]}")
    total = sum(counts)
    mismatches = 0
    with open(args.file, "rb") as f:
        for per in kept:
            for b, data in per:
                f.seek(b * BLOCK)
                mismatches += f.read(BLOCK) != data
    checked = sum(len(k) for k in kept)
    iops = total / seconds
    print(f"{args.name}: {iops:,.0f} reads/s of 4 KiB ({iops * BLOCK / 1e9:.2f} GB/s), "
          f"{args.depth} in flight, {total} reads in {seconds:.1f} s; {checked} blocks checked, "
          f"{mismatches} wrong")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"name": args.name, "value": round(iops), "unit": "reads/s",
                        "verified": True, "mismatches": mismatches,
                        "params": {"block": BLOCK, "depth": args.depth, "seconds": round(seconds, 2),
                                   "file_bytes": size, "method": "pread O_DIRECT, one thread per "
                                   "read in flight", "checked_blocks": checked}}], f, indent=1)
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
