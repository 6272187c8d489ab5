#!/usr/bin/env python3
"""Concurrency stress and interrupt latency of the Python package.

stress: T threads share one array (and, every few thousand operations, a
freshly opened one: the old one is closed while the others use it). Each
operation is one of
  - (78 %) a gather of random rows, checked against NumPy's copy of the file;
  - (18 %) a gather with one index out of range at a random position: must
    raise IndexError naming that position and index, and nothing else;
  - (3.95 %) clear_cache();
  - (0.05 %) close() of the shared array while other threads gather (they must get
    ValueError "closed" or right rows), then a reopen.
Counts operations and mismatches: wrong rows, an error raised in the wrong
call (or missing), anything but the expected exception, and hangs (a thread
not done within its deadline).

interrupt: a child process gathers from a file 64x its cache; SIGINT is sent
at a random moment; the child reports when KeyboardInterrupt reached Python
and checks the array afterwards. The worst latency over the tries is the figure.

Prints a table and writes rows in the format of shared RESULTS.md:
    python bench/python_stress.py --ops 1000000 --json out.json
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import warpstore

ROWS, DIM = 4096, 64


class Shared:
    """The array the threads share; swapped for a new one by the closer."""

    def __init__(self, path, opts):
        self.path, self.opts = path, opts
        self.lock = threading.Lock()
        self.array = warpstore.open(path, "float32", (-1, DIM), **opts)
        self.reopens = 0

    def current(self):
        with self.lock:
            return self.array

    def close_and_reopen(self):
        with self.lock:
            old = self.array
        old.close()  # waits for the calls in flight on it
        fresh = warpstore.open(self.path, "float32", (-1, DIM), **self.opts)
        with self.lock:
            self.array = fresh
            self.reopens += 1
        return old


def worker(shared, data, ops, seed, counts, errors, batch, until):
    rng = np.random.default_rng(seed)
    done = mism = 0
    for _ in range(ops):
        if until is not None and done % 64 == 0 and time.monotonic() > until:
            break
        kind = rng.random()
        a = shared.current()
        try:
            if kind < 0.78:
                idx = rng.integers(-ROWS, ROWS, int(rng.integers(1, batch)))
                got = a[idx]
                if not np.array_equal(got, data[idx]):
                    mism += 1
                    errors.append(f"wrong rows (seed {seed})")
            elif kind < 0.96:
                idx = rng.integers(0, ROWS, int(rng.integers(1, batch)))
                pos = int(rng.integers(0, idx.size))
                idx[pos] = ROWS + int(rng.integers(0, 1000))
                try:
                    a[idx]
                    mism += 1
                    errors.append("bad index returned no error")
                except IndexError as e:
                    if f"index {idx[pos]} (at position {pos})" not in str(e):
                        mism += 1
                        errors.append(f"IndexError of another call: {e}")
            elif kind < 0.9995:
                a.clear_cache()
            else:
                old = shared.close_and_reopen()
                if not old.closed:
                    mism += 1
                    errors.append("close() returned with the array open")
        except ValueError as e:
            if "closed" not in str(e):  # a call that met the closer: fine
                mism += 1
                errors.append(f"ValueError: {e}")
        except Exception as e:  # noqa: BLE001 (counted)
            mism += 1
            errors.append(f"{type(e).__name__}: {e}")
        done += 1
    counts.append((done, mism))


def stress(ops, threads, batch, controller, deadline_s, seconds):
    data = np.random.default_rng(1).standard_normal((ROWS, DIM)).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "F.f32")
        data.tofile(path)
        shared = Shared(path, dict(cache="1MiB", threads=2, controller=controller))
        counts, errors = [], []
        per = ops // threads
        start = time.monotonic()
        until = start + seconds if seconds else None
        ts = [threading.Thread(target=worker,
                               args=(shared, data, per, 100 + t, counts, errors, batch, until))
              for t in range(threads)]
        for t in ts:
            t.start()
        hung = 0
        for t in ts:
            t.join(timeout=max(1.0, deadline_s - (time.monotonic() - start)))
            hung += t.is_alive()
        seconds = time.monotonic() - start
        shared.current().close()
    done = sum(c[0] for c in counts)
    mism = sum(c[1] for c in counts) + hung
    return dict(ops=done, mismatches=mism, hung=hung, seconds=seconds, reopens=shared.reopens,
                first_errors=errors[:5])


CHILD = r"""
import signal, sys, time
import numpy as np
import warpstore
# Ctrl-C raises KeyboardInterrupt, as at a terminal, even where the parent
# started us with SIGINT ignored (a background job of a shell without job
# control: Python then leaves SIGINT ignored, and the interrupt never came).
signal.signal(signal.SIGINT, signal.default_int_handler)
path, n = sys.argv[1], int(sys.argv[2])
a = warpstore.open(path, "float32", cache="1MiB", threads=1, direct="off")
idx = np.random.default_rng(0).integers(0, n, 8_000_000)
if a.device != "cpu":
    import torch
    idx = torch.from_numpy(idx).cuda()
import faulthandler
# A child that ignores the interrupt must say where it is: every thread's
# Python stack on stderr, then exit (the parent reports it), well before the
# parent's own 60 s limit.
faulthandler.dump_traceback_later(30, exit=True)
print("ready", flush=True)
try:
    while True:
        a[idx]
except KeyboardInterrupt:
    caught = time.clock_gettime(time.CLOCK_MONOTONIC)
ref = np.fromfile(path, dtype=np.float32)
got = a[np.array([1, n - 1, 7])]
assert np.array_equal(np.asarray(got), ref[[1, n - 1, 7]]), "wrong rows after the interrupt"
faulthandler.cancel_dump_traceback_later()
print(f"caught {caught:.6f} device {a.device}", flush=True)
"""


def interrupt_once(path, n, delay):
    """Seconds from SIGINT (sent `delay` s into a long gather) to
    KeyboardInterrupt in a child gathering from `path` (n float32), and the
    child's device; raises if the child failed or did not stop."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, path, str(n)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(child.stderr.read())
        time.sleep(delay)
        sent = time.clock_gettime(time.CLOCK_MONOTONIC)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    if child.returncode != 0:
        raise RuntimeError(f"interrupted child failed: {err}")
    fields = out.split()
    return float(fields[fields.index("caught") + 1]) - sent, fields[fields.index("device") + 1]


def interrupts(tries):
    n = 16 << 20
    lat = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.f32")
        np.random.default_rng(9).standard_normal(n).astype(np.float32).tofile(path)
        device = "?"
        for k in range(tries):
            try:
                latency, device = interrupt_once(path, n, 0.3 + random.Random(k).random() * 1.5)
            except subprocess.TimeoutExpired:
                latency = float("inf")
            lat.append(latency)
    return dict(worst=max(lat), median=sorted(lat)[len(lat) // 2], tries=len(lat), device=device)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", type=int, default=200_000)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--batch", type=int, default=64, help="largest gather, rows")
    p.add_argument("--controller", default="host")
    p.add_argument("--deadline", type=float, default=600, help="seconds before a thread is hung")
    p.add_argument("--seconds", type=float, default=0,
                   help="stop starting operations after this long (0: do all --ops)")
    p.add_argument("--interrupts", type=int, default=20)
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()

    s = stress(args.ops, args.threads, args.batch, args.controller, args.deadline, args.seconds)
    print(f"stress: {s['ops']} operations on {args.threads} threads in {s['seconds']:.1f} s "
          f"({s['reopens']} close+reopen), mismatches {s['mismatches']} (hung {s['hung']})")
    for e in s["first_errors"]:
        print("  ", e)
    i = interrupts(args.interrupts) if args.interrupts else None
    if i:
        print(f"interrupt: worst {i['worst']:.3f} s, median {i['median']:.3f} s over {i['tries']} "
              f"tries ({i['device']})")
    rows = [{"name": "concurrency.python.stress", "value": s["ops"], "unit": "operations",
             "verified": True, "mismatches": s["mismatches"],
             "params": {"threads": args.threads, "batch_max": args.batch, "controller":
                        args.controller, "seconds": round(s["seconds"], 1),
                        "close_reopen": s["reopens"], "hung": s["hung"],
                        "backend": warpstore.backend().__name__.rsplit(".", 1)[1]}}]
    if i:
        rows.append({"name": "interrupt.latency_s", "value": round(i["worst"], 4), "unit": "s",
                     "verified": True, "mismatches": 0,
                     "params": {"tries": i["tries"], "median_s": round(i["median"], 4),
                                "target": i["device"], "gather": "8 M random float32 of a "
                                "64 MiB file through a 1 MiB cache, repeated"}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    ok = s["mismatches"] == 0 and (not i or i["worst"] <= 1.0)
    return 0 if ok and s["ops"] >= args.ops * (0 if args.seconds else 1) else 1


if __name__ == "__main__":
    sys.exit(main())
