#!/usr/bin/env python3
"""The regime map: every way of getting rows of a file into GPU memory, in
one run, over a grid of regimes, each cell verified against the file.

Grid (nominal; --scale shrinks every size and batch for tests):
  row size     128 B, 400 B, 512 B, 4 KiB, 16 KiB (one pattern file of
               --file-size, 2 GiB, viewed as [N, row] uint8 for each row
               size); 400 B (100 float32) is not a power of two: its rows
               span two 512 B lines three times in four. --rows takes any
               other <bytes>B too.
  batch        1 K, 8 K, 64 K, 512 K rows per gather
  density      how much of its span a batch reads. A batch is n distinct rows
               in random order, drawn uniformly from a span of S consecutive
               rows at a random place in the file:
                 sparse    S = 1000 n (0.1 %), capped at the file: rows
                           spread over the whole file
                 window10  S = 10 n (10 %)
                 dense     S = n: every row of a run of n rows (all of it)
               The coverage n / S is recorded; a cell whose span had to be
               capped so far that its coverage is more than twice the
               nominal (sparse: above 2 %) is left out.
  ws/cache     working set over warpstore's cache. The working set of a cell
               is a pool of batches gathered in a cycle; its size is the
               lines (the array's line: the row rounded up to a power of two,
               at least 512 B) that the pool touches; the cache
               (warpstore.open(cache=...)) is chosen from it:
                 ws0p1  (0.1) one batch; the cache is 10 x its lines (rounded
                        up to a power of two): after the first gather, hits
                 ws1    (1) two batches; the cache is their lines rounded up
                        to a power of two (a ratio of 0.5 to 1): fits
                 ws10   (10) the cache of ws1, a pool of K batches whose
                        lines add up to 10 x that cache: each new batch
                        misses but for chance overlaps. The map times gathers 4 to 3+T of the first
                        cycle (the cache already full of earlier batches),
                        which is the cycle's steady state: a clock cache
                        over a cycle ten times its size keeps nothing. Each
                        further round (see Methods) times T batches of its
                        own, the same size and density, never gathered.
               The measured hit rate is in params.
  residency    page: the file in the page cache. disk: its pages dropped
               (fsync, posix_fadvise DONTNEED) before every method (and
               np.memmap mapped anew, mapped pages survive DONTNEED);
               warpstore opened after the drop with its defaults (direct
               "auto" picks O_DIRECT). Every timed gather of a disk cell
               reads rows no method read since the drop.
Bulk: 64 MiB, 1 GiB and 8 GiB contiguous from the start of a file into GPU
memory (8 GiB from a second file, written after the grid).

Methods (each timed with the GPU synchronised before and after; in the page
cache, a sequence of gathers that takes under 50 ms is timed 5 times and its
median round kept, params.round_seconds, for every method alike; warpstore's
ws10 cells time new batches in each round, since their own would hit):
  warpstore_host[_async], warpstore_memory[_async]
               warpstore.open(path, "uint8", (N, row), cache=<the cell's>)
               with every other setting at its default; arr.gather(idx) (sync) or
               arr.gather_async(idx) for each batch, then wait() for all
  memmap       np.memmap fancy indexing, then .to("cuda")
  threads_pinned  the strongest CPU path: torch.index_select over the mapped
               file with torch's threads into a pinned buffer, then
               .to("cuda", non_blocking=True)
  kvikio       KvikIO: one CuFile.pread per row into the GPU output (its
               thread pool at the core count); bulk: CuFile.read
  uva          a GPU kernel gathering rows from a pinned copy of the file
               (the extension's uva_gather), page cache only: an in-memory
               ceiling
  index_select torch.index_select on a copy of the file in GPU memory: the
               in-memory ceiling
  h2d_pinned   (bulk) the range copied from a pinned copy of the file
The best of memmap, threads_pinned and kvikio is a cell's best CPU path:
the ceiling of its warpstore rows. The summaries (worst, median, cold
median, random512) take warpstore with its defaults: in each cell the
controller that controller="auto" picks for the file there (asked at
setup: memory, over the pinned page cache, for the file in the page cache
where it fits; host after a drop). CPU-path rows have the GPU-memory
ceiling (index_select) where it was measured.

The on-disk ceiling: before the disk cells the run measures the disk
(random O_DIRECT reads of 512 B, 4 KiB and 1 MiB: device.*.direct rows);
gather.matrix.cold.median.ceiling is the median over the on-disk cells of
np.memmap's time over the least time any method could take for the same
batches at those rates (disk_lower_bound): the most the cold median could
reach on this disk. Each on-disk warpstore row has its cell's ceiling
(params.ceiling_vs_memmap).

Every output is checked against the file's pattern (word w of the file is
w * 0x9E3779B97F4A7C15; itself checked against the file's bytes at start):
every row up to 64 MiB of rows, else 2048 random rows plus the first and
the last. A wrong row marks its result verified=false and the run exits 1.
The JSON (docs/RESULTS.md format, study "regimes") has every cell measured
and, under "left_out", every cell or method not measured with the reason;
both are printed. Without a GPU (the CPU target) the GPU-only methods are
left out ("no GPU") and the figures mean nothing.

    python bench/python_matrix.py                  # bench/results/regimes.json
    warpstore bench matrix --scale 1/256 --json /tmp/r.json   (a smoke test)
"""
import math
import os
import statistics
import sys
import textwrap
import time
import warnings
from fractions import Fraction

import numpy as np

import warpstore
from warpstore._array import _row_line
from warpstore._files import drop_pages
from warpstore._tools import (GOLDEN, bulk_breakdown, git_commit, human_bytes, import_kvikio,
                              parse_size, table, write_pattern_file)
from warpstore.cli import _Parser, _fail, _list, _positive

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loaded from a file, too (tests)
from device_rate import random_read_rate  # noqa: E402 (bench/device_rate.py, beside this one)

ROW_SIZES = {"128B": 128, "400B": 400, "512B": 512, "4096B": 4096, "16384B": 16384}
BATCHES = {"1K": 1 << 10, "8K": 1 << 13, "64K": 1 << 16, "512K": 1 << 19}
WS = {"ws0p1": 0.1, "ws1": 1.0, "ws10": 10.0}
DENSITIES = {"sparse": 0.001, "window10": 0.1, "dense": 1.0}
RESIDENCIES = ("page", "disk")
BULK = {"64MiB": 64 << 20, "1GiB": 1 << 30, "8GiB": 8 << 30}
WS_METHODS = ("warpstore_host", "warpstore_host_async", "warpstore_memory",
              "warpstore_memory_async")
CPU_METHODS = ("memmap", "threads_pinned", "kvikio")
MEM_METHODS = ("uva", "index_select")
METHODS = WS_METHODS + CPU_METHODS + MEM_METHODS
BULK_METHODS = ("warpstore_host", "warpstore_memory", "memmap", "threads_pinned", "kvikio",
                "h2d_pinned")
GOLDEN_I64 = int(np.int64(GOLDEN.astype(np.int64)))
CHUNK = 65536  # bulk reads through gather: rows of 64 KiB
# A page-cache sequence of gathers timed under SHORT_S seconds is timed ROUNDS
# times, the median round kept (Matrix.timed says where).
SHORT_S = 0.05
ROUNDS = 5
DESCRIBE = {
    "warpstore_host": "warpstore, host controller, gather (defaults but the cache)",
    "warpstore_host_async": "warpstore, host controller, gather_async + wait",
    "warpstore_memory": "warpstore, memory controller, gather",
    "warpstore_memory_async": "warpstore, memory controller, gather_async + wait",
    "memmap": "np.memmap rows indexed on the CPU, copied to the GPU",
    "threads_pinned": "multi-threaded index_select from the mapped file into pinned memory, "
                      "non-blocking copy to the GPU",
    "kvikio": "KvikIO CuFile.pread per row into GPU memory (bulk: CuFile.read)",
    "uva": "GPU kernel gathering rows from a pinned copy of the file (UVA)",
    "index_select": "torch.index_select on a copy of the file in GPU memory",
    "h2d_pinned": "copy from a pinned copy of the file (cudaMemcpy)",
}


def pow2_ceil(x):
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


SECTOR = 512  # the smallest read the disk's O_DIRECT path takes


def disk_lower_bound(idx, row_bytes, iops, bw):
    """The least time any method could take to read rows `idx` of
    `row_bytes` from a disk that serves at most `iops` requests and `bw`
    bytes a second (both at once: generous), reading whole 512 B sectors:
    the rows' sectors form runs; r requests read them with the smallest
    gaps between runs read through (min over r of max(bytes / bw,
    r / iops)). No latency, no CPU, no copy to the GPU: a ceiling, not a
    model of any method."""
    off = np.sort(np.asarray(idx, dtype=np.int64)) * row_bytes
    first, last = off // SECTOR, (off + row_bytes - 1) // SECTOR
    gaps = first[1:] - last[:-1] - 1  # rows are distinct and equal: both sorted
    gaps = np.sort(gaps[gaps > 0])
    needed = int(last[-1] - first[0] + 1 - gaps.sum())
    runs = gaps.size + 1
    merged = np.concatenate(([0], np.cumsum(gaps)))  # m merges read the m smallest gaps
    r = runs - np.arange(runs)
    t = np.maximum((needed + merged) * SECTOR / bw, r / iops)
    return float(t.min())


def warm_pages(path):
    """Reads the file through, so its pages are in the page cache."""
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(64 << 20)
        while f.readinto(buf):
            pass


class Batch:
    """One gather's indices: NumPy, CPU tensor, device tensor."""

    def __init__(self, idx_np, torch, dev):
        self.np = idx_np
        self.cpu = torch.from_numpy(idx_np)
        self.dev = self.cpu.to(dev) if dev != "cpu" else self.cpu
        self.n = idx_np.size


class _BulkRun:
    """One method's bulk read of `size` bytes of `path` in a cell: made
    ready once (a warpstore array opened, buffers made), then timed one
    repetition a call (once), each output checked against the file."""

    def __init__(self, m, matrix, path, size):
        self.m, self.x, self.path, self.size = m, matrix, path, size
        self.rows = size // CHUNK
        self.extra, self.secs, self.wrong, self.checked = {}, [], 0, 0
        self.breakdown = []  # warpstore: where each read's time went (bulk_stats)
        self.arr = None
        torch, x, rows = matrix.torch, matrix, self.rows
        if m.startswith("warpstore"):
            t = time.perf_counter()
            self.arr = arr = warpstore.open(
                path, "uint8", (rows, CHUNK), controller=m.split("_")[1],
                **({} if x.scale >= 1 else {
                    "cache": x._scaled(warpstore.settings.cache_size(), 1 << 20)}))
            # Not in the reads' time: the memory controller maps and pins
            # the whole file's page cache here, which its reads then copy
            # from (a user who opens once and reads once pays both).
            self.extra["open_s"] = round(time.perf_counter() - t, 6)
            self.extra["mapped"] = bool(arr.stats().get("mapped"))
            self.extra["api"] = "Array.read(start, stop)"

            def fn():
                out = arr.read(0, rows)  # a CUDA tensor on the GPU target, NumPy on the CPU's
                if isinstance(out, np.ndarray):
                    out = torch.from_numpy(out)
                return out.to(x.dev)
        elif m == "memmap":
            def fn():
                mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(size,))
                if not x.gpu:
                    return torch.from_numpy(np.array(mm))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a read-only mapping: never written
                    return torch.from_numpy(mm).to(x.dev)
        elif m == "threads_pinned":
            threads = min(16, os.cpu_count() or 1)
            self.extra["threads"] = threads
            fn = x._threads_reader(path, size, threads)
        elif m == "kvikio":
            def fn():
                out = torch.empty(size, dtype=torch.uint8, device=x.dev)
                with x.kvikio.CuFile(path, "r") as f:
                    f.read(out, size, 0)
                return out
        else:  # h2d_pinned
            def fn():
                return x.pinned[:size].to(x.dev)
        self.fn = fn

    def once(self, res):
        x = self.x
        if res == "disk":
            drop_pages(self.path)
        if self.arr is not None:
            self.arr.clear_cache()  # every read from the file
        x.sync()
        stats = self.arr is not None and hasattr(x.ext, "bulk_stats")
        before = x.ext.bulk_stats() if stats else None
        t = time.perf_counter()
        out = self.fn()
        x.sync()
        self.secs.append(time.perf_counter() - t)
        if stats:
            self.breakdown.append(bulk_breakdown(before, x.ext.bulk_stats()))
        w, c = x.verify(out.reshape(self.rows, CHUNK), x.torch.arange(self.rows), CHUNK)
        self.wrong, self.checked = self.wrong + w, self.checked + c

    def close(self):
        if self.arr is None:
            return
        arr, self.arr = self.arr, None
        try:
            st = arr.stats()
            self.extra.update(direct=st["direct"], cache_bytes=st["cache_bytes"],
                              line_size=st["line_size"])
        finally:
            arr.close()

    def figure(self, reps):
        best = min(self.secs)
        extra = dict(self.extra, figure=f"best of reps, the methods taking turns ({reps} rounds)",
                     median_gb_s=round(self.size / statistics.median(self.secs) / 1e9, 4),
                     rep_gb_s=[round(self.size / t / 1e9, 4) for t in self.secs])
        if self.breakdown:
            extra["rep_breakdown"] = self.breakdown
        return dict(gb_s=self.size / best / 1e9, seconds=best, wrong=self.wrong,
                    checked=self.checked, extra=extra)


class Matrix:
    def __init__(self, args, log=print):
        import torch

        self.torch, self.args, self.log = torch, args, log
        self.t0 = time.perf_counter()
        self.gpu = torch.cuda.is_available() and warpstore.backend().gpu_build()
        self.dev = "cuda" if self.gpu else "cpu"
        self.ext = warpstore.backend()
        self.device_name = torch.cuda.get_device_name() if self.gpu else self.ext.device_name()
        self.sync = torch.cuda.synchronize if self.gpu else (lambda: None)
        self.scale = args.scale
        self.file_bytes = self._scaled(args.file_size, 1 << 20)
        self.cache_cap = self._scaled(args.cache_cap, 1 << 20)
        self.path = os.path.join(args.dir, "warpstore-regimes.dat")
        self.bulk_path = os.path.join(args.dir, "warpstore-regimes-bulk.dat")
        self.results, self.left_out, self.cells = [], [], []
        self.rng = np.random.default_rng(args.seed)
        # kvikio_note: its version and pool where it runs, else why it does not.
        self.kvikio, self.kvikio_note = None, "no GPU"
        if self.gpu:
            try:
                self.kvikio, self.kvikio_note = import_kvikio()
            except Exception as e:  # ImportError, a kvikio that cannot load its library or set its pool
                self.kvikio_note = f"kvikio not usable: {' '.join(str(e).split())[:160]}"
        self.pinned = self.gpu_copy = None
        self.phase_seconds = {}
        self._open = {}
        self.no_copy = {}  # why the pinned or the GPU copy of the file is missing
        self.failures = []  # warpstore calls that raised: left out, and the run exits 1
        # The disk's rates measured in this run (measure_disk), for the
        # on-disk cells' ceiling; disk_note says why they are missing.
        self.disk_rates, self.disk_note = None, "no on-disk cell was measured"

    # -- helpers ---------------------------------------------------------
    def _scaled(self, n, quantum):
        return max(quantum, int(n * self.scale) // quantum * quantum)

    def elapsed(self):
        return time.perf_counter() - self.t0

    def leave(self, cell, methods, reason):
        self.left_out.append({"cell": cell, "methods": list(methods), "reason": reason})

    def failed(self, cell, methods, e):
        why = f"FAILED: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
        self.log(f"{cell} {','.join(methods)}: {why}")
        self.failures.append(f"{cell} [{','.join(methods)}]: {why}")
        self.leave(cell, methods, why)

    def batch_rows(self, n0):
        return max(16, int(round(n0 * self.scale)))

    def verify(self, out, idx, row_bytes):
        """Rows of `out` (any device) against the pattern rows `idx`: every
        row up to 64 MiB, else 2048 random rows plus the first and last.
        Returns (wrong rows, rows checked)."""
        torch = self.torch
        if not isinstance(out, torch.Tensor):
            out = torch.from_numpy(np.ascontiguousarray(out))
        out = out.reshape(-1, row_bytes)
        n = out.shape[0]
        idx = idx.to(out.device)
        if n * row_bytes <= (64 << 20):
            pos = None
            m = n
        else:
            pos = torch.cat([torch.randint(0, n, (2048,)), torch.tensor([0, n - 1])]).to(out.device)
            m = pos.numel()
        words = row_bytes // 8
        step = max(1, (8 << 20) // row_bytes)
        wrong = torch.zeros((), dtype=torch.int64, device=out.device)
        ar = torch.arange(words, device=out.device)
        for s in range(0, m, step):
            sel = slice(s, min(m, s + step))
            part = (out[sel] if pos is None else out[pos[sel]]).contiguous().view(torch.int64)
            rows = idx[sel] if pos is None else idx[pos[sel]]
            expect = (rows[:, None] * words + ar) * GOLDEN_I64
            wrong += part.ne(expect).any(dim=1).sum()
        return int(wrong.item()), m

    def timed(self, fn, batches, row_bytes, async_=False, rounds=False, fresh=None):
        """fn(batch) -> rows, per batch (async_: fn returns a handle with
        wait(), all posted before the first wait). Returns (seconds, wrong
        rows, rows checked). rounds (where timing the batches again measures
        the same thing: no cache, or a cache the batches already fill): a
        sequence under SHORT_S is timed ROUNDS times and the median round
        kept, every round verified, so that a stall of the machine in one
        short round (the GPU's clocks, a CPU thread's wake-up) does not
        decide the cell; the rounds' seconds go to self.last_rounds. fresh
        (ws10, whose batches would hit where timed again): fresh(k) gives
        round k + 2 batches of its own, never gathered before."""
        sec, wrong, checked = self._timed_once(fn, batches, row_bytes, async_)
        self.last_rounds = [sec]
        if (rounds or fresh) and sec < SHORT_S:
            for k in range(ROUNDS - 1):
                s, w, c = self._timed_once(fn, fresh(k) if fresh else batches, row_bytes, async_)
                self.last_rounds.append(s)
                wrong, checked = wrong + w, checked + c
            sec = statistics.median(self.last_rounds)
        return sec, wrong, checked

    def _timed_once(self, fn, batches, row_bytes, async_):
        wrong = checked = 0
        if async_:
            self.sync()
            t = time.perf_counter()
            handles = [fn(b) for b in batches]
            outs = [h.wait() for h in handles]
            self.sync()
            sec = time.perf_counter() - t
            for b, o in zip(batches, outs):
                w, c = self.verify(o, b.cpu, row_bytes)
                wrong, checked = wrong + w, checked + c
            return sec, wrong, checked
        sec = 0.0
        for b in batches:
            self.sync()
            t = time.perf_counter()
            out = fn(b)
            self.sync()
            sec += time.perf_counter() - t
            w, c = self.verify(out, b.cpu, row_bytes)
            wrong, checked = wrong + w, checked + c
            del out
        return sec, wrong, checked

    # -- setup -----------------------------------------------------------
    def setup(self):
        t = time.perf_counter()
        write_pattern_file(self.path, self.file_bytes, seed=0)
        fd = os.open(self.path, os.O_RDONLY)
        os.fsync(fd)  # clean pages: the disk cells can drop them
        os.close(fd)
        warm_pages(self.path)
        self.check_file(self.path, self.file_bytes)
        # What the library's default (controller="auto") picks for this file
        # in the page cache and after a drop: the summaries read the
        # defaults' figures from that method's cells.
        self.default_controller = {"page": self.picked_controller()}
        drop_pages(self.path)
        self.default_controller["disk"] = self.picked_controller()
        warm_pages(self.path)
        print(f"controller=auto picks: {self.default_controller}", flush=True)
        torch = self.torch
        if self.gpu:
            # One pinned copy (uva, h2d_pinned) and one GPU copy (index_select),
            # where they fit.
            try:
                self.pinned = torch.empty(self.file_bytes, dtype=torch.uint8, pin_memory=True)
                mm = np.memmap(self.path, dtype=np.uint8, mode="r")
                step = 256 << 20
                for s in range(0, self.file_bytes, step):
                    self.pinned[s:s + step].numpy()[:] = mm[s:s + step]
                del mm
            except (RuntimeError, MemoryError) as e:
                self.pinned = None
                self.no_copy["pinned"] = (f"a pinned copy of the {human_bytes(self.file_bytes)} "
                                          f"file does not fit: {' '.join(str(e).split())[:120]}")
            try:
                self.gpu_copy = torch.empty(self.file_bytes, dtype=torch.uint8, device="cuda")
                self.gpu_copy.copy_(self.pinned if self.pinned is not None else
                                    torch.from_numpy(np.fromfile(self.path, dtype=np.uint8)))
            except (RuntimeError, MemoryError) as e:
                self.gpu_copy = None
                self.no_copy["gpu"] = (f"a GPU copy of the {human_bytes(self.file_bytes)} file "
                                       f"does not fit: {' '.join(str(e).split())[:120]}")
        self.phase_seconds["setup"] = time.perf_counter() - t

    def check_file(self, path, size):
        """The pattern every check uses, against the file's own bytes: 4096
        random 512-byte blocks plus the first and the last."""
        blocks = size // 512
        picks = np.unique(np.concatenate([self.rng.integers(0, blocks, 4096), [0, blocks - 1]]))
        bad = 0
        with open(path, "rb", buffering=0) as f:
            for b in picks:
                got = np.frombuffer(os.pread(f.fileno(), 512, int(b) * 512), dtype=np.uint64)
                w = np.arange(b * 64, b * 64 + 64, dtype=np.uint64)
                with np.errstate(over="ignore"):
                    bad += int(np.any(got != w * GOLDEN))
        if bad:
            raise OSError(f"{path}: {bad} of {len(picks)} sampled blocks differ from the pattern")

    def measure_disk(self):
        """The disk's rates for the on-disk cells' ceiling, in this run:
        random O_DIRECT reads of 512 B and of 4 KiB (the most requests a
        second: the better of the two) and of 1 MiB (the most bytes a
        second), 64 / 64 / 16 in flight. Each read is checked against the
        file. Rows device.*.direct; none (and disk_note says why) where
        the file system takes no O_DIRECT (tmpfs)."""
        t = time.perf_counter()
        secs = 1.5 if self.scale >= 1 else 0.3
        rates = {}
        try:
            for name, block, depth in (("device.random512.direct", 512, 64),
                                       ("device.random4k.direct", 4096, 64),
                                       ("device.read1m.direct", 1 << 20, 16)):
                r = random_read_rate(self.path, secs, depth, block, check=32)
                rates[name] = r
                self.results.append(dict(
                    name=name, value=r["reads_s"], unit="reads/s", ceiling=None,
                    ceiling_name=None, ratio=None, verified=r["mismatches"] == 0,
                    mismatches=r["mismatches"],
                    params=dict(block=block, depth=depth, seconds=round(r["seconds"], 2),
                                gb_s=round(r["bytes_s"] / 1e9, 4), checked_blocks=r["checked"],
                                file_bytes=self.file_bytes, method="pread O_DIRECT of random "
                                "aligned blocks, one thread per read in flight "
                                "(bench/device_rate.py)")))
        except OSError as e:
            self.disk_note = ("the disk's rates could not be measured (O_DIRECT reads of "
                              f"the file): {' '.join(str(e).split())[:160]}")
            self.log(f"disk rates: {self.disk_note}")
            return
        finally:
            self.phase_seconds["disk rates"] = time.perf_counter() - t
        self.disk_rates = dict(
            iops=max(rates["device.random512.direct"]["reads_s"],
                     rates["device.random4k.direct"]["reads_s"]),
            bw=rates["device.read1m.direct"]["bytes_s"])
        self.log(f"disk rates: {self.disk_rates['iops']:,.0f} reads/s at most, "
                 f"{self.disk_rates['bw'] / 1e9:.2f} GB/s in 1 MiB reads")

    # -- one (row, batch, density) group -----------------------------------
    def make_batches(self, N, n, frac, count):
        span = n if frac >= 1 else min(N, math.ceil(n / frac))
        out = []
        for _ in range(count):
            start = int(self.rng.integers(0, N - span + 1))
            rel = self.rng.permutation(n) if span == n else self.rng.choice(span, n, replace=False)
            out.append((start + rel).astype(np.int64))
        return out, span

    def plan_group(self, res, rlabel, blabel, dlabel):
        """The batches, caches and pools of one group, or the reason it is
        left out (whole, or per ws ratio)."""
        R, n0 = ROW_SIZES[rlabel], BATCHES[blabel]
        n, frac = self.batch_rows(n0), DENSITIES[dlabel]
        N = self.file_bytes // R
        L = _row_line(R)
        if n * R > self.file_bytes // 2:
            return None, (f"a batch of {human_bytes(n * R)} of rows is more than half of the "
                          f"{human_bytes(self.file_bytes)} file (a bulk read: see bulk.*)")
        span = n if frac >= 1 else min(N, math.ceil(n / frac))
        cov = n / span
        limit = 0.02 if dlabel == "sparse" else 2 * frac
        if cov > limit:
            return None, (f"{dlabel} needs a span of {math.ceil(n / frac)} rows, the file has "
                          f"{N}: the batch would read {cov:.1%} of it (limit {limit:.0%})")
        g = dict(res=res, R=R, n=n, N=N, L=L, rlabel=rlabel, blabel=blabel, dlabel=dlabel,
                 coverage=cov, span=span, ws={}, ws_why={})
        return g, None

    def size_caches(self, g, first_two):
        """Caches and pool sizes for each ws ratio from the first two batches."""
        L, R = g["L"], g["R"]
        lines = [np.unique(b * R // L) for b in first_two]
        b_lines = lines[0].size
        union2 = np.union1d(lines[0], lines[1]).size
        file_lines = self.file_bytes // L
        c_hi = max(pow2_ceil(10 * b_lines * L), 64 * L)
        c_lo = max(pow2_ceil(union2 * L), 64 * L)
        k10 = math.ceil(10 * c_lo / (b_lines * L))
        cap = human_bytes(self.cache_cap)
        for ws, cache, k, ws_lines in (("ws0p1", c_hi, 1, b_lines), ("ws1", c_lo, 2, union2),
                                       ("ws10", c_lo, k10, k10 * b_lines)):
            if cache > self.cache_cap:
                g["ws_why"][ws] = (f"the cache would be {human_bytes(cache)}, over the "
                                   f"{cap} cap (--cache-cap)")
            elif ws == "ws10" and ws_lines > file_lines:
                g["ws_why"][ws] = (f"a working set 10x the cache ({human_bytes(ws_lines * L)}, "
                                   f"{k} batches) is larger than the "
                                   f"{human_bytes(self.file_bytes)} file")
            else:
                g["ws"][ws] = dict(cache=cache, pool=k, ws_bytes=ws_lines * L,
                                   ratio=ws_lines * L / cache)
        g["batch_lines"] = b_lines

    # -- the grid --------------------------------------------------------
    def grid(self, res):
        args = self.args
        groups = []
        for rlabel in ROW_SIZES:
            for blabel in BATCHES:
                for dlabel in DENSITIES:
                    prefix = f"gather.matrix.{res}.{rlabel}.{blabel}"
                    cell_all = f"{prefix}.*.{dlabel}"
                    if rlabel not in args.rows or blabel not in args.batches or \
                            dlabel not in args.densities or res not in args.residencies:
                        self.leave(cell_all, ["all"], "not selected (--rows, --batches, "
                                   "--densities, --residencies)")
                        continue
                    g, why = self.plan_group(res, rlabel, blabel, dlabel)
                    if g is None:
                        self.leave(cell_all, ["all"], why)
                        continue
                    if res == "disk":
                        if blabel == "512K" or (blabel == "64K" and dlabel != "dense"):
                            self.leave(cell_all, ["all"], "on disk: np.memmap reads random rows "
                                       "at the disk's random-read rate (a few thousand a "
                                       "second on the virtio disk): a batch this size takes "
                                       "seconds per method; over the budget")
                            continue
                    groups.append(g)
        # Cheap groups first: the budget cuts the largest batches.
        groups.sort(key=lambda g: (g["n"] * g["R"], g["R"]))
        deadline = args.budget_s * (0.62 if res == "page" else 0.86)
        t = time.perf_counter()
        for g in groups:
            cell_all = f"gather.matrix.{res}.{g['rlabel']}.{g['blabel']}.*.{g['dlabel']}"
            if self.elapsed() > deadline:
                self.leave(cell_all, ["all"], f"budget: {self.elapsed():.0f} s used of "
                           f"--budget-s {args.budget_s:.0f} when this cell's turn came")
                continue
            (self.page_group if res == "page" else self.disk_group)(g)
        self.close_arrays()
        self.phase_seconds[f"grid.{res}"] = time.perf_counter() - t

    def reps(self, n0, row_bytes, res):
        """Timed gathers of a cell (from the nominal batch n0): --reps, fewer
        where a gather moves more than 512 K rows or 256 MiB (at most 2 on
        disk); in the page cache, more for small batches, so that a cell
        times at least 32 K rows (32 gathers of 1 K rows: one gather takes
        50 to 100 us, and one stall of the machine in five of them decided
        a 1 K cell's ratio)."""
        t = min(self.args.reps, math.ceil((1 << 19) / n0), math.ceil((256 << 20) / (n0 * row_bytes)))
        if res == "disk":
            return max(1, min(t, 2, math.ceil((1 << 14) / n0)))
        return max(t, min(32, math.ceil((1 << 15) / n0)))

    def picked_controller(self):
        with warpstore.open(self.path, "uint8", (self.file_bytes // 512, 512),
                            cache="1MiB") as a:
            return a.stats()["controller"]

    def _log_losses(self, log, method, residencies):
        """The cells of `method` in `residencies` under the best CPU path."""
        if not residencies:
            return
        loses = [r for r in self.results if r["name"].startswith("gather.matrix.") and
                 r["name"].endswith("." + method) and r["params"].get("residency") in residencies
                 and r["ratio"] is not None and r["ratio"] < 1]
        default = all(self.default_method(res) == method for res in residencies)
        log(f"\ncells where {method} ({'the default' if default else 'not the default'} in "
            f"{', '.join(residencies)}) loses to the best CPU path: {len(loses)}")
        for r in sorted(loses, key=lambda r: r["ratio"]):
            p = r["params"]
            log(f"  {r['name']}: {r['ratio']:.2f} of {p['best_cpu_method']}, hit rate "
                f"{p['hit_rate']:.2f}, line {p['line_size']} B for {p['row_bytes']} B rows, "
                f"direct={p['direct']}")

    def default_method(self, res):
        return "warpstore_" + self.default_controller[res]

    def open_array(self, g, controller, cache, reuse=False):
        """An array of the group's view with `cache`; reuse (page cache):
        the last three arrays of each controller stay open for later cells
        with the same row size and cache (the memory controller reads the
        whole file at every open)."""
        key = (controller, g["R"], cache)
        if reuse and key in self._open:
            self._open[key] = self._open.pop(key)  # most recent last
            return self._open[key]
        arr = warpstore.open(self.path, "uint8", (g["N"], g["R"]), cache=cache,
                             controller=controller)
        if reuse:
            self._open[key] = arr
            mine = [k for k in self._open if k[0] == controller]
            while len(mine) > 3:
                self._open.pop(mine.pop(0)).close()
        return arr

    def close_arrays(self):
        for arr in self._open.values():
            arr.close()
        self._open.clear()

    def page_group(self, g):
        torch, R, n = self.torch, g["R"], g["n"]
        T = self.reps(BATCHES[g["blabel"]], R, "page")
        idxs, _ = self.make_batches(g["N"], n, DENSITIES[g["dlabel"]], 3 + T)
        self.size_caches(g, idxs[:2])
        batches = [Batch(i, torch, self.dev) for i in idxs]
        # ws10's later rounds: batches of their own (timed again, the first
        # round's would hit on the lines it admitted), made when a first
        # round is short enough to need them, then shared by the methods.
        fresh = None
        if "ws10" in g["ws"]:
            more = []

            def fresh(k):
                if not more:
                    idx, _ = self.make_batches(g["N"], n, DENSITIES[g["dlabel"]],
                                               (ROUNDS - 1) * T)
                    more.extend(Batch(i, torch, self.dev) for i in idx)
                return more[k * T:(k + 1) * T]
        base = f"gather.matrix.page.{g['rlabel']}.{g['blabel']}"
        figures = {}  # method -> (rows/s, wrong, checked, seconds, extra)
        self.cpu_methods(g, batches[:1], batches[3:3 + T], figures, page=True)
        for ws, why in g["ws_why"].items():
            self.leave(f"{base}.{ws}.{g['dlabel']}", WS_METHODS, why)
        for ws, w in g["ws"].items():
            cell = f"{base}.{ws}.{g['dlabel']}"
            if ws == "ws0p1":
                warm, timed = batches[:1], [batches[0]] * T
            elif ws == "ws1":
                warm, timed = batches[:2], [batches[i % 2] for i in range(T)]
            else:
                warm, timed = batches[:3], batches[3:3 + T]
            wsfig = {}
            for ctl in ("host", "memory"):
                names = [f"warpstore_{ctl}"] + ([f"warpstore_{ctl}_async"] if self.gpu else [])
                names = [x for x in names if x in self.args.methods]
                if not names:
                    continue
                try:
                    arr = self.open_array(g, ctl, w["cache"], reuse=True)
                    for name in names:
                        arr.clear_cache()
                        # ws10 times new batches in every round (fresh).
                        wsfig[name] = self.run_warpstore(
                            arr, "async" if name.endswith("_async") else "sync", warm, timed, R,
                            rounds=ws != "ws10", fresh=fresh if ws == "ws10" else None)
                except Exception as e:  # reported loudly; the map goes on
                    self.failed(cell, [n for n in names if n not in wsfig], e)
                    self.close_arrays()
            if not self.gpu:
                self.leave(cell, ["warpstore_host_async", "warpstore_memory_async"],
                           "no GPU (gather_async with CPU indices gathers at once: it is "
                           "warpstore_host)")
            self.emit_cell(cell, g, ws, w, wsfig, figures)
        self.emit_baselines(f"{base}.any.{g['dlabel']}", g, figures)

    def run_warpstore(self, arr, mode, warm, timed, R, rounds=False, fresh=None):
        _, w0, c0 = self.timed(lambda b: arr.gather(b.dev), warm, R)
        arr.reset_stats()
        st0 = arr.stats()
        if mode == "sync":
            sec, w1, c1 = self.timed(lambda b: arr.gather(b.dev), timed, R, rounds=rounds,
                                     fresh=fresh)
        else:
            sec, w1, c1 = self.timed(lambda b: arr.gather_async(b.dev), timed, R, async_=True,
                                     rounds=rounds, fresh=fresh)
        st = arr.stats()
        rows = sum(b.n for b in timed)

        def share(key):  # of the timed gathers, those that counted themselves under `key`
            return round((st.get(key, 0) - st0.get(key, 0))
                         / max(1, len(timed) * len(self.last_rounds)), 3)

        # sorted: large gathers over the memory controller while they miss;
        # admitting: those that read their misses around the cache.
        return dict(rows_s=rows / sec, wrong=w0 + w1, checked=c0 + c1, seconds=sec, rows=rows,
                    round_seconds=self.rounds_note(), fresh_rounds=bool(fresh),
                    sorted_share=share("sorted_gathers"),
                    admit_share=share("admitting_gathers"), read_around=st["read_around"],
                    hit_rate=round(st["hit_rate"], 4), direct=st["direct"],
                    resident_share=st["resident_share"], cache_bytes=st["cache_bytes"],
                    line_size=st["line_size"])

    def cpu_methods(self, g, warm, timed, figures, page, drop=None):
        """memmap, threads_pinned, kvikio, uva, index_select on the group's
        batches; drop (disk): called before each method, which gets its own
        batches from `timed` (a list of lists)."""
        torch, R, N = self.torch, g["R"], g["N"]
        methods = [m for m in CPU_METHODS + MEM_METHODS if m in self.args.methods]
        for k, m in enumerate(methods):
            why = None
            if m == "kvikio" and self.kvikio is None:
                why = self.kvikio_note
            elif m in MEM_METHODS and not self.gpu:
                why = "no GPU"
            elif m in MEM_METHODS and not page:
                why = ("an in-memory ceiling: the data are in host or GPU memory, not on "
                       "disk (see the page-cache cells)")
            elif m == "uva" and self.pinned is None:
                why = self.no_copy.get("pinned", "no pinned copy of the file")
            elif m == "index_select" and self.gpu_copy is None:
                why = self.no_copy.get("gpu", "no GPU copy of the file")
            elif m == "kvikio" and g["n"] > (1 << 16):
                why = ("one pread call a row: 512 K Python calls take seconds per gather; "
                       "over the budget")
            if why:
                figures[m] = dict(skip=why)
                continue
            w, t = (warm, timed) if page else ([], timed[k])
            if m == "kvikio" and g["n"] >= self.batch_rows(1 << 16):
                t = t[:1]  # a Python call a row: one timed gather
            if drop:
                drop()
            mm = mt = staging = f = None
            try:
                if m == "memmap":
                    mm = np.memmap(self.path, dtype=np.uint8, mode="r", shape=(N, R))

                    def fn(b):
                        rows = torch.from_numpy(mm[b.np])
                        return rows.to(self.dev) if self.gpu else rows
                elif m == "threads_pinned":
                    mm = np.memmap(self.path, dtype=np.uint8, mode="r", shape=(N, R))
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # a read-only mapping: never written
                        mt = torch.from_numpy(mm)
                    staging = torch.empty((g["n"], R), dtype=torch.uint8, pin_memory=self.gpu)

                    def fn(b):
                        torch.index_select(mt, 0, b.cpu, out=staging)
                        return staging.to(self.dev, non_blocking=True) if self.gpu else staging
                elif m == "kvikio":
                    f = self.kvikio.CuFile(self.path, "r")

                    def fn(b):
                        out = torch.empty((b.n, R), dtype=torch.uint8, device=self.dev)
                        futs = [f.pread(out[i], R, r * R) for i, r in enumerate(b.np.tolist())]
                        for x in futs:
                            x.get()
                        return out
                elif m == "uva":
                    src = self.pinned[:N * R].view(N, R)

                    def fn(b):
                        out = torch.empty((b.n, R), dtype=torch.uint8, device=self.dev)
                        self.ext.uva_gather(src, b.dev, out, R,
                                            torch.cuda.current_stream().cuda_stream)
                        return out
                else:  # index_select
                    src = self.gpu_copy[:N * R].view(N, R)

                    def fn(b):
                        return torch.index_select(src, 0, b.dev)
                _, w0, c0 = self.timed(fn, w, R)
                sec, w1, c1 = self.timed(fn, t, R, rounds=page)
                rows = sum(b.n for b in t)
                figures[m] = dict(rows_s=rows / sec, wrong=w0 + w1, checked=c0 + c1, seconds=sec,
                                  rows=rows, round_seconds=self.rounds_note())
                if m == "threads_pinned":
                    figures[m]["torch_threads"] = torch.get_num_threads()
            except Exception as e:  # a method that cannot run is left out, the others count
                figures[m] = dict(skip=f"failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
            finally:
                if f is not None:
                    f.close()
                del mm, mt, staging

    def rounds_note(self):
        """The last timing's rounds (seconds each), where it had several."""
        r = self.last_rounds
        return [round(x, 6) for x in r] if len(r) > 1 else None

    def best_cpu(self, figures):
        got = [(f["rows_s"], m) for m, f in figures.items()
               if m in CPU_METHODS and "rows_s" in f]
        return max(got) if got else (None, None)

    def params(self, g, fig, **extra):
        p = dict(rows=fig.get("rows"), batch_rows=g["n"], row_bytes=g["R"], file_bytes=self.file_bytes,
                 density=g["dlabel"], coverage=round(g["coverage"], 6), span_rows=g["span"],
                 residency=g["res"], seconds=round(fig["seconds"], 6),
                 gb_s=round(fig["rows_s"] * g["R"] / 1e9, 4), rows_checked=fig["checked"],
                 scale=self.scale)
        if fig.get("round_seconds"):
            p["round_seconds"] = fig["round_seconds"]
            p["figure"] = f"the median of {len(fig['round_seconds'])} rounds" + (
                ", each over batches of its own" if fig.get("fresh_rounds") else "")
        p.update(extra)
        return p

    def emit_cell(self, cell, g, ws, w, wsfig, figures):
        best, best_name = self.best_cpu(figures)
        for m, fig in wsfig.items():
            cpu_wrong = figures[best_name]["wrong"] if best_name else 0
            r = dict(name=f"{cell}.{m}", value=fig["rows_s"], unit="rows/s", ceiling=best,
                     ceiling_name=(f"best CPU path of the cell: {best_name} ({DESCRIBE[best_name]})"
                                   if best_name else None),
                     ratio=fig["rows_s"] / best if best else None,
                     verified=fig["wrong"] == 0 and cpu_wrong == 0,
                     mismatches=fig["wrong"] + cpu_wrong,
                     params=self.params(g, fig, method=m, ws_ratio=WS[ws],
                                        ws_ratio_actual=round(w["ratio"], 4), ws_bytes=w["ws_bytes"],
                                        pool_batches=w["pool"], cache_bytes=fig["cache_bytes"],
                                        line_size=fig["line_size"], hit_rate=fig["hit_rate"],
                                        sorted_share=fig.get("sorted_share"),
                                        admit_share=fig.get("admit_share"),
                                        direct=fig["direct"], resident_share=fig["resident_share"],
                                        batch_lines=g["batch_lines"],
                                        best_cpu_method=best_name))
            self.results.append(r)
        self.cells.append(dict(cell=cell, g=g, ws=ws, wsfig=wsfig, figures=figures, best=best,
                               best_name=best_name))

    def emit_baselines(self, cell, g, figures):
        ceil = figures.get("index_select", {}).get("rows_s")
        for m, fig in figures.items():
            if "skip" in fig:
                self.leave(cell, [m], fig["skip"])
                continue
            extra = {"torch_threads": fig["torch_threads"]} if "torch_threads" in fig else {}
            self.results.append(dict(
                name=f"{cell}.{m}", value=fig["rows_s"], unit="rows/s",
                ceiling=ceil if m != "index_select" else None,
                ceiling_name=DESCRIBE["index_select"] if ceil and m != "index_select" else None,
                ratio=fig["rows_s"] / ceil if ceil and m != "index_select" else None,
                verified=fig["wrong"] == 0, mismatches=fig["wrong"],
                params=self.params(g, fig, method=m, **extra)))

    def disk_group(self, g):
        torch, R, n = self.torch, g["R"], g["n"]
        T = self.reps(BATCHES[g["blabel"]], R, "disk")
        cpu = [m for m in CPU_METHODS + MEM_METHODS if m in self.args.methods]
        idxs, _ = self.make_batches(g["N"], n, DENSITIES[g["dlabel"]], 3 + 2 * T + len(cpu) * T)
        self.size_caches(g, idxs[:2])
        batches = [Batch(i, torch, self.dev) for i in idxs]
        base = f"gather.matrix.disk.{g['rlabel']}.{g['blabel']}"
        for ws in ("ws0p1", "ws1"):
            self.leave(f"{base}.{ws}.{g['dlabel']}", ["all"],
                       "on disk only ws10: when the working set fits the cache, warpstore "
                       "serves hits after the first pass and the CPU paths read the page "
                       "cache, as in the page-cache cells")
        w = g["ws"].get("ws10")
        cell = f"{base}.ws10.{g['dlabel']}"
        if w is None:
            self.leave(cell, ["all"], g["ws_why"]["ws10"])
            return
        figures = {}
        rest = batches[3 + 2 * T:]
        if "memmap" in cpu:  # what the cell's ceiling is worked out from (summaries)
            k = cpu.index("memmap")
            g["memmap_batches"] = [b.np for b in rest[k * T:(k + 1) * T]]
        self.cpu_methods(g, [], [rest[k * T:(k + 1) * T] for k in range(len(cpu))], figures,
                         page=False, drop=lambda: drop_pages(self.path))
        wsfig = {}
        if "warpstore_host" in self.args.methods or "warpstore_host_async" in self.args.methods:
            drop_pages(self.path)
            try:
                self._disk_warpstore(g, w, batches, T, wsfig)
            except Exception as e:  # reported loudly; the map goes on
                self.failed(cell, [m for m in ("warpstore_host", "warpstore_host_async")
                                   if m in self.args.methods and m not in wsfig], e)
        self.leave(cell, ["warpstore_memory", "warpstore_memory_async"],
                   "the memory controller reads the whole file into pinned memory at open; "
                   "its misses never reach the disk (see the page-cache cells)")
        if not self.gpu:
            self.leave(cell, ["warpstore_host_async"], "no GPU (gather_async with CPU indices "
                       "gathers at once: it is warpstore_host)")
        self.emit_cell(cell, g, "ws10", w, wsfig, figures)
        self.emit_baselines(f"{base}.any.{g['dlabel']}", g, figures)

    def _disk_warpstore(self, g, w, batches, T, wsfig):
        """The host controller opened after the drop: 3 gathers fill the
        cache, T timed sync gathers, then T more posted with gather_async."""
        R = g["R"]
        with self.open_array(g, "host", w["cache"]) as arr:
            fig = self.run_warpstore(arr, "sync", batches[:3], batches[3:3 + T], R)
            if "warpstore_host" in self.args.methods:
                wsfig["warpstore_host"] = fig
            if self.gpu and "warpstore_host_async" in self.args.methods:
                arr.reset_stats()
                sec, wr, ch = self.timed(lambda b: arr.gather_async(b.dev),
                                         batches[3 + T:3 + 2 * T], R, async_=True)
                st = arr.stats()
                rows = sum(b.n for b in batches[3 + T:3 + 2 * T])
                wsfig["warpstore_host_async"] = dict(
                    fig, rows_s=rows / sec, wrong=wr, checked=ch, seconds=sec, rows=rows,
                    hit_rate=round(st["hit_rate"], 4))

    # -- the named figures -------------------------------------------------
    def random512(self):
        """64 K random 512 B rows from the whole file in the page cache,
        warpstore with every default, against the best CPU path."""
        torch, R = self.torch, 512
        N, n = self.file_bytes // R, self.batch_rows(1 << 16)
        T = self.reps(1 << 16, R, "page")
        g = dict(res="page", R=R, n=n, N=N, rlabel="512B", blabel="64K", dlabel="random",
                 coverage=n / N, span=N)
        batches = [Batch(self.rng.integers(0, N, n, dtype=np.int64), torch, self.dev)
                   for _ in range(2 + 4 * T)]
        figures = {}
        self.cpu_methods(g, batches[:1], batches[1:1 + T], figures, page=True)
        kw = {} if self.scale >= 1 else {
            "cache": self._scaled(warpstore.settings.cache_size(), 1 << 20)}
        try:
            with warpstore.open(self.path, "uint8", (N, R), **kw) as arr:
                fig = self.run_warpstore(arr, "sync", batches[1 + T:2 + T],
                                         batches[2 + T:2 + 2 * T], R)
        except Exception as e:  # reported loudly; the summary row says why it is empty
            self.failed("gather.random512.defaults", [self.default_method("page")], e)
            self.results.append(dict(
                name="gather.random512.defaults.vs_best_cpu", value=None, unit="rows/s",
                ceiling=None, ceiling_name=None, ratio=None, verified=False, mismatches=0,
                params=dict(target=1.2, reason=self.failures[-1])))
            return
        best, best_name = self.best_cpu(figures)
        cpu_wrong = figures[best_name]["wrong"] if best_name else 0
        self.results.append(dict(
            name="gather.random512.defaults.vs_best_cpu", value=fig["rows_s"], unit="rows/s",
            ceiling=best, ceiling_name=f"best CPU path: {best_name} ({DESCRIBE[best_name]})"
            if best_name else None, ratio=fig["rows_s"] / best if best else None,
            verified=fig["wrong"] == 0 and cpu_wrong == 0, mismatches=fig["wrong"] + cpu_wrong,
            params=self.params(g, fig, method=self.default_method("page") + " (controller=auto)",
                               target=1.2,
                               hit_rate=fig["hit_rate"], cache_bytes=fig["cache_bytes"],
                               line_size=fig["line_size"], direct=fig["direct"],
                               sorted_share=fig["sorted_share"],
                               defaults="every setting at its default" if not kw else
                               "every setting at its default but the cache (scaled by --scale)",
                               methods={m: f.get("rows_s") for m, f in figures.items()})))
        for m, f in figures.items():
            if "skip" in f:
                self.leave("gather.random512.defaults", [m], f["skip"])

    def summaries(self):
        # The library's defaults: in each cell the method controller="auto"
        # picks for the file there (setup asked it).
        mp, md = self.default_method("page"), self.default_method("disk")
        page = [c for c in self.cells if c["g"]["res"] == "page" and mp in c["wsfig"]
                and c["best"]]
        disk = [c for c in self.cells if c["g"]["res"] == "disk" and md in c["wsfig"]
                and "rows_s" in c["figures"].get("memmap", {})]

        def method(c):
            return mp if c["g"]["res"] == "page" else md

        def ratio(c, base):
            return c["wsfig"][method(c)]["rows_s"] / base

        def row(name, c, base, base_name, target, why_none, pick, count):
            if c is None:
                self.results.append(dict(name=name, value=None, unit="rows/s", ceiling=None,
                                         ceiling_name=None, ratio=None, verified=False,
                                         mismatches=0, params=dict(target=target, reason=why_none)))
                return
            f = c["wsfig"][method(c)]
            wrong = f["wrong"] + c["figures"][base_name]["wrong"]
            self.results.append(dict(
                name=name, value=f["rows_s"], unit="rows/s", ceiling=base,
                ceiling_name=f"{base_name} ({DESCRIBE[base_name]}) in the same cell",
                ratio=f["rows_s"] / base, verified=wrong == 0, mismatches=wrong,
                params=dict(cell=f"{c['cell']}.{method(c)}", pick=pick, cells=count,
                            defaults=f"controller=auto picks {method(c)[len('warpstore_'):]} "
                                     f"for the file here",
                            target=target, hit_rate=f["hit_rate"], direct=f["direct"])))

        srt = sorted(page, key=lambda c: ratio(c, c["best"]))
        worst = srt[0] if srt else None
        med = srt[(len(srt) - 1) // 2] if srt else None
        none = f"no page-cache cell with {mp} and a CPU path was measured"
        row("gather.matrix.worst.vs_best_cpu", worst, worst and worst["best"],
            worst and worst["best_name"], 0.8, none, "the lowest ratio", len(srt))
        row("gather.matrix.median.vs_best_cpu", med, med and med["best"], med and med["best_name"],
            1.5, none, "the median ratio (the lower one of an even count)", len(srt))
        srt = sorted(disk, key=lambda c: ratio(c, c["figures"]["memmap"]["rows_s"]))
        med = srt[(len(srt) - 1) // 2] if srt else None
        row("gather.matrix.cold.median.vs_memmap", med,
            med and med["figures"]["memmap"]["rows_s"], "memmap", 10.0,
            f"no on-disk cell with {md} and memmap was measured",
            "the median ratio over the on-disk cells (the lower one of an even count)", len(srt))
        self.cold_ceiling(disk, med)
        if not any(r["name"] == "bulk.host.vs_kvikio" for r in self.results):
            self.results.append(dict(
                name="bulk.host.vs_kvikio", value=None, unit="GB/s", ceiling=None,
                ceiling_name=None, ratio=None, verified=False, mismatches=0,
                params=dict(target=1.0, reason="bulk.page.1GiB.warpstore_host was not measured "
                            "(see left_out)")))

    def cold_ceiling(self, disk, med):
        """gather.matrix.cold.median.ceiling: in each on-disk cell, np.memmap's
        time over the least time any method could take for the same batches
        on this disk (disk_lower_bound, at the rates measure_disk found or
        the best bulk read from disk of this run, whichever is higher);
        the value is the median of those ceilings, taken as the cold median
        takes its cell (the lower one of an even count). A cold median
        above it is out of any method's reach on this disk. Each on-disk
        warpstore row gets its cell's ceiling (params.ceiling_vs_memmap)."""
        name = "gather.matrix.cold.median.ceiling"
        devices = [r for r in self.results if r["name"].startswith("device.")]
        cells = [c for c in disk if c["g"].get("memmap_batches")]
        if not self.disk_rates or not cells:
            self.results.append(dict(
                name=name, value=None, unit="x np.memmap", ceiling=None, ceiling_name=None,
                ratio=None, verified=False, mismatches=0,
                params=dict(reason=self.disk_note if not self.disk_rates else
                            "no on-disk cell with np.memmap was measured")))
            return
        bulk = [r["value"] * 1e9 for r in self.results
                if r["name"].startswith("bulk.disk.") and r["value"]]
        bw = max([self.disk_rates["bw"]] + bulk)
        iops = self.disk_rates["iops"]
        got = []
        for c in cells:
            g = c["g"]
            least = sum(disk_lower_bound(b, g["R"], iops, bw) for b in g["memmap_batches"])
            v = c["figures"]["memmap"]["seconds"] / least
            got.append((v, c))
            for r in self.results:
                if r["name"].startswith(c["cell"] + ".warpstore_"):
                    r["params"]["ceiling_vs_memmap"] = round(v, 3)
        got.sort(key=lambda x: x[0])
        v, c = got[(len(got) - 1) // 2]
        wrong = sum(r["mismatches"] for r in devices)
        self.results.append(dict(
            name=name, value=v, unit="x np.memmap", ceiling=None, ceiling_name=None, ratio=None,
            verified=wrong == 0 and all(r["verified"] for r in devices), mismatches=wrong,
            params=dict(
                cell=c["cell"], cells=len(got),
                cells_at_least_10=sum(x >= 10 for x, _ in got),
                ceilings={x["cell"]: round(y, 3) for y, x in got},
                reads_s=round(iops), gb_s=round(bw / 1e9, 4),
                pick="the median ceiling (the lower one of an even count)",
                model="np.memmap's seconds over the least any method could take for the same "
                      "batches: whole 512 B sectors, at most reads_s requests and gb_s a second "
                      "at once, gaps between runs read through where that is faster; no "
                      "latency, CPU or copy to the GPU",
                bounds="gather.matrix.cold.median.vs_memmap", bounded_target=10.0)))
        if med is not None:
            for r in self.results:
                if r["name"] == "gather.matrix.cold.median.vs_memmap":
                    r["params"]["ceiling_median"] = round(v, 3)

    # -- bulk ------------------------------------------------------------
    def bulk(self, res, labels):
        for label in labels:
            size = self._scaled(BULK[label], CHUNK)
            cell = f"bulk.{res}.{label}"
            if res == "disk" and label == "8GiB":
                self.leave(cell, ["all"], "8 GiB from the disk takes about 6 s a method at the "
                           "virtio disk's 1.3 GB/s; over the budget")
                continue
            gib = BULK[label] / (1 << 30)
            estimate = 2 + gib * (6 if res == "disk" else 4.5 if label == "8GiB" else 5)
            if self.elapsed() + estimate > self.args.budget_s * 0.97:
                self.leave(cell, ["all"], f"budget: {self.elapsed():.0f} s used of --budget-s "
                           f"{self.args.budget_s:.0f}, this read needs about {estimate:.0f} s")
                continue
            path = self.path
            if size > self.file_bytes:
                path = self.bulk_path
                write_pattern_file(path, size, seed=0)
                self.check_file(path, size)
            if res == "disk":
                drop_pages(path)
            else:
                warm_pages(path)
            # Best of 5 for the 1 GiB page-cache read (bulk.host.vs_kvikio): a
            # read takes 20 to 250 ms, and best of 2 left that ratio to luck
            # (0.82 to 1.14 over ten maps).
            reps = 3 if label == "64MiB" else (5 if label == "1GiB" and res == "page" else 1)
            runs = {}
            for m in BULK_METHODS:
                why = None
                if m not in self.args.methods:
                    why = "not selected (--methods)"
                elif m in ("kvikio", "h2d_pinned") and not self.gpu:
                    why = "no GPU"
                elif m == "kvikio" and self.kvikio is None:
                    why = self.kvikio_note
                elif m == "h2d_pinned" and (res == "disk" or size > self.file_bytes or
                                            self.pinned is None):
                    why = ("an in-memory ceiling, page cache only" if res == "disk" else
                           f"needs a pinned copy of {human_bytes(size)}; over the budget"
                           if size > self.file_bytes else self.no_copy.get("pinned"))
                elif m == "warpstore_memory" and (res == "disk" or size > self.file_bytes):
                    why = ("the memory controller reads the whole file into pinned memory at "
                           "open; its reads never reach the disk" if res == "disk" else
                           f"opening it pins and reads all {human_bytes(size)} first; over "
                           f"the budget")
                if why:
                    self.leave(cell, [m], why)
                    continue
                try:
                    runs[m] = _BulkRun(m, self, path, size)
                except Exception as e:
                    self._bulk_failed(cell, m, e)
            # Round by round, every method once a round: a slow spell of the
            # machine falls on every method alike, not on the reps of one.
            try:
                for _ in range(reps):
                    for m in list(runs):
                        try:
                            runs[m].once(res)
                        except Exception as e:
                            self._bulk_failed(cell, m, e)
                            runs.pop(m).close()
            finally:
                for r in runs.values():
                    r.close()
            figs = {m: r.figure(reps) for m, r in runs.items()}
            kv = figs.get("kvikio", {}).get("gb_s")
            best = max(((f["gb_s"], m) for m, f in figs.items()
                        if m in ("memmap", "threads_pinned", "kvikio")), default=(None, None))
            for m, f in figs.items():
                ceil, cname = (None, None)
                if m.startswith("warpstore"):
                    ceil, cname = best[0], (f"best CPU path: {best[1]} ({DESCRIBE[best[1]]})"
                                            if best[1] else None)
                self.results.append(dict(
                    name=f"{cell}.{m}", value=f["gb_s"], unit="GB/s", ceiling=ceil,
                    ceiling_name=cname, ratio=f["gb_s"] / ceil if ceil else None,
                    verified=f["wrong"] == 0, mismatches=f["wrong"],
                    params=dict(bytes=size, residency=res, reps=reps, seconds=round(f["seconds"], 6),
                                rows_checked=f["checked"], scale=self.scale, **f["extra"])))
            if res == "page" and label == "1GiB" and "warpstore_host" in figs:
                f = figs["warpstore_host"]
                wrong = f["wrong"] + figs.get("kvikio", {}).get("wrong", 0)
                self.results.append(dict(
                    name="bulk.host.vs_kvikio", value=f["gb_s"], unit="GB/s", ceiling=kv,
                    ceiling_name="KvikIO CuFile.read of the same range" if kv else None,
                    ratio=f["gb_s"] / kv if kv else None, verified=wrong == 0, mismatches=wrong,
                    params=dict(bytes=size, target=1.0, reps=reps, **f["extra"],
                                **({} if kv else {"reason": f"no KvikIO figure: {self.kvikio_note}"}))))
            # The same read with the library's defaults: the controller
            # controller="auto" picks for a file in the page cache (memory,
            # whose reads into GPU memory copy from its pinned mapping).
            dm = self.default_method("page")
            if res == "page" and label == "1GiB" and dm in figs:
                f = figs[dm]
                wrong = f["wrong"] + figs.get("kvikio", {}).get("wrong", 0)
                self.results.append(dict(
                    name="bulk.defaults.vs_kvikio", value=f["gb_s"], unit="GB/s", ceiling=kv,
                    ceiling_name="KvikIO CuFile.read of the same range" if kv else None,
                    ratio=f["gb_s"] / kv if kv else None, verified=wrong == 0, mismatches=wrong,
                    params=dict(bytes=size, target=1.0, reps=reps, method=dm,
                                defaults=f"controller=auto picks {dm[len('warpstore_'):]} "
                                         f"for the file here", **f["extra"],
                                **({} if kv else {"reason": f"no KvikIO figure: {self.kvikio_note}"}))))
            if path == self.bulk_path and not self.args.keep:
                os.unlink(path)

    def _bulk_failed(self, cell, m, e):
        if m.startswith("warpstore"):
            self.failed(cell, [m], e)
        else:
            self.leave(cell, [m], f"failed: {type(e).__name__}: "
                       f"{' '.join(str(e).split())[:200]}")

    def _threads_reader(self, path, size, threads):
        """Pipelined: threads pread 64 MiB blocks into two pinned buffers,
        each copied to the GPU without blocking while the next one is read."""
        from concurrent.futures import ThreadPoolExecutor

        torch = self.torch
        block = min(size, 64 << 20)
        bufs = [torch.empty(block, dtype=torch.uint8, pin_memory=self.gpu) for _ in range(2)]
        views = [b.numpy() for b in bufs]
        pool = ThreadPoolExecutor(threads)
        self._pools = getattr(self, "_pools", []) + [pool]

        def fn():
            out = torch.empty(size, dtype=torch.uint8, device=self.dev)
            events = [None, None]
            fd = os.open(path, os.O_RDONLY)
            try:
                for k, off in enumerate(range(0, size, block)):
                    n = min(block, size - off)
                    b = k % 2
                    if events[b] is not None:
                        events[b].synchronize()
                    part = max(1 << 20, n // threads)
                    futs = [pool.submit(os.preadv, fd, [memoryview(views[b][s:min(n, s + part)])],
                                        off + s) for s in range(0, n, part)]
                    for x in futs:
                        x.result()
                    if self.gpu:
                        out[off:off + n].copy_(bufs[b][:n], non_blocking=True)
                        events[b] = torch.cuda.Event()
                        events[b].record()
                    else:
                        out[off:off + n].copy_(bufs[b][:n])
                return out
            finally:
                os.close(fd)
        return fn

    # -- report ----------------------------------------------------------
    def report(self):
        log = self.log
        rows = []
        for c in self.cells:
            g, figs, ws = c["g"], c["figures"], c["wsfig"]

            def cellv(m):
                f = ws.get(m) or figs.get(m) or {}
                if "rows_s" not in f:
                    return "-"
                return f"{f['rows_s'] / 1e6:.2f}" + ("!" if f["wrong"] else "")
            host = ws.get("warpstore_host")
            ratio = f"{host['rows_s'] / c['best']:.2f}" if host and c["best"] else "-"
            rows.append([g["res"], g["rlabel"], g["blabel"], c["ws"], g["dlabel"]] +
                        [cellv(m) for m in METHODS] +
                        [c["best_name"] or "-", ratio, f"{host['hit_rate']:.2f}" if host else "-"])
        if rows:
            log("gather cells, M rows/s (! = wrong rows; ratio: warpstore_host / best CPU):")
            log(table(rows, ["res", "row", "batch", "ws", "density"] +
                      [m.replace("warpstore_", "ws_") for m in METHODS] +
                      ["best CPU", "ratio", "hits"]))
        bulk = [r for r in self.results if r["name"].startswith("bulk.") and
                r["name"] not in ("bulk.host.vs_kvikio", "bulk.defaults.vs_kvikio")]
        if bulk:
            log("\nbulk reads, GB/s:")
            log(table([[r["name"], f"{r['value']:.2f}", r["params"].get("api", ""),
                        r["mismatches"]] for r in bulk], ["read", "GB/s", "how", "wrong"]))
        # The defaults' cells (what the summaries take: controller=auto's pick
        # in each residency), then the host controller's where it is not that.
        for method, where in [(self.default_method(res), (res,)) for res in RESIDENCIES] + [
                ("warpstore_host", tuple(res for res in RESIDENCIES
                                         if self.default_method(res) != "warpstore_host"))]:
            self._log_losses(log, method, where)
        log(f"\nleft out ({len(self.left_out)} entries):")

        by_reason = {}
        for e in self.left_out:
            by_reason.setdefault(e["reason"], []).append(f"{e['cell']} [{','.join(e['methods'])}]")
        for reason, cells in by_reason.items():
            log(f"- {reason} ({len(cells)}):")
            log(textwrap.fill("; ".join(cells), 110, initial_indent="    ",
                              subsequent_indent="    ", break_on_hyphens=False))
        log("\nsummary:")
        for r in self.results:
            if r["name"] in SUMMARY_NAMES:
                v = "-" if r["value"] is None else f"{r['value']:.4g}"
                ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
                p = r["params"]
                aim = (f"target {p['target']}" if "target" in p else
                       f"the most {p['bounds']} could reach on this disk; its target "
                       f"{p.get('bounded_target')}" if "bounds" in p else "no target")
                log(f"  {r['name']}: {v} {r['unit']}, ratio {ratio} ({aim}), "
                    f"{p.get('cell') or p.get('reason') or ''}")
        if self.failures:
            log(f"\nWARPSTORE FAILED in {len(self.failures)} places:")
            for f in self.failures:
                log(f"  {f}")
        wrong = sum(r["mismatches"] for r in self.results)
        unverified = [r["name"] for r in self.results if not r["verified"] and r["value"] is not None]
        log(f"\nverified against the file: {wrong} wrong rows"
            + (f"; NOT VERIFIED: {', '.join(unverified)}" if unverified else ""))
        log("phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.phase_seconds.items())
            + f"; total {self.elapsed():.1f} s of --budget-s {self.args.budget_s:.0f}")

    def plots(self, directory):
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.log("plots: matplotlib is not installed; no heatmaps written "
                     "(pip install matplotlib where you want them)")
            return []
        os.makedirs(directory, exist_ok=True)
        written = []
        for res in RESIDENCIES:
            cells = {(c["g"]["rlabel"], c["g"]["blabel"], c["ws"], c["g"]["dlabel"]): c
                     for c in self.cells if c["g"]["res"] == res}
            if not cells:
                continue
            fig, axes = plt.subplots(1, len(DENSITIES), figsize=(6.5 * len(DENSITIES), 7),
                                     squeeze=False, constrained_layout=True)
            ylabels = [f"{r} {w}" for r in ROW_SIZES for w in WS]
            for ax, d in zip(axes[0], DENSITIES):
                data = np.full((len(ylabels), len(BATCHES)), np.nan)
                for i, (r, w) in enumerate((r, w) for r in ROW_SIZES for w in WS):
                    for j, b in enumerate(BATCHES):
                        c = cells.get((r, b, w, d))
                        if c and "warpstore_host" in c["wsfig"] and c["best"]:
                            data[i, j] = c["wsfig"]["warpstore_host"]["rows_s"] / c["best"]
                im = ax.imshow(np.log2(data), cmap="RdYlGn", vmin=-3, vmax=3, aspect="auto")
                for i in range(data.shape[0]):
                    for j in range(data.shape[1]):
                        if not np.isnan(data[i, j]):
                            ax.text(j, i, f"{data[i, j]:.2g}", ha="center", va="center", fontsize=7)
                ax.set_xticks(range(len(BATCHES)), list(BATCHES))
                ax.set_yticks(range(len(ylabels)), ylabels, fontsize=7)
                ax.set_title(f"{res}: {d}")
            fig.colorbar(im, ax=axes[0].tolist(), label="log2(warpstore_host / best CPU path)")
            fig.suptitle(f"regimes, {res}: warpstore (host controller, defaults) over the best "
                         f"CPU path; blank: left out ({self.device_name})")
            p = os.path.join(directory, f"regimes-{res}.png")
            fig.savefig(p, dpi=110)
            plt.close(fig)
            written.append(p)
            self.log(f"plot: {p}")
        return written

    def write(self, path, command):
        import json

        commit = git_commit()
        doc = dict(study="regimes", device=self.device_name,
                   date=time.strftime("%Y-%m-%d", time.gmtime()), commit=commit, command=command,
                   results=self.results, left_out=self.left_out,
                   params=dict(file_bytes=self.file_bytes, scale=self.scale,
                               budget_s=self.args.budget_s, seconds=round(self.elapsed(), 1),
                               phases={k: round(v, 1) for k, v in self.phase_seconds.items()},
                               gpu=self.gpu, backend=self.ext.__name__, failures=self.failures,
                               torch_threads=self.torch.get_num_threads(),
                               kvikio=self.kvikio_note,
                               warpstore_settings=warpstore.settings.as_dict()))
        # Rows another benchmark keeps in this file (python_pressure.py's
        # pressure.*) stay, with their own device, date and commit.
        try:
            with open(path) as f:
                old = json.load(f)
            mine = {r["name"] for r in doc["results"]}
            doc["results"] = doc["results"] + [
                r for r in old.get("results", []) if r["name"].startswith("pressure.")
                and r["name"] not in mine]
        except (OSError, ValueError):
            pass
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # One result (and one left-out entry) a line: a few hundred of each.
        head = {k: v for k, v in doc.items() if k not in ("results", "left_out")}
        text = json.dumps(head, indent=1, default=str)[:-2]
        for key in ("results", "left_out"):
            lines = ",\n".join("  " + json.dumps(x, default=str) for x in doc[key])
            text += f',\n "{key}": [\n{lines}\n ]'
        with open(path, "w") as f:
            f.write(text + "\n}\n")
        json.loads(open(path).read())  # what was written parses
        return doc


SUMMARY_NAMES = ("gather.matrix.worst.vs_best_cpu", "gather.matrix.median.vs_best_cpu",
                 "gather.matrix.cold.median.vs_memmap", "gather.matrix.cold.median.ceiling",
                 "gather.random512.defaults.vs_best_cpu", "bulk.host.vs_kvikio",
                 "bulk.defaults.vs_kvikio")


def run(args, log=print):
    m = Matrix(args, log)
    log(f"regime map: {m.device_name}, file {human_bytes(m.file_bytes)} in {args.dir}, scale "
        f"{args.scale}, budget {args.budget_s:.0f} s, kvikio: "
        f"{m.kvikio_note}")
    try:
        m.setup()
        t = time.perf_counter()
        m.random512()
        first = [b for b in ("64MiB", "1GiB") if b in args.bulk]
        m.bulk("page", first if "page" in args.residencies else [])
        m.phase_seconds["random512+bulk"] = time.perf_counter() - t
        m.grid("page")
        m.pinned = m.gpu_copy = None  # the in-memory ceilings are done with
        if "disk" in args.residencies:
            m.measure_disk()
        m.grid("disk")
        t = time.perf_counter()
        m.bulk("disk", first if "disk" in args.residencies else [])
        m.bulk("page", ["8GiB"] if "8GiB" in args.bulk and "page" in args.residencies else [])
        for res in RESIDENCIES:
            for label in BULK:
                if label not in args.bulk or res not in args.residencies:
                    m.leave(f"bulk.{res}.{label}", ["all"], "not selected (--bulk, --residencies)")
        m.phase_seconds["bulk"] = time.perf_counter() - t
        m.summaries()
    finally:
        for p in getattr(m, "_pools", []):
            p.shutdown()
        if not args.keep:
            for p in (m.path, m.bulk_path):
                if os.path.exists(p):
                    os.unlink(p)
    m.report()
    doc = m.write(args.json, args.command)
    log(f"results: {args.json}")
    m.plots(args.plots)
    return doc


def _scale(text):
    try:
        v = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise __import__("argparse").ArgumentTypeError(f"expected a number or a fraction like "
                                                       f"1/256, got {text!r}") from None
    if not 0 < v <= 1:
        raise __import__("argparse").ArgumentTypeError(f"must be above 0 and at most 1, got {text}")
    return v


def _row_list(text):
    """--rows: the grid's labels, or <bytes>B for any other row size (added
    to the grid, after its own)."""
    items = [t.strip() for t in text.split(",")]
    bad = [t for t in items if t not in ROW_SIZES and not
           (t.endswith("B") and t[:-1].isdigit() and int(t[:-1]) > 0 and int(t[:-1]) % 8 == 0)]
    if bad or not items:
        raise __import__("argparse").ArgumentTypeError(
            f"{', '.join(map(repr, bad)) or 'nothing'}: expected a comma-separated list of "
            f"{', '.join(ROW_SIZES)} or <bytes>B, a multiple of 8 (the check reads 8-byte "
            f"words)")
    for t in items:
        ROW_SIZES.setdefault(t, int(t[:-1]))
    return items


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    p = _Parser(prog="python_matrix.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="/tmp", help="where the data files are written (and removed)")
    p.add_argument("--file-size", type=parse_size, default="2GiB",
                   help="the gather file (before --scale)")
    p.add_argument("--scale", type=_scale, default=1.0,
                   help="multiplies every file size, batch and cache cap (e.g. 1/256 for a test)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="seconds for the whole map; cells whose turn comes later are left out")
    p.add_argument("--reps", type=_positive, default=5, help="timed gathers per cell at most")
    p.add_argument("--cache-cap", type=parse_size, default="4GiB",
                   help="largest warpstore cache a cell may use (before --scale)")
    p.add_argument("--rows", type=_row_list, default=",".join(ROW_SIZES),
                   help="row sizes: the grid's (" + ", ".join(ROW_SIZES) + ") or any other as "
                   "<bytes>B, e.g. 400B (100 float32) or 1536B (768 float16): rows that are not "
                   "a power of two span lines")
    p.add_argument("--batches", type=_list(tuple(BATCHES)), default=",".join(BATCHES))
    p.add_argument("--densities", type=_list(tuple(DENSITIES)), default=",".join(DENSITIES))
    p.add_argument("--residencies", type=_list(RESIDENCIES), default=",".join(RESIDENCIES))
    p.add_argument("--bulk", type=_list(tuple(BULK)), default=",".join(BULK))
    p.add_argument("--methods", type=_list(METHODS + ("h2d_pinned",)),
                   default=",".join(METHODS + ("h2d_pinned",)))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the data files")
    p.add_argument("--json", default=os.path.join(here, "results", "regimes.json"))
    p.add_argument("--plots", default=os.path.join(here, "results", "plots"),
                   help="directory for regimes-page.png and regimes-disk.png (needs matplotlib)")
    args = p.parse_args(argv)
    args.command = os.environ.get("WARPSTORE_BENCH_COMMAND",
                                  "python bench/python_matrix.py " + " ".join(sys.argv[1:]))
    if not os.path.isdir(args.dir):
        _fail(f"--dir {args.dir} is not a directory")
    if os.path.isdir(args.json):
        _fail(f"--json {args.json} is a directory; give the path of a file to write")
    try:
        import torch  # noqa: F401
    except ImportError:
        _fail("bench matrix needs PyTorch (pip install torch)")
    try:
        doc = run(args)
    except (ValueError, OSError) as e:
        _fail(" ".join(str(e).split()))
    ok = all(r["mismatches"] == 0 for r in doc["results"]) and not doc["params"]["failures"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
