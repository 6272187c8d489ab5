#!/usr/bin/env python3
"""The gather benchmark: the same rows of the same file, with the same
indices, by the paths people use today and by warpstore, in one run.

  (a) memmap   np.memmap rows indexed on the CPU, copied to the GPU
  (b) pinned   the file in a pinned PyTorch tensor: index_select on the CPU
               (into a pinned buffer), then .cuda(non_blocking=True)
  (c) uva      a GPU kernel reading the rows from that pinned tensor (UVA)
  (d) warpstore, host controller (the file in the page cache) and memory
               controller, cold cache (cleared) and warm (the same batch again)

Index streams: uniform and power-law (Zipf); rows of 4 KiB and 512 B (the
cache line matches the row). Every result is compared with path (a)'s rows,
and those with the file's pattern (see warpstore._tools.pattern_words).
Without a GPU (the CPU target) the paths that need one are skipped and
nothing moves to a device: the run checks the harness, its figures mean
nothing. Bad arguments and settings fail in one line, status 2, before the
file is written.

    python bench/python_gather.py --file /tmp/warpstore-gather.dat --size 4GiB --json out.json
    warpstore bench gather ...   (the same, from a checkout)
"""
import os
import sys
import time

import numpy as np

import warpstore
from warpstore import settings
from warpstore._tools import (GOLDEN, Progress, human_bytes, result, table, write_pattern_file,
                              write_results)
# The CLI's argument types: the same checks and one-line errors as `warpstore gen`.
from warpstore.cli import (_Parser, _check_output, _fail, _list, _positive, _seed, _size,
                           _size_text, _zipf)

ROWS = {"4k": 4096, "512": 512}
STREAMS = ("random", "zipf")


def indices(stream, rows, n, seed, zipf_a):
    rng = np.random.default_rng(seed)
    if stream == "random":
        return rng.integers(0, rows, n, dtype=np.int64)
    # Power law over ranks, hot ranks scattered over the file by a hash.
    ranks = (rng.zipf(zipf_a, n).astype(np.uint64) - np.uint64(1)) % np.uint64(rows)
    with np.errstate(over="ignore"):
        return ((ranks * np.uint64(0x9E3779B1) + np.uint64(seed)) % np.uint64(rows)).astype(np.int64)


class _Timer:
    def __init__(self, sync):
        self.sync = sync

    def __call__(self, fn, repeat=1):
        """Best of `repeat` runs of fn(); returns (seconds, last result)."""
        best, out = float("inf"), None
        for _ in range(repeat):
            out = None
            self.sync()
            t0 = time.perf_counter()
            out = fn()
            self.sync()
            best = min(best, time.perf_counter() - t0)
        return best, out


def run(path="/tmp/warpstore-gather.dat", size="4GiB", batch="512MiB", cache="2GiB", threads=8,
        rows=("4k", "512"), streams=STREAMS, controllers=("host", "memory"), seed=1,
        zipf_a=1.2, json_path=None, plot=None, command="bench/python_gather.py", repeat=2,
        log=print):
    size = warpstore._tools.parse_size(size) // 4096 * 4096
    batch_bytes = warpstore._tools.parse_size(batch)
    write_pattern_file(path, size, seed=0)
    try:
        import torch
    except ImportError:
        torch = None
    gpu = torch is not None and torch.cuda.is_available() and warpstore.backend().gpu_build()
    dev = "cuda" if gpu else "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    timer = _Timer(sync)
    device_name = torch.cuda.get_device_name() if gpu else warpstore.backend().device_name()
    log(f"gather benchmark: {path} ({human_bytes(size)}), batches of {human_bytes(batch_bytes)}, "
        f"cache {cache}, {threads} service threads, device {device_name}")

    results, table_rows, plot_data = [], [], []
    pinned = None
    if torch is not None:
        # One pinned copy of the file for paths b and c, viewed per row size.
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=gpu)
        flat = np.memmap(path, dtype=np.uint8, mode="r", shape=(size,))
        bar = Progress(size, f"pinning {human_bytes(size)} for paths b and c")
        step = 256 << 20
        for s in range(0, size, step):
            pinned[s:s + step].numpy()[:] = flat[s:s + step]
            bar.update(min(step, size - s))
        bar.close()
        del flat
    for row_name in rows:
        row_bytes = ROWS[row_name]
        nrows = size // row_bytes
        n = max(1, min(batch_bytes // row_bytes, nrows))
        mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(nrows, row_bytes))
        pinned_rows = pinned.view(nrows, row_bytes) if pinned is not None else None
        gbps = lambda s: n * row_bytes / s / 1e9  # noqa: E731
        cases = {}
        for stream in streams:
            idx_np = indices(stream, nrows, n, seed, zipf_a)
            figures, mism = {}, {}

            # (a) memmap + copy: also the reference every other path is checked against.
            def path_a():
                rows_np = mm[idx_np]
                return torch.from_numpy(rows_np).to(dev) if torch is not None else rows_np

            sec, ref = timer(path_a, repeat)
            figures["memmap"] = gbps(sec)
            mism["memmap"] = _check_pattern(ref, idx_np, row_bytes, torch)
            idx_dev = torch.from_numpy(idx_np).to(dev) if torch is not None else idx_np
            same = _comparer(ref, torch)

            if torch is not None:
                idx_cpu = torch.from_numpy(idx_np)
                staging = torch.empty((n, row_bytes), dtype=torch.uint8, pin_memory=gpu)

                def path_b():
                    torch.index_select(pinned_rows, 0, idx_cpu, out=staging)
                    return staging.to(dev, non_blocking=True)

                sec, out = timer(path_b, repeat)
                figures["pinned"], mism["pinned"] = gbps(sec), same(out)
                del out, staging
            if gpu:
                ext = warpstore.backend()

                def path_c():
                    out = torch.empty((n, row_bytes), dtype=torch.uint8, device=dev)
                    ext.uva_gather(pinned_rows, idx_dev, out, row_bytes,
                                   torch.cuda.current_stream().cuda_stream)
                    return out

                try:
                    sec, out = timer(path_c, repeat)
                    figures["uva"], mism["uva"] = gbps(sec), same(out)
                    del out
                except (RuntimeError, ValueError) as e:  # the other paths still count
                    log(f"path c (UVA) failed, left out: {e}")
            cases[stream] = (idx_dev, same, figures, mism, {})

        # (d) one array per controller and row size, every stream through it.
        for ctl in controllers:
            with warpstore.open(path, "uint8", (nrows, row_bytes), cache=cache,
                                line_size=max(512, row_bytes), controller=ctl,
                                threads=threads, direct="off") as arr:  # the page-cache study
                for stream, (idx_dev, same, figures, mism, stats) in cases.items():
                    for temp in ("cold", "warm"):
                        if temp == "cold":
                            arr.clear_cache()
                        arr.reset_stats()
                        sec, out = timer(lambda: arr[idx_dev])
                        key = f"{ctl}.{temp}"
                        figures[key], mism[key] = gbps(sec), same(out)
                        stats[key] = arr.stats()
                        del out

        for stream, (idx_dev, same, figures, mism, stats) in cases.items():
            case = f"{stream}{row_name}"
            for key, st in stats.items():
                ctl, temp = key.split(".")
                for base in ("memmap", "pinned", "uva"):
                    if base not in figures:
                        continue
                    results.append(result(
                        f"gather.{ctl}.{case}.{temp}.vs_{base}", figures[key], "GB/s",
                        figures[base], _BASE_NAMES[base], True, mism[key] + mism[base],
                        rows=n, row_bytes=row_bytes, file_bytes=size, stream=stream,
                        controller=ctl, cache=cache, line_size=max(512, row_bytes),
                        service_threads=threads, hits=st["hits"], misses=st["misses"],
                        zipf_a=zipf_a if stream == "zipf" else None))
            ceiling = figures.get("uva")
            for base in ("memmap", "pinned", "uva"):
                if base in figures:
                    results.append(result(
                        f"gather.baseline.{base}.{case}", figures[base], "GB/s", ceiling,
                        _BASE_NAMES["uva"] if ceiling else None, True, mism[base],
                        rows=n, row_bytes=row_bytes, file_bytes=size, stream=stream))
            order = [k for k in ("memmap", "pinned", "uva", "host.cold", "host.warm", "memory.cold",
                                 "memory.warm") if k in figures]
            for k in order:
                table_rows.append([case, k, f"{figures[k]:.2f}",
                                   f"{figures[k] / figures['memmap']:.2f}x", mism[k]])
            plot_data.append((case, {k: figures[k] for k in order}))
        del cases, mm, pinned_rows
    del pinned

    log(table(table_rows, ["case", "path", "GB/s", "vs memmap", "wrong rows"]))
    wrong = sum(r["mismatches"] for r in results)
    log(f"verified every row against the memmap reference and the file's pattern: {wrong} wrong")
    if json_path:
        write_results(json_path, "gather", device_name, command, results)
        log(f"results: {json_path}")
    if plot:
        _plot(plot, plot_data, log)
    return results


_BASE_NAMES = {
    "memmap": "path a: np.memmap rows indexed on the CPU, copied to the GPU",
    "pinned": "path b: pinned tensor, index_select on the CPU, .cuda(non_blocking=True)",
    "uva": "path c: GPU kernel gathering rows from pinned host memory (UVA)",
}


def _comparer(ref, torch):
    def same(out):
        if torch is None or not hasattr(out, "ne"):
            return int(np.any(np.asarray(out) != np.asarray(ref), axis=1).sum())
        return int(out.ne(ref).any(dim=1).sum().item())
    return same


def _check_pattern(ref, idx_np, row_bytes, torch):
    """Rows of path (a) against the file's pattern: word w holds w * GOLDEN."""
    words = row_bytes // 8
    if torch is None or not hasattr(ref, "view"):
        r = np.asarray(ref).view(np.uint64)
        w = idx_np.astype(np.uint64)[:, None] * np.uint64(words) + np.arange(words, dtype=np.uint64)
        with np.errstate(over="ignore"):
            return int(np.any(r != w * GOLDEN, axis=1).sum())
    golden = int(np.int64(GOLDEN.astype(np.int64)))
    wrong = 0
    for s in range(0, len(idx_np), 1 << 14):  # bounded temporaries
        part = ref[s:s + (1 << 14)].view(torch.int64)
        w = (torch.from_numpy(idx_np[s:s + (1 << 14)]).to(part.device)[:, None] * words +
             torch.arange(words, device=part.device))
        wrong += int(part.ne(w * golden).any(dim=1).sum().item())
    return wrong


def _plot(path, plot_data, log):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log(f"--plot {path}: matplotlib is not installed (pip install matplotlib); no plot written")
        return
    fig, axes = plt.subplots(1, len(plot_data), figsize=(4 * len(plot_data), 4), squeeze=False)
    for ax, (case, figs) in zip(axes[0], plot_data):
        ax.bar(list(figs), list(figs.values()))
        ax.set_title(case)
        ax.set_ylabel("GB/s")
        ax.tick_params(axis="x", rotation=60)
    fig.tight_layout()
    fig.savefig(path)
    log(f"plot: {path}")


def main(argv=None):
    p = _Parser(prog="python_gather.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--file", default="/tmp/warpstore-gather.dat")
    p.add_argument("--size", type=_size, default="8GiB")
    p.add_argument("--batch", type=_size, default="512MiB", help="bytes of rows per gather")
    p.add_argument("--cache", type=_size_text, default="2GiB")
    p.add_argument("--threads", type=_positive, default=8, help="host controller service threads")
    p.add_argument("--rows", type=_list(tuple(ROWS)), default="4k,512")
    p.add_argument("--streams", type=_list(STREAMS), default="random,zipf")
    p.add_argument("--controllers", type=_list(("host", "memory")), default="host,memory")
    p.add_argument("--zipf-a", type=_zipf, default=1.2)
    p.add_argument("--seed", type=_seed, default=1)
    p.add_argument("--json", help="results file (docs/RESULTS.md format)")
    p.add_argument("--plot", help="PNG of the figures (needs matplotlib)")
    args = p.parse_args(argv)
    try:
        if args.size < 4096:
            _fail(f"bench gather: --size must be at least 4096 bytes (one 4 KiB row), "
                  f"got {args.size}")
        size = args.size // 4096 * 4096
        # The settings the arrays will get (a bad WARPSTORE_* variable or
        # --cache / --threads fails here, before the file is written).
        s = settings.as_dict()
        for name, value in (("cache", args.cache), ("threads", args.threads)):
            s[name] = settings._normalize(name, value)
        for row_bytes in {ROWS[r] for r in args.rows}:
            settings.check(dict(s, line_size=max(512, row_bytes)))
        for out in (args.json, args.plot):
            if out is not None and os.path.isdir(out):
                _fail(f"{out} is a directory; give the path of a file to write")
        if not (os.path.isfile(args.file) and os.path.getsize(args.file) == size):
            _check_output(args.file, size, "benchmark file")
        results = run(
            path=args.file, size=size, batch=args.batch, cache=args.cache,
            threads=args.threads, rows=args.rows, streams=args.streams,
            controllers=args.controllers, seed=args.seed, zipf_a=args.zipf_a,
            json_path=args.json, plot=args.plot,
            command=os.environ.get("WARPSTORE_BENCH_COMMAND",
                                   "python bench/python_gather.py " + " ".join(sys.argv[1:])))
    except (ValueError, OSError) as e:
        # Bad settings (WARPSTORE_* variables included), files that cannot be
        # written: one line, as for bad arguments.
        _fail(" ".join(str(e).split()))
    return 0 if all(r["mismatches"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
