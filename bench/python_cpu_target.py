"""The CPU target (backend="cpu": no GPU, DataLoader workers): what a gather
costs and how many threads it leaves in the process.

Per row count (1 K and 64 K random rows of 512 B from a file in the page
cache) and controller (memory, host), from one caller and from four Python
threads at once: the median wall time of a gather, every result checked
against np.memmap, and the process's threads (/proc/self/task) after the
calls, against the threads before the first array was opened. Beside it
np.memmap's own gather of the same rows (fancy indexing, one thread), the
strongest single-call alternative a CPU user has: rows `cpu_target.<rows>.
<controller>[.4_callers]` give rows a second with memmap's as the ceiling
(`scripts/gpu.sh python cpu` writes bench/results/cpu_target.json).

    python bench/python_cpu_target.py [--calls 200] [--json F]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import warpstore
from warpstore._tools import result, timed_threads, write_results


def cpu_name():
    """The machine's processor and the cores this process may use."""
    model = "unknown processor"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"CPU target: {model}, {len(os.sched_getaffinity(0))} cores"


def threads_now():
    return len(os.listdir("/proc/self/task"))


def timed(fn, calls):
    fn()
    t = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return statistics.median(t) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--file-bytes", type=int, default=256 << 20)
    p.add_argument("--callers", type=int, default=4)
    p.add_argument("--json")
    args = p.parse_args()
    row = 512
    rows_out = []
    base_threads = threads_now()
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        path = os.path.join(d, "cpu_target.u8")
        n = args.file_bytes // row
        np.random.default_rng(1).integers(0, 255, (n, row), dtype=np.uint8).tofile(path)
        ref = np.memmap(path, dtype=np.uint8, mode="r", shape=(n, row))
        for batch in (1024, 65536):
            idxs = [np.random.default_rng(batch + k).integers(0, n, batch) for k in range(8)]
            wants = [np.asarray(ref[i]) for i in idxs]
            res = {"memmap": timed(lambda: ref[idxs[0]], args.calls)}
            batch_wrong = 0
            for ctl in ("memory", "host"):
                with warpstore.open(path, "uint8", (n, row), backend="cpu", controller=ctl,
                                    cache="64MiB") as a:
                    wrong = 0
                    for i, w in zip(idxs, wants):
                        wrong += int((a.gather(i) != w).any(axis=1).sum())
                    res[ctl] = timed(lambda: a.gather(idxs[0]), args.calls)
                    # Several callers at once: each checks what it got.
                    errs = []

                    def caller(c):
                        for k in range(args.calls // 4):
                            j = (c + k) % len(idxs)
                            if not np.array_equal(a.gather(idxs[j]), wants[j]):
                                errs.append(j)
                    wall = timed_threads(caller, args.callers)
                    res[f"{ctl}.{args.callers}_callers"] = (
                        wall / (args.callers * (args.calls // 4)) * 1e6)
                    extra = threads_now() - base_threads
                    wrong += len(errs)
                    batch_wrong += wrong
                    if wrong:
                        print(f"{ctl}: {wrong} wrong rows or calls", file=sys.stderr)
                    rows_out.append(result(
                        f"cpu_target.{batch}.{ctl}.threads", extra,
                        "threads beside the process's own, after the calls", None, None,
                        wrong == 0, wrong, batch=batch, row_bytes=row, callers=args.callers))
            times = ", ".join(f"{k} {v:.0f} us" for k, v in res.items())
            print(f"{batch} rows of {row} B: {times}; threads beside the process's: "
                  f"{threads_now() - base_threads}", flush=True)
            for k, v in res.items():
                if k == "memmap":
                    continue
                rows_out.append(result(
                    f"cpu_target.{batch}.{k}", round(batch / v * 1e6), "rows/s",
                    round(batch / res["memmap"] * 1e6),
                    "np.memmap fancy indexing of the same rows, one caller", batch_wrong == 0,
                    batch_wrong, batch=batch, row_bytes=row, calls=args.calls,
                    median_us=round(v, 1), memmap_us=round(res["memmap"], 1),
                    cores=len(os.sched_getaffinity(0)),
                    timing="median of single calls" if "callers" not in k else
                    f"wall time of {args.callers} threads' calls / calls"))
    if args.json:
        command = os.environ.get("WARPSTORE_BENCH_COMMAND",
                                 "python3 bench/python_cpu_target.py " + " ".join(sys.argv[1:]))
        write_results(args.json, "cpu_target", cpu_name(), command, rows_out)
    return 0 if all(r["verified"] for r in rows_out) else 1


if __name__ == "__main__":
    sys.exit(main())
