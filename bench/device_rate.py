#!/usr/bin/env python3
"""The storage device's random read rate: O_DIRECT reads of random aligned
blocks of a file (4 KiB unless --block says otherwise), kept --depth deep by
as many threads each issuing one pread at a time (the reads bypass the page
cache, so they measure the device, whatever the file's pages). Every block
kept for the check is compared with the file's bytes read afterwards
through the page cache.

    python bench/device_rate.py FILE --seconds 10 --depth 64 --json out.json

`random_read_rate` is the same as a function (the regime map's on-disk
ceiling measures the device with it in its own run).
"""
import argparse
import json
import mmap
import os
import sys
import time

import numpy as np

from warpstore._tools import timed_threads


def random_read_rate(path, seconds, depth, block=4096, check=256):
    """Reads random `block`-aligned blocks of `path` with O_DIRECT for
    `seconds`, `depth` in flight. Returns dict(reads_s, bytes_s, reads,
    seconds, checked, mismatches). Raises OSError where the file system
    refuses O_DIRECT or this block size (tmpfs; a device whose logical
    block is larger), or a read fails."""
    size = os.path.getsize(path)
    blocks = size // block
    if blocks == 0:
        raise OSError(f"{path}: smaller than one {block}-byte block")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, max(block, mmap.PAGESIZE))  # page-aligned, as O_DIRECT needs
        os.preadv(fd, [memoryview(buf)[:block]], 0)  # EINVAL here: no O_DIRECT at this size
        counts = [0] * depth
        kept = [[] for _ in range(depth)]
        stop = time.perf_counter() + seconds
        errors = []

        def reader(t):
            rng = np.random.default_rng(1000 + t)
            mine = mmap.mmap(-1, max(block, mmap.PAGESIZE))
            view = memoryview(mine)[:block]
            n = 0
            try:
                while time.perf_counter() < stop:
                    for b in rng.integers(0, blocks, 64).tolist():
                        got = os.preadv(fd, [view], b * block)
                        if got != block:
                            raise OSError(f"{path}: short read of block {b}: {got} bytes")
                        if len(kept[t]) < check:
                            kept[t].append((b, bytes(view)))
                        n += 1
            except Exception as e:  # noqa: BLE001 (raised below)
                errors.append(e)
            counts[t] = n

        took = timed_threads(reader, depth)
    finally:
        os.close(fd)
    if errors:
        raise errors[0]
    total = sum(counts)
    mismatches = 0
    with open(path, "rb") as f:
        for per in kept:
            for b, data in per:
                f.seek(b * block)
                mismatches += f.read(block) != data
    return dict(reads_s=total / took, bytes_s=total * block / took, reads=total,
                seconds=took, checked=sum(len(k) for k in kept), mismatches=mismatches)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--depth", type=int, default=64, help="reads in flight (one per thread)")
    p.add_argument("--block", type=int, default=4096, help="bytes a read (a multiple of 512)")
    p.add_argument("--check", type=int, default=256, help="blocks per thread kept for the check")
    p.add_argument("--name", default="device.random4k.direct")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.block <= 0 or args.block % 512:
        raise SystemExit(f"--block {args.block}: must be a positive multiple of 512")
    try:
        r = random_read_rate(args.file, args.seconds, args.depth, args.block, args.check)
    except OSError as e:
        raise SystemExit(f"device_rate: {e}") from None
    iops = r["reads_s"]
    print(f"{args.name}: {iops:,.0f} reads/s of {args.block} B ({r['bytes_s'] / 1e9:.2f} GB/s), "
          f"{args.depth} in flight, {r['reads']} reads in {r['seconds']:.1f} s; {r['checked']} "
          f"blocks checked, {r['mismatches']} wrong")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"name": args.name, "value": round(iops), "unit": "reads/s",
                        "verified": True, "mismatches": r["mismatches"],
                        "params": {"block": args.block, "depth": args.depth,
                                   "seconds": round(r["seconds"], 2),
                                   "file_bytes": os.path.getsize(args.file),
                                   "method": "pread O_DIRECT, one thread per read in flight",
                                   "checked_blocks": r["checked"]}}], f, indent=1)
    return 0 if r["mismatches"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
