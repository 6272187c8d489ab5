#!/usr/bin/env python3
"""Gathers that want more lines at once than the cache holds.

  pressure.line64k.small_cache   2 M random uint32 gathered in one call
                                 through a 64 MiB cache of 64 KiB lines
                                 (1024 lines) over a 1 GiB file: value = reads
                                 completed right (target: all, 0 errors);
                                 once failed with "deadline exceeded" after
                                 94 s though the work was only slow
  pressure.rows.<r>x             random 512 B rows, working set r times the
  pressure.elements.<r>x         cache (r = 0.1, 1, 10), 64 KiB lines: rows
                                 (elements) gathered per second, against the
                                 same gather when every one misses (the miss
                                 path: one index in every line of the file,
                                 into an empty cache that holds it all).
                                 Under pressure a gather falls toward that
                                 rate and no lower (ratio >= 1), and nothing
                                 fails. Line misses per second are in params:
                                 a row smaller than its line whose gathers
                                 keep missing is read around the cache, and
                                 such reads are no line misses, so that count
                                 alone no longer measures the cache under
                                 pressure

Page cache warm; every gather is checked against the file.
    python bench/python_pressure.py --json out.json
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

import warpstore
from warpstore._tools import as_numpy, index_on


def sync(device):
    if device != "cpu":
        import torch
        torch.cuda.synchronize()


def timed_gather(a, idx, device, want):
    """Seconds of one gather of idx, and the number of wrong results."""
    di = index_on(idx, device)
    sync(device)
    t0 = time.perf_counter()
    got = a[di]
    sync(device)
    s = time.perf_counter() - t0
    # Bytes, not values: random words read as float32 hold NaNs.
    g = np.ascontiguousarray(as_numpy(got)).view(np.uint8).reshape(len(idx), -1)
    w = np.ascontiguousarray(want).view(np.uint8).reshape(len(idx), -1)
    return s, int((g != w).any(axis=1).sum())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--file-mib", type=int, default=1024, help="size of the file")
    p.add_argument("--cache-mib", type=int, default=64)
    p.add_argument("--reads", type=int, default=2_000_000, help="uint32 reads of the first row")
    p.add_argument("--dir", default=None)
    p.add_argument("--json")
    args = p.parse_args()
    line = 64 << 10
    cache = args.cache_mib << 20
    rows = []
    bad_total = 0
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = os.path.join(d, "pressure.bin")
        n = (args.file_mib << 20) // 4
        rng = np.random.default_rng(11)
        data = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        data.tofile(path)

        # The failing case: 2 M random elements, one call.
        idx = rng.integers(0, n, args.reads)
        with warpstore.open(path, np.uint32, cache=cache, line_size=line) as a:
            device = a.device
            err = None
            try:
                s, bad = timed_gather(a, idx, device, data[idx])
            except Exception as e:  # noqa: BLE001 (reported as the figure's failure)
                err, s, bad = f"{type(e).__name__}: {e}", float("nan"), args.reads
            st = a.stats()
        done = 0 if err else args.reads - bad
        bad_total += bad
        print(f"pressure.line64k.small_cache: {done} of {args.reads} reads right in {s:.2f} s "
              f"({st['misses']} misses, {st['retries']} retries, {st['errors']} errors)"
              + (f"; FAILED: {err}" if err else ""))
        rows.append({"name": "pressure.line64k.small_cache", "value": done, "unit": "reads",
                     "verified": err is None, "mismatches": bad,
                     "params": {"reads": args.reads, "file_bytes": n * 4, "cache_bytes": cache,
                                "line_size": line, "seconds": round(s, 3), "target": device,
                                "misses": st["misses"], "retries": st["retries"],
                                "errors": st["errors"], "error": err}})

        # 0.1x, 1x, 10x the cache, rows and elements, against the miss path:
        # one index in every line of the file, into an empty cache that holds
        # the whole file, each a miss.
        rowdata = data.view(np.float32).reshape(-1, 128)
        for kind, unit_bytes, view in (("rows", 512, rowdata), ("elements", 4, data)):
            count = 65536 if kind == "rows" else 1 << 20
            dtype, shape = (np.float32, (-1, 128)) if kind == "rows" else (np.uint32, None)
            total, per_line = len(view), line // unit_bytes
            lines = total // per_line
            one_per_line = np.arange(lines) * per_line + rng.integers(0, per_line, lines)
            with warpstore.open(path, dtype, shape, cache=max(cache, lines * line),
                                line_size=line) as a:
                timed_gather(a, one_per_line[:64], device, view[one_per_line[:64]])
                a.clear_cache()
                s, bad = timed_gather(a, one_per_line, device, view[one_per_line])
            bad_total += bad
            miss_lines = lines / s
            for r in (0.1, 1, 10):
                span = min(total, max(1024, int(r * cache) // unit_bytes))
                idx = rng.integers(0, span, count)
                with warpstore.open(path, dtype, shape, cache=cache, line_size=line) as a:
                    timed_gather(a, idx, device, view[idx])  # warms the cache
                    a.reset_stats()
                    s, bad = timed_gather(a, idx, device, view[idx])
                    st = a.stats()
                bad_total += bad
                rate, misses = count / s, st["misses"] / s
                # One index a line: the miss path's lines a second are its
                # rows (elements) a second.
                print(f"pressure.{kind}.{r}x: {rate / 1e6:.2f} M {kind}/s, "
                      f"{rate / miss_lines:.2f}x the miss path ({miss_lines / 1e6:.2f} M {kind}/s); "
                      f"{misses / 1e3:.1f} K line misses/s, errors {st['errors']}, wrong {bad}")
                row = {"name": f"pressure.{kind}.{r}x", "value": round(rate), "unit": f"{kind}/s",
                       "ceiling": round(miss_lines),
                       "ceiling_name": f"miss path: {kind}/s of one index in every line of the "
                                       "file into an empty cache that holds it (each a miss)",
                       "ratio": round(rate / miss_lines, 3), "verified": True, "mismatches": bad,
                       "params": {"working_set_over_cache": r, "count": count,
                                  "cache_bytes": cache, "line_size": line,
                                  "line_misses_per_s": round(misses), "misses": st["misses"],
                                  "retries": st["retries"], "errors": st["errors"],
                                  "target": device}}
                rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
