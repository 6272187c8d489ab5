"""Where a gather's time goes: the call (wall, synchronised), the GPU span
between two events around it, and the gather kernel alone (the PyTorch
profiler's CUDA activity, median of 20 calls), for 1 K, 8 K and 64 K random
rows of 128 B and 512 B of a 2 GiB file in the page cache (controller
"auto": the memory controller). Cases: torch index_select on a GPU copy
(the in-memory floor), the extension's UVA kernel on a pinned copy, an array
whose cache holds the batch (hits; `raw`: the extension's call without the
Python wrapper), and arrays with an 8 MiB cache gathering fresh batches
(misses) with miss admission at its default (8) and off (0). Every distinct
batch's result is checked against index_select on the GPU copy.

    python bench/python_gather_kernel.py [--json F]   (CALLS=60 in the environment)
"""
import argparse, json, os, statistics, sys, time
import numpy as np
import torch
import warpstore
from torch.profiler import profile, ProfilerActivity

ap = argparse.ArgumentParser()
ap.add_argument("--json")
args = ap.parse_args()
rows_out = []
dev = torch.device("cuda")
FB = 2 << 30
path = "/tmp/probe.u8"
if not os.path.exists(path) or os.path.getsize(path) != FB:
    rng = np.random.default_rng(1)
    with open(path, "wb") as f:
        for _ in range(FB // (256 << 20)):
            f.write(rng.integers(0, 255, 256 << 20, dtype=np.uint8).tobytes())
data = np.memmap(path, dtype=np.uint8, mode="r")
ext = warpstore.backend()
CALLS = int(os.environ.get("CALLS", "60"))


def measure(fn, batches, label, check=None):
    fn(batches[0]); torch.cuda.synchronize()
    walls, spans = [], []
    for c in range(CALLS):
        b = batches[c % len(batches)]
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter(); e0.record()
        out = fn(b)
        e1.record(); torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0); spans.append(e0.elapsed_time(e1) * 1e-3)
        if check and c < len(batches):
            check(b, out)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for c in range(20):
            fn(batches[c % len(batches)]); torch.cuda.synchronize()
    ks = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            ks.setdefault(e.name[:60], []).append(e.device_time)
    kt = "; ".join(f"{k}: {statistics.median(v):.1f}us x{len(v)//20}" for k, v in ks.items())
    rows_out.append({"name": "gather_kernel." + label.replace(" ", "."), "value": round(statistics.median(walls) * 1e6, 1),
                     "unit": "us a call (median, synchronised)", "verified": check is not None,
                     "mismatches": 0, "params": {"span_us": round(statistics.median(spans) * 1e6, 1),
                     "kernels_us": {k: round(statistics.median(v), 1) for k, v in ks.items()},
                     "calls": CALLS, "device": torch.cuda.get_device_name()}})
    print(f"{label:40s} wall {statistics.median(walls)*1e6:7.1f} us  span {statistics.median(spans)*1e6:7.1f} us  | {kt}", flush=True)


for R in (128, 512):
    N = FB // R
    ref = data[: N * R].reshape(N, R)
    gpu = torch.from_numpy(np.asarray(ref)).to(dev)
    src = torch.from_numpy(np.asarray(ref)).pin_memory()
    for n in (1024, 8192, 65536):
        rng = np.random.default_rng(n + R)
        fresh = [torch.from_numpy(rng.choice(N, n, replace=False)).to(dev) for _ in range(24)]

        def check(b, out):
            w = gpu.index_select(0, b)
            assert torch.equal(out, w), "wrong rows"

        measure(lambda b: gpu.index_select(0, b), fresh, f"{R}B n={n} index_select")

        def uva(b):
            out = torch.empty((b.numel(), R), dtype=torch.uint8, device=dev)
            ext.uva_gather(src, b, out, R, torch.cuda.current_stream().cuda_stream)
            return out
        measure(uva, fresh, f"{R}B n={n} uva", check)
        # hits: a cache that holds the batch, the same batch again
        with warpstore.open(path, "uint8", (N, R), cache="256MiB") as a:
            a.gather(fresh[0]); torch.cuda.synchronize()
            measure(lambda b: a.gather(b), fresh[:1], f"{R}B n={n} ws hits", check)
            s = torch.cuda.current_stream().cuda_stream
            out = torch.empty((n, R), dtype=torch.uint8, device=dev)
            b0 = fresh[0]
            measure(lambda b: a._impl.gather_raw(b0.data_ptr(), 8, n, 0, out.data_ptr(), out.numel(), s),
                    fresh[:1], f"{R}B n={n} ws hits raw")
        for admit in ("8", "0"):
            os.environ["WARPSTORE_GATHER_MISS_ADMIT"] = admit
            with warpstore.open(path, "uint8", (N, R), cache="8MiB") as a:
                for b in fresh[:4]:
                    a.gather(b)
                a.reset_stats()
                measure(lambda b: a.gather(b), fresh[4:], f"{R}B n={n} ws misses admit={admit}", check)
                st = a.stats()
                print(f"    stats: hit_rate {st['hit_rate']:.3f} read_around {st['read_around']} "
                      f"admitting {st.get('admitting_gathers')} sorted {st.get('sorted_gathers')} "
                      f"line {st['line_size']}", flush=True)
            os.environ.pop("WARPSTORE_GATHER_MISS_ADMIT")
    del gpu, src
if args.json:
    with open(args.json, "w") as f:
        json.dump(rows_out, f, indent=1)
