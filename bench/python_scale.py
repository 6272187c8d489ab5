#!/usr/bin/env python3
"""Several GPUs, one process each (torchrun), over shared files: the figures
of bench/results/scale.json. Each subcommand launches its workers under
torchrun for every GPU count asked (1 first: the baseline of the same run)
and writes rows in the RESULTS.md format.

  reads      random 4 KiB rows from one file in the page cache (controller
             host) and from pinned host memory (controller memory), each
             process with its own cache, queues and engine; aggregate rows/s
             for N GPUs against 1 (scale.reads.<controller>.<N>gpu), and the
             host's own ceilings measured beside it (host copy bandwidth to
             all GPUs at once; the io_uring ceiling comes from warpstore-bench
             ceilings in the study script)
  peer       the same skewed access stream through private caches (each GPU
             its own) and through shared ownership (warpstore.distributed.
             PeerArray): storage bytes, hit rates and throughput
             (scale.peer_cache.*)
  graphsage  apps/graphsage/train.py under torchrun with DDP, for 1 and N
             GPUs, against the same training with features in GPU memory on
             each rank (scale.graphsage.ddp.<N>gpu)
  collect    merges row files into one results document (bench/results/scale.json)

Every row is verified: each worker checks every row it gathered against the
values the file holds (computed from the row id: the files are generated
with a formula), and counts mismatches.

    python bench/python_scale.py reads --gpus 1,2 --json reads.json
    python bench/python_scale.py peer --gpus 2 --json peer.json
    python bench/python_scale.py graphsage --gpus 1,2 --json graphsage.json
    python bench/python_scale.py collect reads.json peer.json graphsage.json --out scale.json
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MULT = 2654435761  # Knuth's multiplicative constant: the files' values


# -- files made by a formula, so every gathered row can be checked ---------
def reads_value(flat):
    """int32 element at flat index `flat` (row * width + column) of the
    reads file. Works on numpy and torch int64 arrays alike."""
    return (flat * MULT) & 0x7FFFFFFF


def peer_value(rows, cols):
    """float32 element (row, col) of the peer file: exact in float32."""
    return (rows * 131 + cols) % (1 << 24)


def make_file(path, rows, width, kind):
    dtype = np.int32 if kind == "reads" else np.float32
    size = rows * width * 4
    if os.path.exists(path) and os.path.getsize(path) == size:
        return path
    step = max(1, (1 << 26) // width)
    t0 = time.perf_counter()
    with open(path + ".tmp", "wb") as f:
        for s in range(0, rows, step):
            e = min(rows, s + step)
            r = np.arange(s, e, dtype=np.int64)[:, None]
            c = np.arange(width, dtype=np.int64)[None, :]
            v = reads_value(r * width + c) if kind == "reads" else peer_value(r, c)
            v.astype(dtype).tofile(f)
    os.replace(path + ".tmp", path)
    print(f"wrote {path} ({size / 2**30:.1f} GiB) in {time.perf_counter() - t0:.1f} s", flush=True)
    return path


# -- launching ---------------------------------------------------------------
def torchrun(nproc, argv, env=None, timeout=None):
    """Runs this script's worker `argv` under torchrun with nproc processes;
    returns the rank-0 result written to a temporary file."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
        result = f.name
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", os.path.abspath(__file__)] + argv + ["--result", result]
    print("+", " ".join(cmd), flush=True)
    e = dict(os.environ, **(env or {}))
    # Keep NVLink multicast off (the lending machines' rule; NCCL needs none of it).
    e.setdefault("NCCL_NVLS_ENABLE", "0")
    e.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    subprocess.run(cmd, check=True, env=e, timeout=timeout)
    with open(result) as f:
        out = json.load(f)
    os.unlink(result)
    return out


def on_gpus():
    """Whether the ranks run on GPUs: a GPU is here and warpstore's backend
    is not forced to the CPU target (WARPSTORE_BACKEND=cpu: the harness's
    smoke test, CPU processes over gloo, on any machine)."""
    import torch

    return torch.cuda.is_available() and os.environ.get("WARPSTORE_BACKEND", "") != "cpu"


def gpu_counts(spec):
    import torch

    # Without a GPU: CPU processes over gloo, a smoke test of the harness.
    have = (torch.cuda.device_count() if on_gpus() else 0) or 2
    counts = sorted({int(x) for x in spec.split(",")})
    if 1 not in counts:
        counts = [1] + counts  # the baseline of the same run
    missing = [n for n in counts if n > have]
    if missing:
        raise SystemExit(f"asked for {missing} GPUs, this machine has {have}")
    return counts


def init_worker():
    import torch
    import torch.distributed as dist

    local = int(os.environ["LOCAL_RANK"])
    if not on_gpus():  # the harness's smoke test: CPU processes, gloo
        dist.init_process_group("gloo")
        return dist.get_rank(), dist.get_world_size(), torch.device("cpu")
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist.get_rank(), dist.get_world_size(), torch.device("cuda", local)


def sync(dev):
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def device_name(dev):
    import torch

    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def finish_worker(args, mine):
    """Gathers every rank's dict; rank 0 writes the list to --result."""
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if dist.get_rank() == 0:
        with open(args.result, "w") as f:
            json.dump(everyone, f)
    dist.barrier()
    dist.destroy_process_group()


# -- reads -------------------------------------------------------------------
def worker_reads(args):
    import torch
    import torch.distributed as dist

    import warpstore

    rank, world, dev = init_worker()
    width = args.row_bytes // 4
    rows = os.path.getsize(args.file) // args.row_bytes
    t_open = time.perf_counter()
    arr = warpstore.open(args.file, "int32", (rows, width), cache=args.cache,
                         controller=args.controller, direct="off")
    t_open = time.perf_counter() - t_open
    gen = torch.Generator(device=dev).manual_seed(1000 + rank)
    cols = torch.arange(width, device=dev, dtype=torch.int64)

    def one_batch():
        idx = torch.randint(0, rows, (args.batch,), device=dev, generator=gen)
        t0 = time.perf_counter()
        out = arr.gather(idx)
        sync(dev)
        dt = time.perf_counter() - t0
        want = reads_value(idx[:, None] * width + cols[None, :]).to(torch.int32)
        return dt, int((out != want).any(dim=1).sum())

    for _ in range(3):
        one_batch()
    arr.reset_stats()
    dist.barrier()
    t0 = time.perf_counter()
    n = bad = 0
    gather_s = 0.0
    while time.perf_counter() - t0 < args.seconds:
        dt, b = one_batch()
        gather_s += dt
        bad += b
        n += 1
    wall = time.perf_counter() - t0
    dist.barrier()
    st = arr.stats()
    mine = {"rank": rank, "rows": n * args.batch, "wall_s": wall, "gather_s": gather_s,
            "mismatches": bad, "hit_rate": st["hit_rate"], "open_s": t_open,
            "threads": warpstore.settings.threads(), "device": device_name(dev)}
    arr.close()
    finish_worker(args, mine)


def host_copy_ceiling(counts, seconds=3.0, chunk=256 << 20):
    """Pinned host memory to every GPU at once (one thread a GPU, each its
    own 256 MiB buffer copied over and over): GB/s in all for each count."""
    import threading

    import torch

    out = {}
    if not on_gpus():
        return {n: float("nan") for n in counts}
    for n in counts:
        bufs = [torch.empty(chunk, dtype=torch.uint8).pin_memory() for _ in range(n)]
        dsts = [torch.empty(chunk, dtype=torch.uint8, device=f"cuda:{g}") for g in range(n)]
        moved = [0] * n

        def run(g):
            s = torch.cuda.Stream(f"cuda:{g}")
            with torch.cuda.stream(s):
                dsts[g].copy_(bufs[g], non_blocking=True)
                s.synchronize()
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    dsts[g].copy_(bufs[g], non_blocking=True)
                    s.synchronize()
                    moved[g] += chunk
                moved[g] /= time.perf_counter() - t0

        ts = [threading.Thread(target=run, args=(g,)) for g in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out[n] = sum(moved) / 1e9
        del bufs, dsts
    return out


def cmd_reads(args):
    counts = gpu_counts(args.gpus)
    path = make_file(os.path.join(args.dir, "scale-reads.i32"), args.rows, args.row_bytes // 4,
                     "reads")
    copy = host_copy_ceiling(counts)
    rows_out = []
    for ctl in args.controllers.split(","):
        per = {}
        for n in counts:
            res = torchrun(n, ["worker-reads", "--file", path, "--controller", ctl, "--cache",
                               args.cache, "--batch", str(args.batch), "--seconds",
                               str(args.seconds), "--row-bytes", str(args.row_bytes)])
            rows = sum(r["rows"] for r in res)
            wall = max(r["wall_s"] for r in res)
            per[n] = dict(rate=rows / wall, res=res)
            gbs = rows * args.row_bytes / wall / 1e9
            print(f"reads {ctl} {n} GPU: {rows / wall / 1e6:.2f} M rows/s ({gbs:.1f} GB/s), "
                  f"hit rate {np.mean([r['hit_rate'] for r in res]):.3f}, threads "
                  f"{[r['threads'] for r in res]}, mismatches {sum(r['mismatches'] for r in res)}; "
                  f"host copy ceiling {copy[n]:.1f} GB/s", flush=True)
        base = per[1]["rate"]
        for n in counts:
            res = per[n]["res"]
            params = {"gpus": n, "row_bytes": args.row_bytes, "file_rows": args.rows,
                      "file_bytes": args.rows * args.row_bytes, "batch_rows": args.batch,
                      "cache_bytes_per_gpu": args.cache, "seconds": args.seconds,
                      "controller": ctl, "direct": "off (page cache)" if ctl == "host" else "n/a",
                      "threads_per_process": [r["threads"] for r in res],
                      "hit_rate": [round(r["hit_rate"], 4) for r in res],
                      "per_gpu_rows_per_s": [round(r["rows"] / r["wall_s"]) for r in res],
                      "gb_per_s": round(per[n]["rate"] * args.row_bytes / 1e9, 2),
                      "host_copy_ceiling_gb_per_s": round(copy[n], 2),
                      "share_of_host_copy_ceiling": round(
                          per[n]["rate"] * args.row_bytes / 1e9 / copy[n], 3),
                      "device": res[0]["device"]}
            mism = sum(r["mismatches"] for r in res)
            rows_out.append({"name": f"scale.reads.{ctl}.{n}gpu.rows_per_s",
                             "value": round(per[n]["rate"]), "unit": "rows/s",
                             "verified": True, "mismatches": mism, "params": params})
            if n > 1:
                rows_out.append({"name": f"scale.reads.{ctl}.{n}gpu", "value": round(per[n]["rate"]),
                                 "unit": "rows/s", "ceiling": round(base),
                                 "ceiling_name": "1 GPU, same run (ratio: N GPUs over 1)",
                                 "ratio": round(per[n]["rate"] / base, 3), "verified": True,
                                 "mismatches": mism + sum(r["mismatches"] for r in per[1]["res"]),
                                 "params": params})
    write_rows(args.json, rows_out)


# -- peer cache ----------------------------------------------------------------
def skewed_ids(gen, n, rows, power, dev):
    """A GNN-like skew: row popularity falls as a power of its rank (u**power,
    power 3: the hottest 1 % of rows draw about 22 % of the accesses), the
    hot rows scattered over the file by a fixed bijection."""
    import torch

    u = torch.rand(n, device=dev, generator=gen)
    hot = (u.pow(power) * rows).to(torch.int64).clamp_(max=rows - 1)
    return (hot * MULT + 12345) % rows  # rows is a power of two: a bijection


def worker_peer(args):
    import torch

    import warpstore
    from warpstore.distributed import PeerArray

    rank, world, dev = init_worker()
    dim = 128
    rows = os.path.getsize(args.file) // (dim * 4)
    cols = torch.arange(dim, device=dev, dtype=torch.int64)
    out = {"rank": rank, "runs": []}
    for stream in args.streams.split(","):
        for frac in [int(x) for x in args.cache_fractions.split(",")]:
            run = {"stream": stream, "cache_fraction": frac}
            for mode in ("private", "shared"):
                # The same stream in both modes: the generator restarts.
                gen = torch.Generator(device=dev).manual_seed(7 + rank)
                # The host controller: storage bytes are reads of the file
                # (auto would map this cached file and read no storage).
                arr = warpstore.open(args.file, "float32", (rows, dim),
                                     cache=rows * dim * 4 // frac, direct="off", controller="host")
                src = PeerArray(arr) if mode == "shared" else arr
                bad, times, half = 0, [], None
                for b in range(args.batches):
                    if b == args.batches // 2:
                        half = arr.stats()
                    if stream == "skewed":
                        idx = skewed_ids(gen, args.batch, rows, args.power, dev)
                    else:
                        idx = torch.randint(0, rows, (args.batch,), device=dev, generator=gen)
                    sync(dev)
                    t0 = time.perf_counter()
                    got = src.gather(idx)
                    sync(dev)
                    times.append(time.perf_counter() - t0)
                    want = peer_value(idx[:, None], cols[None, :]).to(torch.float32)
                    bad += int((got != want).any(dim=1).sum())
                st = arr.stats()
                run[mode] = {"bytes": st["bytes"], "steady_bytes": st["bytes"] - half["bytes"],
                             "hits": st["hits"], "misses": st["misses"],
                             "seconds": sum(times), "steady_seconds": sum(times[len(times) // 2:]),
                             "rows": args.batch * args.batches, "mismatches": bad,
                             "exchange_s": getattr(src, "exchange_seconds", 0.0)}
                arr.close()
            out["runs"].append(run)
    out["device"] = device_name(dev)
    finish_worker(args, out)


def cmd_peer(args):
    counts = [n for n in gpu_counts(args.gpus) if n > 1]
    path = make_file(os.path.join(args.dir, "scale-peer.f32"), args.rows, 128, "peer")
    rows_out = []
    modes = ("private", "shared")
    for n in counts:
        res = torchrun(n, ["worker-peer", "--file", path, "--streams", args.streams,
                           "--cache-fractions", args.cache_fractions, "--batch", str(args.batch),
                           "--batches", str(args.batches), "--power", str(args.power)])
        for k, first in enumerate(res[0]["runs"]):
            stream, frac = first["stream"], first["cache_fraction"]
            runs = [r["runs"][k] for r in res]
            tot = {m: {f: sum(r[m][f] for r in runs) for f in
                       ("bytes", "steady_bytes", "hits", "misses", "rows", "mismatches")}
                   for m in modes}
            secs = {m: max(r[m]["seconds"] for r in runs) for m in modes}
            steady = {m: max(r[m]["steady_seconds"] for r in runs) for m in modes}
            hit = {m: tot[m]["hits"] / max(tot[m]["hits"] + tot[m]["misses"], 1) for m in modes}
            rate = {m: tot[m]["rows"] / secs[m] for m in modes}
            mism = tot["private"]["mismatches"] + tot["shared"]["mismatches"]
            ratio = tot["shared"]["bytes"] / tot["private"]["bytes"]
            steady_ratio = tot["shared"]["steady_bytes"] / max(tot["private"]["steady_bytes"], 1)
            params = {"gpus": n, "stream": stream, "rows": args.rows, "row_bytes": 512,
                      "file_bytes": args.rows * 512, "cache_bytes_per_gpu": args.rows * 512 // frac,
                      "cache_fraction_per_gpu": f"1/{frac}", "batch_rows": args.batch,
                      "batches": args.batches,
                      "skew_power": args.power if stream == "skewed" else None,
                      "storage_bytes_private": tot["private"]["bytes"],
                      "storage_bytes_shared": tot["shared"]["bytes"],
                      "steady_storage_ratio": round(steady_ratio, 4),
                      "hit_rate_private": round(hit["private"], 4),
                      "hit_rate_shared": round(hit["shared"], 4),
                      "rows_per_s_private": round(rate["private"]),
                      "rows_per_s_shared": round(rate["shared"]),
                      "steady_rows_per_s_private": round(tot["private"]["rows"] / 2 / steady["private"]),
                      "steady_rows_per_s_shared": round(tot["shared"]["rows"] / 2 / steady["shared"]),
                      "exchange_s_shared": [round(r["shared"]["exchange_s"], 3) for r in runs],
                      "device": res[0]["device"],
                      "stream_note": "each rank its own seeded stream, the same in both modes; "
                                     "skewed: popularity u**power over the rows, hot rows scattered"}
            print(f"peer {n} GPUs, {stream}, cache 1/{frac} each: storage bytes shared/private "
                  f"{ratio:.3f} (steady {steady_ratio:.3f}; "
                  f"{tot['shared']['bytes'] / 2**30:.2f} / {tot['private']['bytes'] / 2**30:.2f} GiB), "
                  f"hit rate {hit['shared']:.3f} vs {hit['private']:.3f}, rows/s "
                  f"{rate['shared']:,.0f} vs {rate['private']:,.0f}, mismatches {mism}", flush=True)
            # The row: the default stream and cache (skewed, 1/8 a GPU: GraphSAGE's).
            main = stream == "skewed" and frac == 8
            tag = ("" if main else f".{stream}.cache_1_{frac}") + ("" if n == 2 else f".{n}gpu")
            rows_out.append({"name": "scale.peer_cache.storage_bytes" + tag,
                             "value": round(ratio, 4), "unit": "shared / private storage bytes",
                             "ceiling": tot["private"]["bytes"],
                             "ceiling_name": "storage bytes with private caches, same stream",
                             "ratio": round(ratio, 4), "verified": True, "mismatches": mism,
                             "params": params})
            rows_out.append({"name": "scale.peer_cache.throughput" + tag,
                             "value": round(rate["shared"]), "unit": "rows/s",
                             "ceiling": round(rate["private"]),
                             "ceiling_name": "private caches, same stream",
                             "ratio": round(rate["shared"] / rate["private"], 3),
                             "verified": True, "mismatches": mism, "params": params})
    write_rows(args.json, rows_out)


# -- GraphSAGE under DDP -----------------------------------------------------------
def cmd_graphsage(args):
    counts = gpu_counts(args.gpus)
    train = os.path.join(ROOT, "apps", "graphsage", "train.py")
    per = {}
    for n in counts:
        with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
            js = f.name
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={n}", train, "--json", js, "--name", f"scale.graphsage.{n}gpu",
               "--sources", args.sources, "--dir", args.dir, "--reuse"] + args.train_args.split()
        print("+", " ".join(cmd), flush=True)
        env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
        subprocess.run(cmd, check=True, env=env)
        with open(js) as f:
            per[n] = {r["name"].rsplit(".", 1)[-1] if r["name"].endswith("epoch_s") else r["name"]: r
                      for r in json.load(f)}
        os.unlink(js)
        if n > 1 and args.peer:  # the same training, the ranks sharing their cache lines
            with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
                js = f.name
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={n}", train, "--json", js, "--name",
                   f"scale.graphsage.peer.{n}gpu", "--sources", "warpstore", "--peer", "--dir",
                   args.dir, "--reuse"] + args.train_args.split()
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, env=env)
            with open(js) as f:
                per[f"peer{n}"] = {r["name"].rsplit(".", 1)[-1]: r for r in json.load(f)}
            os.unlink(js)
    rows_out = []
    base = per[1]
    for n in counts:
        rows_out.extend(per[n].values())
        if n == 1:
            continue
        ws, ws1 = per[n]["epoch_s"], base["epoch_s"]
        params = dict(ws["params"], one_gpu_epoch_s=ws1["value"],
                      one_gpu_accuracy=ws1["params"]["warpstore_accuracy"],
                      accuracy_difference=round(abs(ws["params"]["warpstore_accuracy"] -
                                                    ws1["params"]["warpstore_accuracy"]), 4))
        gpu_row = per[n].get(f"scale.graphsage.{n}gpu.vs_gpu")
        if gpu_row:
            params["features_in_gpu_memory_epoch_s"] = gpu_row["ceiling"]
        peer = per.get(f"peer{n}")
        if peer:
            pe = peer["epoch_s"]
            rows_out.extend(peer.values())
            rows_out.append({
                "name": f"scale.graphsage.peer.{n}gpu.storage_bytes",
                "value": round(pe["params"]["warpstore_storage_bytes"] /
                               ws["params"]["warpstore_storage_bytes"], 4),
                "unit": "shared / private storage bytes", "ceiling": ws["params"]["warpstore_storage_bytes"],
                "ceiling_name": "private caches, the same training", "ratio": round(
                    pe["params"]["warpstore_storage_bytes"] / ws["params"]["warpstore_storage_bytes"], 4),
                "verified": True, "mismatches": pe["mismatches"] + ws["mismatches"],
                "params": dict(pe["params"], private_epoch_s=ws["value"],
                               private_hit_rate=ws["params"]["warpstore_hit_rate"])})
        rows_out.append({"name": f"scale.graphsage.ddp.{n}gpu", "value": ws["value"], "unit": "s",
                         "ceiling": ws1["value"], "ceiling_name": "1 GPU epoch, same run "
                         "(ratio: speedup, 1 GPU over N)",
                         "ratio": round(ws1["value"] / ws["value"], 3), "verified": True,
                         "mismatches": ws["mismatches"] + ws1["mismatches"], "params": params})
    write_rows(args.json, rows_out)


# -- output ----------------------------------------------------------------------
def write_rows(path, rows):
    for r in rows:
        print(f"  {r['name']}: {r['value']} {r['unit']}" +
              (f" (ratio {r['ratio']})" if "ratio" in r else ""), flush=True)
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


def cmd_collect(args):
    rows = []
    for p in args.files:
        if os.path.exists(p):
            with open(p) as f:
                got = json.load(f)
            rows.extend(got["results"] if isinstance(got, dict) else got)  # a study file, or rows
        else:
            print(f"collect: {p} missing (its step failed or did not run)", file=sys.stderr)
    # The host's io_uring ceiling at the threads the reads ran on, beside them.
    uring = {r["name"].rsplit(".t", 1)[-1]: r["value"] for r in rows
             if r["name"].startswith("ceiling.uring.random4k.t") and r.get("unit") == "GB/s"}
    for r in rows:
        if r["name"].startswith("ceiling."):
            r["name"] = "scale." + r["name"]  # this machine's ceiling, same run
        p = r.get("params", {})
        if r["name"].startswith("scale.reads.host.") and "threads_per_process" in p:
            t = str(sum(p["threads_per_process"]))
            if t in uring:
                p["uring_ceiling_gb_per_s"] = uring[t]
                p["share_of_uring_ceiling"] = round(p["gb_per_s"] / uring[t], 3)
    device = next((r["params"].get("device") for r in rows if "device" in r.get("params", {})),
                  "unknown")
    doc = {"study": "scale", "device": device, "date": datetime.date.today().isoformat(),
           "commit": os.environ.get("WARPSTORE_COMMIT", "unknown"), "command": args.command,
           "results": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{len(rows)} rows -> {args.out}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def driver(name, gpus):
        """A subcommand run by hand: the GPU counts, where its files go, its rows."""
        d = sub.add_parser(name)
        d.add_argument("--gpus", default=gpus)
        d.add_argument("--dir", default="/tmp")
        d.add_argument("--json")
        return d

    def worker(name, strings, counts):
        """A subcommand torchrun runs in each rank; its driver gives every argument."""
        w = sub.add_parser(name)
        for a in strings + ("--result",):
            w.add_argument(a, required=True)
        for a, kind in counts:
            w.add_argument(a, type=kind, required=True)

    r = driver("reads", "1,2")
    r.add_argument("--controllers", default="host,memory")
    r.add_argument("--rows", type=int, default=2 << 20, help="rows of the file (4 KiB each: 8 GiB)")
    r.add_argument("--row-bytes", type=int, default=4096)
    r.add_argument("--cache", default="256MiB", help="each GPU's cache")
    r.add_argument("--batch", type=int, default=16384)
    r.add_argument("--seconds", type=float, default=6.0)
    worker("worker-reads", ("--file", "--controller", "--cache"),
           (("--batch", int), ("--seconds", float), ("--row-bytes", int)))
    q = driver("peer", "2")
    q.add_argument("--rows", type=int, default=8 << 20, help="rows of 512 B (a power of two; 4 GiB)")
    q.add_argument("--cache-fractions", default="16,8,4,2",
                   help="each GPU's cache: these fractions of the file (1/N)")
    q.add_argument("--streams", default="skewed,uniform")
    q.add_argument("--batch", type=int, default=65536)
    q.add_argument("--batches", type=int, default=120)
    q.add_argument("--power", type=float, default=3.0)
    worker("worker-peer", ("--file", "--streams", "--cache-fractions"),
           (("--batch", int), ("--batches", int), ("--power", float)))
    g = driver("graphsage", "1,2")
    g.add_argument("--sources", default="warpstore,gpu")
    g.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                   help="also train with the ranks sharing cache lines (PeerArray)")
    g.add_argument("--train-args", default="--nodes 2000000 --dim 128 --epochs 3 --batches 0 "
                   "--test-nodes 20000 --controller host")
    c = sub.add_parser("collect")
    c.add_argument("files", nargs="+")
    c.add_argument("--out", required=True)
    c.add_argument("--command", default="scripts/gpu.sh scale")
    args = p.parse_args(argv)
    if args.cmd == "peer" and args.rows & (args.rows - 1):
        p.error("--rows must be a power of two (the hot rows are scattered by a bijection mod rows)")
    return {"reads": cmd_reads, "worker-reads": worker_reads, "peer": cmd_peer,
            "worker-peer": worker_peer, "graphsage": cmd_graphsage,
            "collect": cmd_collect}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
