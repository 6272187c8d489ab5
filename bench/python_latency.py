"""Latency of one small gather: where the time of a 1 K-row gather goes.

The regime map's worst cells are batches of 1,024 rows, where one gather is
one launch and one synchronisation. This times, per call and per row size:

  defaults      Array.gather with every default (controller="auto")
  host          Array.gather with controller="host"
  extension     the extension's own call (no Python wrapper), defaults,
                with DLPack tensors
  extension_raw the same from addresses (gather_raw: what Array.gather
                calls with torch tensors)
  prep          the wrapper's general path: checks, output and stream alone (no
                gather; 1-D int64/int32 tensors take a shorter one)
  index_select  torch.index_select on a GPU copy (the in-memory floor)
  threads_pinned  torch.index_select from the mapped file into pinned
                memory, then a non-blocking copy (the best CPU path)

every call synchronised, each result checked against the file. Rows
`.after_cpu_work` time defaults, index_select and threads_pinned again, each
call right after torch CPU work on every intra-op thread, as in the regime
map's process (where 1 K calls took about twice as long as alone);
--profile prints where 50 such gathers spend their host time (after every
timed row: the profiler slows every CUDA call after it).

With --misses it also times gathers that miss (the regime map's `ws10`
cells): a cycle of distinct batches through a cache a tenth of their lines,
and the same batches through a cache that holds them all but is cleared
before each call (fills without evictions). Per call: the median wall time,
the GPU time between two events around the call, and the cache's counters
(misses, evictions, retries and reads around the cache per call), beside a UVA kernel reading the
same rows from a pinned copy (no cache).

    python bench/python_latency.py [--rows 1024] [--calls 300] [--misses] [--profile [TRACE]]
                                   [--json F]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

import warpstore


def timed(fn, calls, before=None):
    """Median microseconds of fn() and a synchronisation; before() (not
    timed) runs ahead of each call."""
    fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(calls):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t.append(time.perf_counter() - t0)
    return statistics.median(t) * 1e6


_CPU_A = None


def cpu_work():
    """What the regime map does between two timed gathers: torch CPU work
    on every intra-op thread (there, checking the last batch), whose pool
    then spins a while. Each method's `.after_cpu_work` row is timed right
    after it: in the map's process the same 1 K gathers took about twice
    as long as alone (BENCHMARKS, Regimes)."""
    global _CPU_A
    if _CPU_A is None:
        _CPU_A = torch.randn(384, 384)
    torch.mm(_CPU_A, _CPU_A)


def profile_gather(a, idx, calls, out_path):
    """The host side of `calls` default gathers under the PyTorch profiler
    (CUDA runtime calls included, through CUPTI): where a call's time goes."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(10):
        a.gather(idx)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            cpu_work()
            a.gather(idx)
            torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=25)
    print(table, flush=True)
    if out_path:
        prof.export_chrome_trace(out_path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--file-bytes", type=int, default=256 << 20)
    p.add_argument("--misses", action="store_true")
    p.add_argument("--profile", metavar="TRACE", nargs="?", const="",
                   help="also profile 50 default gathers of 128 B rows after CPU work (a table; "
                        "a Chrome trace to TRACE if given)")
    p.add_argument("--json")
    args = p.parse_args()
    dev = torch.device("cuda")
    out_rows = []
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        path = os.path.join(d, "latency.u8")
        data = np.random.default_rng(1).integers(0, 255, args.file_bytes, dtype=np.uint8)
        data.tofile(path)
        for row in (128, 512, 4096):
            n = args.file_bytes // row
            ref = data.reshape(n, row)
            idx = torch.from_numpy(np.random.default_rng(row).integers(0, n, args.rows)).to(dev)
            want = torch.from_numpy(ref[idx.cpu().numpy()]).to(dev)
            res = {}
            for name, ctl in (("defaults", None), ("host", "host")):
                kw = {} if ctl is None else {"controller": ctl}
                with warpstore.open(path, "uint8", (n, row), cache="64MiB", **kw) as a:
                    got = a.gather(idx)
                    assert torch.equal(got, want), name
                    res[name] = timed(lambda: a.gather(idx), args.calls)
                    if name == "defaults":
                        picked = a.stats()["controller"]
                        out = torch.empty((args.rows, row), dtype=torch.uint8, device=dev)
                        s = torch.cuda.current_stream().cuda_stream
                        a._impl.gather(idx, out.view(-1), s)
                        assert torch.equal(out, want)
                        res["extension"] = timed(lambda: a._impl.gather(idx, out.view(-1), s),
                                                 args.calls)
                        out.zero_()
                        a._impl.gather_raw(idx.data_ptr(), 8, args.rows, dev.index or 0,
                                           out.data_ptr(), out.numel(), s)
                        assert torch.equal(out, want)
                        res["extension_raw"] = timed(
                            lambda: a._impl.gather_raw(idx.data_ptr(), 8, args.rows,
                                                       dev.index or 0, out.data_ptr(),
                                                       out.numel(), s), args.calls)
                        res["prep"] = timed(lambda: a._torch_call(idx), args.calls)
                        # The same calls, each right after torch CPU work (the map's
                        # process).
                        res["defaults.after_cpu_work"] = timed(lambda: a.gather(idx),
                                                               args.calls, cpu_work)
                        res["extension_raw.after_cpu_work"] = timed(
                            lambda: a._impl.gather_raw(idx.data_ptr(), 8, args.rows,
                                                       dev.index or 0, out.data_ptr(),
                                                       out.numel(), s), args.calls, cpu_work)
                        assert torch.equal(out, want)
            gpu = torch.from_numpy(ref).to(dev)
            assert torch.equal(gpu.index_select(0, idx), want)
            res["index_select"] = timed(lambda: gpu.index_select(0, idx), args.calls)
            mm = torch.from_numpy(np.memmap(path, dtype=np.uint8, mode="r", shape=(n, row)))
            pinned = torch.empty((args.rows, row), dtype=torch.uint8, pin_memory=True)
            cpu_idx = idx.cpu()
            dst = torch.empty((args.rows, row), dtype=torch.uint8, device=dev)

            def cpu_path():
                torch.index_select(mm, 0, cpu_idx, out=pinned)
                dst.copy_(pinned, non_blocking=True)
            cpu_path()
            torch.cuda.synchronize()
            assert torch.equal(dst, want)
            res["threads_pinned"] = timed(cpu_path, args.calls)
            res["index_select.after_cpu_work"] = timed(lambda: gpu.index_select(0, idx),
                                                       args.calls, cpu_work)
            res["threads_pinned.after_cpu_work"] = timed(cpu_path, args.calls, cpu_work)
            print(f"{row:5d} B rows, {args.rows} a call (auto picked {picked}): " +
                  ", ".join(f"{k} {v:.0f} us" for k, v in res.items()), flush=True)
            for k, v in res.items():
                out_rows.append({"name": f"latency.{row}B.{args.rows}.{k}", "value": round(v, 1),
                                 "unit": "us a call (median)", "verified": True, "mismatches": 0,
                                 "params": {"rows": args.rows, "row_bytes": row, "calls": args.calls,
                                            "picked": picked, "device": torch.cuda.get_device_name()}})
            del gpu, mm
        if args.misses:
            out_rows += misses(path, data, args, dev)
        if args.profile is not None:
            # Last: the profiler's CUDA callbacks stay on once started, and
            # every CUDA call after it in this process ran 35-75 % slower.
            n = args.file_bytes // 128
            idx = torch.from_numpy(np.random.default_rng(128).integers(0, n, args.rows)).to(dev)
            with warpstore.open(path, "uint8", (n, 128), cache="64MiB") as a:
                assert torch.equal(a.gather(idx), torch.from_numpy(
                    data.reshape(n, 128)[idx.cpu().numpy()]).to(dev))
                profile_gather(a, idx, 50, args.profile)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out_rows, f, indent=1)


def misses(path, data, args, dev):
    """Gathers that miss: where their time goes (see the module doc)."""
    ext = warpstore.backend()
    rows_out = []
    cycle = 20  # distinct batches, 10x the lines of a cache that holds two
    for row in (128, 512, 4096):
        n = args.file_bytes // row
        ref = data.reshape(n, row)
        rng = np.random.default_rng(7 + row)
        idxs = [torch.from_numpy(rng.choice(n, args.rows, replace=False)).to(dev)
                for _ in range(cycle)]
        wants = [torch.from_numpy(ref[i.cpu().numpy()]).to(dev) for i in idxs]
        for label, small in (("evicting", True), ("cleared", False)):
            with warpstore.open(path, "uint8", (n, row), cache="1MiB") as a:
                line = a.stats()["line_size"]
            lines = 2 * args.rows * max(1, row // line)
            cache = max(64, 1 << (lines - 1).bit_length()) * line if small else 256 << 20
            with warpstore.open(path, "uint8", (n, row), cache=cache) as a:
                for i, w in zip(idxs, wants):  # warm: fill the cache, check
                    assert torch.equal(a.gather(i), w)
                walls, gpus = [], []
                before = a.stats()
                calls = min(args.calls, 200)
                for c in range(calls):
                    k = c % cycle
                    if not small:
                        a.clear_cache()
                    torch.cuda.synchronize()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    t0 = time.perf_counter()
                    e0.record()
                    got = a.gather(idxs[k])
                    e1.record()
                    torch.cuda.synchronize()
                    walls.append(time.perf_counter() - t0)
                    gpus.append(e0.elapsed_time(e1) * 1e-3)
                    if c < cycle:
                        assert torch.equal(got, wants[k])
                after = a.stats()
                st = {f: (after[f] - before[f]) / calls for f in
                      ("misses", "evictions", "retries", "hits", "read_around")}
                res = {"wall_us": statistics.median(walls) * 1e6,
                       "gpu_us": statistics.median(gpus) * 1e6,
                       "worst_us": max(walls) * 1e6, **{f + "_a_call": v for f, v in st.items()},
                       "line_size": after["line_size"], "cache_bytes": after["cache_bytes"],
                       "controller": after["controller"], "mapped": after.get("mapped")}
            print(f"misses {row:5d} B rows, {label:8s}: " +
                  ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in res.items()), flush=True)
            rows_out.append({"name": f"latency.misses.{row}B.{args.rows}.{label}",
                             "value": round(res["wall_us"], 1), "unit": "us a call (median)",
                             "verified": True, "mismatches": 0, "params": res})
        src = torch.from_numpy(ref).pin_memory()
        out = torch.empty((args.rows, row), dtype=torch.uint8, device=dev)
        s = torch.cuda.current_stream().cuda_stream
        ext.uva_gather(src, idxs[0], out, row, s)
        assert torch.equal(out, wants[0])
        k = [0]

        def uva():
            k[0] = (k[0] + 1) % cycle
            ext.uva_gather(src, idxs[k[0]], out, row, s)
        v = timed(uva, min(args.calls, 200))
        print(f"misses {row:5d} B rows, uva: {v:.1f} us", flush=True)
        rows_out.append({"name": f"latency.misses.{row}B.{args.rows}.uva", "value": round(v, 1),
                         "unit": "us a call (median)", "verified": True, "mismatches": 0,
                         "params": {"rows": args.rows, "row_bytes": row}})
        del src
    return rows_out


if __name__ == "__main__":
    sys.exit(main())
