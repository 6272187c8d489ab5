#!/usr/bin/env python3
"""The feature fetch of a GNN training step, alone: batches of unique random
rows (the shape of NeighborLoader's n_id) from an [N, D] float32 file in the
page cache into GPU memory, with warpstore's cache a fraction of the file.

Sources, measured in the same run and checked row by row against the file:
  warpstore     a[idx] with idx on the GPU (threads: the library's default
                and each of --threads)
  memmap        np.memmap fancy indexing, then .to("cuda") (the usual path)
  pinned        the rows already in pinned host memory: index_select, then
                .to("cuda", non_blocking) (the ceiling of a host gather)

    python bench/python_fetch.py --json out.json
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

import warpstore


def make_file(path, rows, dim):
    size = rows * dim * 4
    if not (os.path.exists(path) and os.path.getsize(path) == size):
        rng = np.random.default_rng(1)
        with open(path, "wb") as f:
            step = 1 << 18
            for s in range(0, rows, step):
                rng.standard_normal((min(step, rows - s), dim), dtype=np.float32).tofile(f)
    return np.memmap(path, dtype=np.float32, mode="r", shape=(rows, dim))


def batches(rows, per_batch, count, seed):
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(rows, per_batch, replace=False)).astype(np.int64)
            for _ in range(count)]


def timed(fn, idxs, ref, dev):
    """Median and worst seconds per batch of fn(idx) -> tensor on dev; every
    batch is checked against the file."""
    times, bad = [], 0
    for idx in idxs:
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        out = fn(idx)
        torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
        bad += int((out.cpu().numpy() != ref[idx]).any(axis=1).sum())
    warm = times[len(times) // 4:]  # the first quarter warms caches
    return statistics.median(warm), max(warm), bad


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch-rows", type=int, default=13_000)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--cache-fraction", type=int, default=8)
    p.add_argument("--threads", default="8,16", help="warpstore thread counts besides the default")
    p.add_argument("--path", default="/tmp/fetch-2000000x128.f32")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    dev = torch.device("cuda")
    ref = make_file(args.path, args.rows, args.dim)
    np.asarray(ref).sum()  # every page into the page cache
    row_bytes = args.dim * 4
    cache = args.rows * row_bytes // args.cache_fraction
    idxs = batches(args.rows, args.batch_rows, args.batches, 7)
    results, table = [], []

    def add(name, med, worst, bad, extra=None):
        rows_s = args.batch_rows / med
        table.append((name, med * 1e3, worst * 1e3, rows_s / 1e6, bad))
        results.append({"name": name, "value": round(med * 1e3, 3), "unit": "ms/batch",
                        "worst": round(worst * 1e3, 3), "rows_per_s": round(rows_s),
                        "verified": True, "mismatches": bad,
                        "params": dict({"batch_rows": args.batch_rows, "row_bytes": row_bytes,
                                        "cache_bytes": cache, "rows": args.rows}, **(extra or {}))})

    mm_fn = lambda idx: torch.from_numpy(ref[idx]).to(dev)
    add("fetch.memmap", *timed(mm_fn, idxs, ref, dev))
    pinned = torch.from_numpy(np.asarray(ref)).pin_memory()
    pin_fn = lambda idx: pinned.index_select(0, torch.from_numpy(idx)).pin_memory().to(dev, non_blocking=True)
    add("fetch.pinned", *timed(pin_fn, idxs, ref, dev))
    del pinned
    for threads in [None] + [int(t) for t in args.threads.split(",") if t]:
        a = warpstore.open(args.path, "float32", (args.rows, args.dim), cache=cache,
                           threads=threads, direct="off")
        dev_idxs = {id(i): torch.from_numpy(i).to(dev) for i in idxs}
        fn = lambda idx: a[dev_idxs[id(idx)]]
        med, worst, bad = timed(fn, idxs, ref, dev)
        st = a.stats()
        a.close()
        name = "fetch.warpstore" + (f".threads{threads}" if threads else "")
        add(name, med, worst, bad, {"threads": threads or warpstore.settings.threads(),
                                    "hit_rate": round(st.get("hit_rate", 0.0), 4)
                                    if isinstance(st, dict) else None})
    print(f"{'source':<28} {'ms/batch':>9} {'worst':>8} {'M rows/s':>9} {'wrong':>6}")
    for name, med, worst, mrs, bad in table:
        print(f"{name:<28} {med:9.2f} {worst:8.2f} {mrs:9.2f} {bad:6d}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["mismatches"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
