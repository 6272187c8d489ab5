#!/usr/bin/env python3
"""The bulk-read benchmark: one contiguous range of a file (in the page
cache) into GPU memory, by the paths people use today and by warpstore, in
one run, for each range size:

  (a) warpstore    Array.read(0, n, out=gpu_tensor), the array opened with
                   its defaults: for a file in the page cache controller="auto"
                   picks the memory controller, which maps and pins the
                   file's page cache at open (params.open_s), and its reads
                   into GPU memory are the copy engine reading that mapping;
                   the host controller's reads are chunks read by several
                   threads into pinned buffers, copied by the copy engines
                   (params.controller says which ran)
  (b) kvikio       kvikio.CuFile(path).read(gpu_tensor) (only if kvikio
                   imports; the run says so otherwise)
  (c) numpy+pinned the range read into a pinned torch tensor (readinto, what
                   np.fromfile does), then .to("cuda", non_blocking=True)

Each path's output is compared, every word of it, with the file's pattern
(warpstore._tools.pattern_words) on the GPU. Each figure is the best of
--repeat runs, the page cache warm (the file is read once first). Without a
GPU (the CPU target) the reads go to host memory and only (a) and (c) run:
the run checks the harness, its figures mean nothing.

    python bench/python_bulk.py --file /tmp/warpstore-bulk.dat --sizes 64MiB,1GiB --json out.json

Rows (docs: /work/shared/RESULTS.md format): bulk.read.<size>.vs_kvikio and
bulk.read.<size>.vs_numpy_pinned for every size, and bulk.read.vs_kvikio /
bulk.read.vs_numpy_pinned for 1 GiB (the issue's case), warpstore's GB/s
against the other path's as the ceiling.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import warpstore
from warpstore._tools import (GOLDEN, bulk_breakdown, human_bytes, import_kvikio, result, table,
                              write_pattern_file, write_results)

SEED = 0


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def size_arg(text):
    return int(warpstore.backend().parse_size(text))


def mismatched_bytes(out, first_byte, n):
    """Words of `out` (a torch tensor or NumPy array of n bytes read from file
    byte first_byte, a multiple of 8) that differ from the pattern, times 8."""
    words = n // 8
    step = 32 << 20  # words compared at once
    bad = 0
    if type(out).__module__.startswith("torch"):
        import torch

        flat = out.reshape(-1).view(torch.int64)
        golden = GOLDEN_SIGNED
        for lo in range(0, words, step):
            hi = min(words, lo + step)
            want = torch.arange(first_byte // 8 + lo, first_byte // 8 + hi, dtype=torch.int64,
                                device=flat.device) * golden + SEED
            bad += int((flat[lo:hi] != want).sum())
        return bad * 8
    flat = out.reshape(-1).view(np.uint64)
    for lo in range(0, words, step):
        hi = min(words, lo + step)
        w = np.arange(first_byte // 8 + lo, first_byte // 8 + hi, dtype=np.uint64)
        with np.errstate(over="ignore"):
            bad += int(np.count_nonzero(flat[lo:hi] != w * GOLDEN + np.uint64(SEED)))
    return bad * 8


GOLDEN_SIGNED = int(GOLDEN) - (1 << 64) if int(GOLDEN) >= 1 << 63 else int(GOLDEN)


def best_of(repeat, fn, sync):
    """Times fn `repeat` times; returns (best, median, first) seconds: the
    first run of a path pays its set-up (threads, pinned buffers)."""
    secs = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        secs.append(time.perf_counter() - t0)
    return min(secs), statistics.median(secs), secs[0]


def run(path, sizes, repeat, json_path, command):
    cuda = warpstore.backend().gpu_build()
    torch = None
    if cuda:
        import torch
    total = max(sizes)
    write_pattern_file(path, total, SEED)
    with open(path, "rb") as f:  # warm the page cache
        while f.read(64 << 20):
            pass
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    try:
        kvikio, kvikio_note = import_kvikio()
    except Exception as e:  # noqa: BLE001 (not installed, or its thread pool cannot be set: not measured)
        kvikio = None
        kvikio_note = f"kvikio not usable ({type(e).__name__}: {e})"
    if not cuda:
        kvikio_note = "no GPU (CPU target): kvikio not run"
        kvikio = None
    log(kvikio_note)
    device = warpstore.backend().device_name()

    results, rows = [], []
    t_open = time.perf_counter()
    a = warpstore.open(path, np.uint8, total, direct="off")
    open_s = time.perf_counter() - t_open
    st = a.stats()
    log(f"warpstore: controller {st['controller']} (mapped: {st.get('mapped')}), "
        f"opened in {open_s * 1e3:.1f} ms")
    try:
        for n in sizes:
            label = human_bytes(n).replace(" ", "").replace(".0", "")
            fig, wrong, spread = {}, {}, {}

            def timed(key, fn):  # GB/s of the best run; the median and first run beside it
                best, median, first = best_of(repeat, fn, sync)
                fig[key] = n / best / 1e9
                spread[key] = dict(median_gb_s=round(n / median / 1e9, 3),
                                   first_gb_s=round(n / first / 1e9, 3))

            out = torch.empty(n, dtype=torch.uint8, device=a.device) if cuda else np.empty(n, np.uint8)

            def clear():  # each path's check must see its own bytes
                out.zero_() if cuda else out.fill(0)

            def ws():
                a.read(0, n, out=out)

            clear()

            ext = warpstore.backend()
            before = ext.bulk_stats()
            timed("warpstore", ws)
            # Where warpstore's reads' time went, summed over the timed reads.
            breakdown = bulk_breakdown(before, ext.bulk_stats())
            wrong["warpstore"] = mismatched_bytes(out, 0, n)

            if kvikio is not None:
                f = kvikio.CuFile(path, "r")
                try:
                    clear()

                    def kv():
                        got = f.read(out)
                        if got != n:
                            raise RuntimeError(f"kvikio read {got} of {n} bytes")

                    timed("kvikio", kv)
                    wrong["kvikio"] = mismatched_bytes(out, 0, n)
                finally:
                    f.close()

            host = torch.empty(n, dtype=torch.uint8).pin_memory() if cuda else np.empty(n, np.uint8)
            host_view = memoryview(host.numpy() if cuda else host)

            def pinned():
                with open(path, "rb", buffering=0) as fh:
                    got = fh.readinto(host_view)
                if got != n:
                    raise RuntimeError(f"readinto read {got} of {n} bytes")
                if cuda:
                    out.copy_(host, non_blocking=True)
                else:
                    out[...] = host

            clear()
            timed("numpy_pinned", pinned)
            wrong["numpy_pinned"] = mismatched_bytes(out, 0, n)
            del host, host_view

            for base, name in (("kvikio", "KvikIO CuFile.read"),
                               ("numpy_pinned", "NumPy read into pinned + .to(cuda)")):
                ceiling = fig.get(base)
                params = dict(bytes=n, file_bytes=total, repeat=repeat, direct="off",
                              page_cache="warm", target="cuda" if cuda else "cpu",
                              chunk_bytes=4 << 20, figure="best of repeat",
                              controller=st["controller"], mapped=bool(st.get("mapped")),
                              open_s=round(open_s, 6),
                              warpstore=dict(spread["warpstore"], breakdown=breakdown),
                              other=spread.get(base))
                if base == "kvikio":
                    params["kvikio"] = kvikio_note
                names = [f"bulk.read.{label}.vs_{base}"]
                if n == 1 << 30:
                    names.append(f"bulk.read.vs_{base}")
                for nm in names:
                    results.append(result(nm, fig["warpstore"], "GB/s", ceiling,
                                          name if ceiling else None, True,
                                          wrong["warpstore"] + wrong.get(base, 0), **params))
            for k in ("warpstore", "kvikio", "numpy_pinned"):
                if k in fig:
                    rows.append([label, k, f"{fig[k]:.2f}", f"{spread[k]['median_gb_s']:.2f}",
                                 f"{spread[k]['first_gb_s']:.2f}", wrong[k]])
            del out
            if cuda:
                torch.cuda.empty_cache()
    finally:
        a.close()

    log(table(rows, ["range", "path", "GB/s (best)", "median", "first", "wrong bytes"]))
    wrong_total = sum(r[-1] for r in rows)
    log(f"verified every byte against the file's pattern: {wrong_total} wrong")
    if json_path:
        write_results(json_path, "bulk", device, command, results)
        log(f"results: {json_path}")
    return 1 if wrong_total else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--file", default="/tmp/warpstore-bulk.dat",
                   help="pattern file (made if missing; kept)")
    p.add_argument("--sizes", default="64MiB,1GiB",
                   help="range sizes, comma-separated (multiples of 8 bytes)")
    p.add_argument("--repeat", type=int, default=5, help="runs per path; the best counts")
    p.add_argument("--json", help="results file (bench/results/bulk.json)")
    args = p.parse_args(argv)
    try:
        sizes = [size_arg(s) for s in args.sizes.split(",") if s]
    except (TypeError, ValueError) as e:
        p.error(f"--sizes: {e}")
    if not sizes or any(s <= 0 or s % 8 for s in sizes):
        p.error("--sizes: positive multiples of 8 bytes")
    if args.repeat < 1:
        p.error("--repeat: at least 1")
    command = os.environ.get("WARPSTORE_BENCH_COMMAND",
                             "python " + " ".join([os.path.relpath(__file__)] + (argv or sys.argv[1:])))
    return run(args.file, sizes, args.repeat, args.json, command)


if __name__ == "__main__":
    sys.exit(main())
