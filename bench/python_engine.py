#!/usr/bin/env python3
"""What an open warpstore array costs the process around it.

  engine.idle_cpu          CPU seconds per second the process spends while an
                           array is open and idle (getrusage over --idle-s,
                           after one gather woke its threads)
  engine.torch_op.idle     a multi-threaded torch CPU op (matrix product on
                           every core) with an idle array open, against the
                           op alone in the same run (ratio: alone / with)
  engine.torch_op.busy     the same op right after each of a stream of
                           gathers (the shape of a training step: fetch, then
                           CPU work), against op alone after a sleep of the
                           same length
  engine.gpu_op.beside_gather
                           a GPU matrix product on the caller's stream while
                           a gather_async of mostly-missing rows runs on
                           another stream, against the product alone (ratio:
                           alone / beside; near 1 when the gather leaves room
                           on the GPU, far below when the product has to wait
                           for the whole gather)
  engine.open_arrays_100   100 arrays open at once, one gather on each: the
                           median gather time against one array's alone
                           (value: that ratio)

Every gather is checked against NumPy's copy of the file.
    python bench/python_engine.py --json out.json
"""
import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import numpy as np

import warpstore
from warpstore._tools import as_numpy, index_on

DIM = 128


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def gather_checked(a, data, idx, device):
    got = as_numpy(a[index_on(idx, device)])
    if not np.array_equal(got, data[idx]):
        raise AssertionError("gather returned wrong rows")


def torch_op_seconds(reps=5):
    import torch
    x = torch.randn(1024, 1024)
    torch.mm(x, x)
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.mm(x, x)
    return (time.perf_counter() - t0) / reps


def gpu_op_beside_gather(path, data, rng, device, nrows):
    """engine.gpu_op.beside_gather: a training step's GPU work while a
    fetch-ahead gather runs beside it (see the module's docstring)."""
    import torch
    x = torch.randn(2048, 2048, device=device)

    def op_ms(reps=10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            torch.mm(x, x)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / reps

    op_ms()
    alone = statistics.median(op_ms() for _ in range(5))
    # As the feature store's fetch-ahead stream (its fetch_priority setting).
    prio = -8 if warpstore.backend().environment_settings()["fetch_priority"] else 0
    side = torch.cuda.Stream(device, priority=prio)
    beside, overlapped, gather_ms = [], 0, []
    with warpstore.open(path, "float32", (-1, DIM), cache="16MiB") as a:
        for _ in range(7):
            idx = rng.integers(0, nrows, 131072)
            ti = torch.from_numpy(idx).to(device)
            a.clear_cache()  # mostly misses: the gather runs long
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.cuda.stream(side):
                p = a.gather_async(ti)
            beside.append(op_ms())
            overlapped += not p.done()  # the product ended while the gather still ran
            got = p.wait()
            gather_ms.append((time.perf_counter() - t0) * 1e3)
            if not np.array_equal(got.cpu().numpy(), data[idx]):
                raise AssertionError("gather_async returned wrong rows")
    b = statistics.median(beside)
    print(f"engine.gpu_op.beside_gather: torch.mm 2048^2 on the GPU {b:.3f} ms beside a "
          f"gather_async of 131072 rows ({statistics.median(gather_ms):.1f} ms), {alone:.3f} ms "
          f"alone ({alone / b:.2f}); the gather outlasted the product {overlapped} of "
          f"{len(beside)} times")
    return {"name": "engine.gpu_op.beside_gather", "value": round(b, 4), "unit": "ms",
            "ceiling": round(alone, 4), "ceiling_name": "the same torch.mm with no gather running",
            "ratio": round(alone / b, 3), "verified": True, "mismatches": 0,
            "params": {"op": "torch.mm 2048x2048 float32, 10 in a row", "gather_rows": 131072,
                       "cache": "16MiB, cleared before each gather",
                       "gather_ms": round(statistics.median(gather_ms), 2),
                       "gather_outlasted_op": f"{overlapped}/{len(beside)}"}}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1 << 18, help="rows of 128 float32 in the file")
    p.add_argument("--idle-s", type=float, default=10.0)
    p.add_argument("--arrays", type=int, default=100)
    p.add_argument("--json")
    args = p.parse_args()

    rows = []
    data = np.random.default_rng(3).standard_normal((args.rows, DIM)).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "features.f32")
        data.tofile(path)
        rng = np.random.default_rng(4)
        with warpstore.open(path, "float32", (-1, DIM), cache="16MiB") as a:
            device = a.device
            threads = warpstore.settings.threads()
            gather_checked(a, data, rng.integers(0, args.rows, 4096), device)
            time.sleep(1.0)
            c0, w0 = cpu_seconds(), time.perf_counter()
            time.sleep(args.idle_s)
            idle = (cpu_seconds() - c0) / (time.perf_counter() - w0)
        print(f"engine.idle_cpu: {idle:.4f} CPU s/s with one idle array ({threads} service "
              f"threads, {device})")
        rows.append({"name": "engine.idle_cpu", "value": round(idle, 5), "unit": "CPU s/s",
                     "verified": True, "mismatches": 0,
                     "params": {"seconds": args.idle_s, "service_threads": threads,
                                "target": device, "measured": "getrusage(RUSAGE_SELF), the "
                                "whole process, after one verified gather and 1 s of rest"}})

        try:
            import torch  # noqa: F401
            have_torch = True
        except ImportError:
            have_torch = False
        if have_torch:
            alone = statistics.median(torch_op_seconds() for _ in range(5))
            with warpstore.open(path, "float32", (-1, DIM), cache="16MiB") as a:
                gather_checked(a, data, rng.integers(0, args.rows, 4096), device)
                time.sleep(0.5)
                idle_op = statistics.median(torch_op_seconds() for _ in range(5))
                # Each round: a gather (synchronised, unchecked), the op at
                # once (busy); a sleep as long as the gather, the op (rest);
                # then the gather's check (a D2H copy, NumPy's own gather
                # and a compare of 32 MiB each), the op at once
                # (after_check). Until 2026-11-27 the check ran between the
                # gather and the busy op, so busy measured it too.
                busy, rest, after_check = [], [], []
                for _ in range(10):
                    idx = rng.integers(0, args.rows, 65536)
                    ti = index_on(idx, device)
                    t0 = time.perf_counter()
                    got = a[ti]
                    if device != "cpu":
                        torch.cuda.synchronize()
                    g = time.perf_counter() - t0
                    busy.append(torch_op_seconds(1))
                    time.sleep(g)
                    rest.append(torch_op_seconds(1))
                    if not np.array_equal(as_numpy(got), data[idx]):
                        raise AssertionError("gather returned wrong rows")
                    after_check.append(torch_op_seconds(1))
            nthreads = torch.get_num_threads()
            med = {k: statistics.median(v) for k, v in
                   (("busy", busy), ("rest", rest), ("after_check", after_check))}
            print(f"torch mm 1024^2 on {nthreads} threads: alone {alone * 1e3:.2f} ms, array "
                  f"idle {idle_op * 1e3:.2f} ms ({alone / idle_op:.2f}), right after a gather "
                  f"{med['busy'] * 1e3:.2f} ms against {med['rest'] * 1e3:.2f} ms after a sleep "
                  f"({med['rest'] / med['busy']:.2f}); right after the gather's check "
                  f"{med['after_check'] * 1e3:.2f} ms ({med['rest'] / med['after_check']:.2f})")
            rows.append({"name": "engine.torch_op.idle", "value": round(idle_op * 1e3, 3),
                         "unit": "ms", "ceiling": round(alone * 1e3, 3),
                         "ceiling_name": "the same torch.mm with no array open",
                         "ratio": round(alone / idle_op, 3), "verified": True, "mismatches": 0,
                         "params": {"torch_threads": nthreads, "op": "torch.mm 1024x1024 float32"}})
            after_rest = {
                "busy": "the op right after a synchronised gather, before its check (each "
                        "gather checked after)",
                "after_check": "the op right after the gather's check in NumPy (32 MiB copied "
                               "to the host, gathered and compared), no gather between: what "
                               "engine.torch_op.busy measured before 2026-11-27"}
            for key, measured in after_rest.items():
                rows.append({"name": f"engine.torch_op.{key}",
                             "value": round(med[key] * 1e3, 3), "unit": "ms",
                             "ceiling": round(med["rest"] * 1e3, 3),
                             "ceiling_name": "the same op after a sleep as long as the gather",
                             "ratio": round(med["rest"] / med[key], 3),
                             "verified": True, "mismatches": 0,
                             "params": {"torch_threads": nthreads, "gather_rows": 65536,
                                        "measured": measured}})

        if have_torch and device != "cpu":
            rows.append(gpu_op_beside_gather(path, data, rng, device, args.rows))

        # 100 arrays open at once.
        idx = rng.integers(0, args.rows, 4096)
        with warpstore.open(path, "float32", (-1, DIM), cache="4MiB") as a:
            gather_checked(a, data, idx, device)
            one = []
            for _ in range(9):
                t0 = time.perf_counter()
                gather_checked(a, data, idx, device)
                one.append(time.perf_counter() - t0)
        arrays = []
        try:
            t_open = time.perf_counter()
            for _ in range(args.arrays):
                arrays.append(warpstore.open(path, "float32", (-1, DIM), cache="4MiB"))
            t_open = time.perf_counter() - t_open
            for a in arrays:
                gather_checked(a, data, idx, device)  # cold: fills each cache
            many = []
            for a in arrays:
                t0 = time.perf_counter()
                gather_checked(a, data, idx, device)
                many.append(time.perf_counter() - t0)
        finally:
            for a in arrays:
                a.close()
        ratio = statistics.median(many) / statistics.median(one)
        print(f"engine.open_arrays_{args.arrays}: gather {statistics.median(many) * 1e3:.2f} ms "
              f"with {args.arrays} open against {statistics.median(one) * 1e3:.2f} ms with one "
              f"({ratio:.2f}); opening them took {t_open:.1f} s")
        rows.append({"name": f"engine.open_arrays_{args.arrays}", "value": round(ratio, 3),
                     "unit": "x", "ceiling": round(statistics.median(one) * 1e3, 3),
                     "ceiling_name": "median gather time (ms) with one array open",
                     "ratio": round(ratio, 3), "verified": True, "mismatches": 0,
                     "params": {"gather_ms": round(statistics.median(many) * 1e3, 3),
                                "rows": 4096, "open_seconds": round(t_open, 2),
                                "target": device}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
