#!/usr/bin/env python3
"""GraphSAGE with NeighborLoader on a generated graph whose node features live
in a file at least 4x the warpstore cache, against the same training with the
features in GPU memory (same seed) and with the usual out-of-core path
(np.memmap rows copied to the GPU). One command:

    python apps/graphsage/train.py                      # 2 M nodes, 128 floats each
    python apps/graphsage/train.py --nodes 500000 --epochs 1 --batches 50
    torchrun --nproc-per-node 2 apps/graphsage/train.py   # data-parallel, one GPU a process

Under torchrun (WORLD_SIZE > 1) each rank trains a DistributedDataParallel
copy of the model on its own GPU and its share of the seeds, fetching
features through its own warpstore array (its own cache, queues and I/O
engine); --peer shares the ranks' cache lines instead (each line cached by
one rank, rows sent between GPUs: warpstore.distributed.PeerArray). An
epoch covers the same seeds whatever the number of GPUs (--batches counts
the batches of all ranks together); its time is the slowest rank's.

Prints per-epoch time, the share of it spent fetching features, and test
accuracy for each feature source.

The graph: nodes belong to one of --classes communities; a node's features
are its community's centroid plus noise, and most edges stay inside a
community, so neighbors carry signal a GNN can use.
"""
import argparse
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torch.distributed as dist
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import warpstore
from warpstore._files import drop_pages
from warpstore._tools import Progress, human_bytes, parse_size
from warpstore.feature_store import InMemoryGraphStore, WarpstoreFeatureStore, neighbor_sampler


class MemmapRows:
    """Path (a): np.memmap rows indexed on the CPU, copied to the device."""

    def __init__(self, path, shape, device):
        self.mm = np.memmap(path, dtype=np.float32, mode="r", shape=shape)
        self.shape, self.device = shape, device

    def __len__(self):
        return self.shape[0]

    def gather(self, idx):
        return torch.from_numpy(self.mm[idx.cpu().numpy()]).to(self.device)

    def remap(self):
        """A fresh mapping: pages mapped by the old one stay resident even
        after a drop, so a cold epoch starts from a new one."""
        self.mm = np.memmap(self.mm.filename, dtype=np.float32, mode="r", shape=self.shape)

    def gather_async(self, idx):
        """The same fetch run ahead on a thread, as a user would write it for
        the fetch-ahead loop: the rows are copied on the thread's own CUDA
        stream into a tensor handed out at once."""
        return _ThreadFetch(self, idx)

    def close(self):
        if getattr(self, "pool", None) is not None:
            self.pool.shutdown()


class _ThreadFetch:
    def __init__(self, rows, idx):
        import concurrent.futures

        if getattr(rows, "pool", None) is None:
            rows.pool = concurrent.futures.ThreadPoolExecutor(1)
            rows.stream = torch.cuda.Stream(rows.device) if rows.device.type == "cuda" else None
        ids = idx.cpu().numpy()
        self.tensor = torch.empty((len(ids), rows.shape[1]), dtype=torch.float32, device=rows.device)

        def fetch():
            host = torch.from_numpy(rows.mm[ids])
            if rows.stream is None:
                self.tensor.copy_(host)
                return
            with torch.cuda.stream(rows.stream):
                self.tensor.copy_(host.pin_memory(), non_blocking=True)
            rows.stream.synchronize()

        self.future = rows.pool.submit(fetch)

    def wait(self):
        self.future.result()
        return self.tensor


def generate(args, path):
    g = torch.Generator().manual_seed(args.seed)
    n, c, d = args.nodes, args.classes, args.dim
    y = torch.randint(0, c, (n,), generator=g)
    centroids = torch.randn(c, d, generator=g) * args.signal
    size = n * d * 4
    if not (os.path.exists(path) and os.path.getsize(path) == size and args.reuse):
        bar = Progress(n, f"writing features {path} ({human_bytes(size)})")
        # The noise from a generator of its own: the graph below is the same
        # whether the file is written or reused (--reuse).
        noise = torch.Generator().manual_seed(args.seed + 1)
        with open(path, "wb") as f:
            step = 1 << 16
            for s in range(0, n, step):
                e = min(n, s + step)
                x = centroids[y[s:e]] + torch.randn(e - s, d, generator=noise)
                x.numpy().tofile(f)
                bar.update(e - s)
        bar.close()
    # Edges: each node sends --degree edges, --homophily of them inside its community.
    src = torch.arange(n).repeat_interleave(args.degree)
    order = torch.argsort(y)
    counts = torch.bincount(y, minlength=c)
    starts = torch.cumsum(counts, 0) - counts
    ys = y[src]
    same = order[starts[ys] + (torch.rand(src.numel(), generator=g) * counts[ys]).long()]
    other = torch.randint(0, n, (src.numel(),), generator=g)
    dst = torch.where(torch.rand(src.numel(), generator=g) < args.homophily, same, other)
    perm = torch.randperm(n, generator=g)
    train = perm[: int(n * args.train_fraction)]
    test = perm[-args.test_nodes:]
    return y, torch.stack([src, dst]), train, test


def thread_cpu():
    """CPU seconds of each thread of this process so far, by thread name
    (Linux /proc; {} elsewhere): {name: seconds}, threads of one name added,
    the main thread as "main thread"."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread left
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        # The main thread apart from its namesakes (torch's intra-op threads).
        name = "main thread" if tid == str(os.getpid()) else name
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def thread_cpu_since(before):
    """thread_cpu() less `before`, threads that used under 5 ms left out."""
    now = thread_cpu()
    d = {k: round(v - before.get(k, 0.0), 3) for k, v in now.items()}
    return dict(sorted(((k, v) for k, v in d.items() if v >= 0.005), key=lambda kv: -kv[1]))


def train_step(model, opt, batch, device):
    """One step on a batch: forward, backward, the optimizer; the loss (a
    host synchronisation)."""
    opt.zero_grad()
    out = model(batch.x, batch.edge_index.to(device))[: batch.batch_size]
    loss = F.cross_entropy(out, batch.y[: batch.batch_size].to(device))
    loss.backward()
    opt.step()
    return loss.item()


def profile_epoch(loader, fs, model, opt, device, fetch_ahead, batches_wanted):
    """One more epoch of the same loop under the PyTorch profiler (CPU and
    CUDA): the ops that take the host's and the GPU's time, for
    --profile. Run after the timed epochs, which it does not slow."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    batches = 0
    with profile(activities=acts) as prof:
        for batch in (fs.fetch_ahead(loader) if fetch_ahead else loader):
            train_step(model, opt, batch, device)
            batches += 1
            if batches == batches_wanted:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    ka = prof.key_averages()

    def top(key, n=12):
        rows = sorted(ka, key=lambda e: getattr(e, key), reverse=True)[:n]
        return [{"op": e.key[:90], "calls": e.count,
                 "cpu_self_ms": round(e.self_cpu_time_total / 1e3, 3),
                 "cpu_total_ms": round(e.cpu_time_total / 1e3, 3),
                 "gpu_ms": round(getattr(e, "self_device_time_total", 0) / 1e3, 3)} for e in rows]

    launches = sum(e.count for e in ka if e.key == "cudaLaunchKernel")
    return {"batches": batches, "kernel_launches": launches,
            "by_cpu_self": top("self_cpu_time_total"),
            "by_gpu": top("self_device_time_total") if device.type == "cuda" else []}


class Ranks:
    """Where this process stands among torchrun's ranks (one GPU each), or
    alone: rank 0 of 1."""

    def __init__(self):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        self.on = self.world > 1

    def start(self, device):
        """NCCL between GPUs; gloo between CPU processes (no GPU: as CI runs it)."""
        self.device = device
        if self.on:
            if device.type == "cuda":
                dist.init_process_group("nccl", device_id=device)
            else:
                dist.init_process_group("gloo")

    def share(self, ids):
        """This rank's share of `ids`: every rank the same count (DDP steps
        in lockstep), the remainder dropped."""
        if not self.on:
            return ids
        per = ids.numel() // self.world
        return ids[self.rank::self.world][:per]

    def total(self, *values, op="sum"):
        """values summed (or their max) over the ranks."""
        if not self.on:
            return values if len(values) > 1 else values[0]
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        out = tuple(t.tolist())
        return out if len(out) > 1 else out[0]

    def barrier(self):
        if self.on:
            dist.barrier()

    def log(self, *a, **k):
        if self.rank == 0:
            print(*a, **k)


def run(source_name, features, y, edge_index, train, test, args, device, reference, ranks):
    torch.manual_seed(args.seed)
    log = ranks.log
    train, test_share = ranks.share(train), ranks.share(test)
    per_rank_batches = -(-args.batches // ranks.world) if args.batches else 0
    fs, gs = WarpstoreFeatureStore(device=device), InMemoryGraphStore()
    fs.put_tensor(features, group_name=None, attr_name="x", index=None)
    # Labels are small: they live where training runs, as a user keeps them.
    fs.put_tensor(y.to(device), group_name=None, attr_name="y", index=None)
    gs.put_edge_index(edge_index, edge_type=None, layout="coo", size=(args.nodes, args.nodes))
    fanout = [int(f) for f in args.fanout.split(",")]
    sampler = neighbor_sampler((fs, gs), fanout,
                               device=device if args.sampler.startswith("gpu") else None,
                               fused=args.sampler != "gpu-torch")
    loader = NeighborLoader((fs, gs), num_neighbors=fanout, input_nodes=train, shuffle=True,
                            batch_size=args.batch_size, neighbor_sampler=sampler)
    model = GraphSAGE(args.dim, args.hidden, num_layers=len(fanout), out_channels=args.classes).to(device)
    if ranks.on:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    epochs = []
    trace = [] if args.trace and ranks.rank == 0 and source_name == args.sources.split(",")[0] \
        else None
    for epoch in range(args.epochs):
        model.train()
        if args.cold:  # every epoch starts cold: no page cache, an empty warpstore cache
            if hasattr(features, "clear_cache"):
                features.clear_cache()
            if hasattr(features, "remap"):
                features.remap()
            drop_pages(args.path)
        fs.fetch_seconds = fs.exposed_fetch_seconds = fs.launch_seconds = 0.0
        sampler.sample_seconds = 0.0
        sync()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        threads0 = thread_cpu() if args.profile else None
        t0 = time.perf_counter()
        batches, loss_sum, rows = 0, 0.0, 0
        step_s = 0.0  # the loop body: forward, backward, optimizer, loss.item()
        for batch in (fs.fetch_ahead(loader) if args.fetch_ahead else loader):
            t_step = time.perf_counter()
            loss_sum += train_step(model, opt, batch, device)
            step_s += time.perf_counter() - t_step
            batches += 1
            rows += batch.n_id.numel()
            if trace is not None and epoch == args.epochs - 1:
                trace.append(batch.n_id.cpu().numpy())
            if batches == per_rank_batches:
                break
        sync()
        wall = time.perf_counter() - t0
        threads = thread_cpu_since(threads0) if args.profile else None
        seconds = ranks.total(wall, op="max")  # the slowest rank's
        rows = int(ranks.total(rows))
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        # The fetch time the training step sees: with fetch-ahead, the waits
        # for rows not yet in (plus the calls that start them); else the
        # synchronous fetch itself.
        exposed = fs.fetch_seconds + fs.exposed_fetch_seconds
        share = exposed / seconds
        epochs.append((seconds, share, rows, fs.fetch_seconds))
        if args.profile:
            # Where this rank's epoch went: the loop body, and the rest, the
            # loader's next batch (its sampling, collation, the fetch calls
            # and the waits for rows not yet in).
            where = {"epoch_s": round(wall, 4), "step_s": round(step_s, 4),
                     "loader_s": round(wall - step_s, 4),
                     "sampling_s": round(sampler.sample_seconds, 4),
                     "exposed_fetch_s": round(exposed, 4),
                     "fetch_calls_s": round(fs.fetch_seconds, 4),
                     "process_cpu_s": round(cpu, 3),
                     "thread_cpu_s": threads}
        log(f"  [{source_name}] epoch {epoch}: {seconds:.2f} s, {batches} batches, "
              f"loss {loss_sum / max(batches, 1):.4f}, exposed feature fetch {exposed:.3f} s "
              f"({100 * share:.1f} % of the epoch; waits {fs.exposed_fetch_seconds:.3f} s, "
              f"in gather_async {fs.launch_seconds:.3f} s), "
              f"sampling {sampler.sample_seconds:.2f} s on {sampler.device.type}, "
              f"process CPU {cpu:.2f} s", flush=True)
    if args.profile and epochs:
        where["profiled_epoch"] = profile_epoch(loader, fs, model, opt, device,
                                                args.fetch_ahead, per_rank_batches)
        args.profile_report[source_name] = where
    model.eval()
    if trace is not None:
        write_trace(args, trace, epochs[-1])
    test_loader = NeighborLoader((fs, gs), num_neighbors=fanout, input_nodes=test_share,
                                 batch_size=args.batch_size, neighbor_sampler=sampler)
    correct = 0
    bad_rows = checked = 0
    with torch.no_grad():
        for batch in (fs.fetch_ahead(test_loader) if args.fetch_ahead else test_loader):
            out = model(batch.x, batch.edge_index.to(device))[: batch.batch_size]
            correct += int((out.argmax(-1).cpu() == batch.y[: batch.batch_size].cpu()).sum())
            # Every row the source fetched, against the file's bytes.
            want = torch.from_numpy(reference(batch.n_id.cpu().numpy()))
            bad_rows += int((batch.x.cpu() != want).any(dim=1).sum())
            checked += batch.n_id.numel()
    correct, bad_rows, checked, asked = ranks.total(correct, bad_rows, checked, test_share.numel())
    correct, bad_rows, checked = int(correct), int(bad_rows), int(checked)
    acc = correct / asked
    stats = features.stats() if hasattr(features, "stats") else None
    if stats is not None:  # storage bytes read by every rank's array, all epochs and the test
        stats = dict(stats, bytes_all_ranks=int(ranks.total(stats["bytes"])))
    fs.close()
    log(f"  [{source_name}] checked {checked} fetched rows against the file: {bad_rows} wrong",
          flush=True)
    return acc, epochs, stats, bad_rows


def write_trace(args, batches, epoch):
    """The row ids of the last epoch's batches (rank 0), for bench/scale_sim.py,
    with the epoch's compute (its time less the exposed fetch) a batch."""
    seconds, share, _, _ = epoch
    np.savez(args.trace, rows=np.concatenate(batches).astype(np.int64),
             batch_ends=np.cumsum([len(b) for b in batches]).astype(np.int64),
             row_bytes=args.dim * 4, total_rows=args.nodes,
             compute_s_per_batch=seconds * (1 - share) / max(len(batches), 1))
    print(f"trace of {len(batches)} batches -> {args.trace}", flush=True)


def write_profile(args, report, device):
    """--profile: where each source's last epoch went, as rows of
    docs/RESULTS.md (graphsage.profile.<source>.epoch_s with the whole
    breakdown in its params, and the shares of the epoch), the breakdowns
    also under "sources"."""
    import json

    from warpstore._tools import git_commit

    run = {"nodes": args.nodes, "dim": args.dim, "batches": args.batches,
           "batch_size": args.batch_size, "fanout": args.fanout,
           "torch_threads": torch.get_num_threads()}
    rows = []
    for source, w in args.profile_report.items():
        bad = report[source][2]  # the test pass's rows checked against the file
        name = f"graphsage.profile.{source}"
        rows.append({"name": f"{name}.epoch_s", "value": w["epoch_s"], "unit": "s",
                     "verified": True, "mismatches": bad, "params": dict(run, **w)})
        for part in ("step", "sampling", "exposed_fetch"):
            rows.append({"name": f"{name}.{part}_share", "value": round(w[f"{part}_s"] /
                                                                        w["epoch_s"], 4),
                         "unit": "share of the epoch", "verified": True, "mismatches": bad,
                         "params": run})
    with open(args.profile, "w") as f:
        json.dump({"study": "graphsage_profile",
                   "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                   "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": git_commit(os.path.dirname(os.path.abspath(__file__))),
                   "command": " ".join(["python3"] + sys.argv), "results": rows,
                   "sources": args.profile_report, **run}, f, indent=1)


def write_json(args, report, cache, ranks):
    """Rows name.vs_gpu and name.vs_memmap: the other source's last epoch
    over warpstore's (above 1: warpstore faster), and warpstore's epoch."""
    import json

    if "warpstore" not in report:
        return
    acc, epochs, bad = report["warpstore"]
    ws = epochs[-1][0]
    params = {"nodes": args.nodes, "dim": args.dim, "batches": args.batches,
              "batch_size": args.batch_size, "fanout": args.fanout, "cache_bytes": cache,
              "threads": args.threads or warpstore.settings.threads(), "direct": args.direct,
              "controller": args.controller,
              "controller_picked": getattr(args, "controller_picked", None), "sampler": args.sampler,
              "fetch_ahead": args.fetch_ahead,
              "warpstore_fetch_share": round(epochs[-1][1], 4), "warpstore_accuracy": round(acc, 4),
              "cold": args.cold, "rows_fetched": epochs[-1][2],
              "fetch_rows_per_s": round(epochs[-1][2] / max(epochs[-1][3], 1e-9)),
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
              "torch_threads": torch.get_num_threads(), "gpus": ranks.world, "peer": args.peer}
    st = getattr(args, "warpstore_stats", None)
    if st is not None:
        params.update(warpstore_hit_rate=round(st["hit_rate"], 4),
                      warpstore_storage_bytes=st["bytes_all_ranks"])
    rows = [{"name": f"{args.name}.epoch_s", "value": round(ws, 4), "unit": "s",
             "verified": True, "mismatches": bad, "params": params},
            {"name": ("graphsage.exposed_fetch_share" if args.name == "graphsage.host" else
                      f"{args.name}.exposed_fetch_share"), "value": round(epochs[-1][1], 4),
             "unit": "share of the epoch", "verified": True, "mismatches": bad,
             "params": params}]
    for other, label in (("gpu", "features in GPU memory"), ("memmap", "np.memmap rows copied to the GPU")):
        if other in report:
            o_acc, o_epochs, o_bad = report[other]
            rows.append({"name": f"{args.name}.vs_{other}", "value": round(ws, 4), "unit": "s",
                         "ceiling": round(o_epochs[-1][0], 4), "ceiling_name": label,
                         "ratio": round(o_epochs[-1][0] / ws, 4), "verified": True,
                         "mismatches": bad + o_bad,
                         "params": dict(params, other_accuracy=round(o_acc, 4),
                                        other_fetch_share=round(o_epochs[-1][1], 4))})
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--degree", type=int, default=10)
    p.add_argument("--homophily", type=float, default=0.7)
    p.add_argument("--signal", type=float, default=0.35, help="centroid scale against unit noise")
    p.add_argument("--cache-fraction", type=int, default=8, help="cache = features / N (N >= 4)")
    p.add_argument("--controller", default="auto", choices=["auto", "host", "memory"],
                   help="warpstore controller (default: the library's, auto)")
    p.add_argument("--threads", type=int, default=None,
                   help="host controller service threads (default: the library's)")
    p.add_argument("--direct", default="off", choices=["auto", "on", "off"],
                   help="host controller I/O; off reads through the page cache, as memmap does")
    p.add_argument("--sampler", default="gpu", choices=["gpu", "gpu-torch", "cpu"],
                   help="where neighbors are sampled (gpu: where the graph fits there, in the "
                        "extension's sampler kernels; gpu-torch: there in plain PyTorch ops)")
    p.add_argument("--fetch-ahead", default="on", choices=["on", "off"],
                   help="fetch the next batch's features while this one trains")
    p.add_argument("--cold", action="store_true",
                   help="drop the feature file's pages (and warpstore's cache) before every epoch")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batches", type=int, default=0, help="batches per epoch (0: all)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanout", default="10,5")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--train-fraction", type=float, default=0.1)
    p.add_argument("--test-nodes", type=int, default=20000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", default="/tmp")
    p.add_argument("--reuse", action="store_true", help="keep a feature file of the right size")
    p.add_argument("--json", help="write the comparisons (last epoch) as rows of RESULTS.md here")
    p.add_argument("--name", default="graphsage.host", help="prefix of the rows' names")
    p.add_argument("--sources", default="warpstore,gpu,memmap",
                   help="feature sources to train with: warpstore, gpu (all in GPU memory), memmap")
    p.add_argument("--peer", action="store_true",
                   help="under torchrun: the ranks share their cache lines (PeerArray) instead "
                        "of a private cache each")
    p.add_argument("--profile", help="where each source's last epoch goes (loop body, loader, "
                                     "sampling, fetch; CPU time by thread; one more epoch under "
                                     "the PyTorch profiler) as JSON here")
    p.add_argument("--trace", help="write the last epoch's row ids (rank 0) here, an .npz for "
                                   "bench/scale_sim.py")
    args = p.parse_args(argv)
    args.fetch_ahead = args.fetch_ahead == "on"
    args.profile_report = {}
    if args.cache_fraction < 4:
        p.error("--cache-fraction must be at least 4 (the feature file is >= 4x the cache)")
    ranks = Ranks()
    gpu = torch.cuda.is_available() and warpstore.backend().gpu_build()
    device = torch.device("cuda", ranks.local) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    ranks.start(device)
    if args.peer and "warpstore" not in args.sources.split(","):
        p.error("--peer shares warpstore caches: name warpstore in --sources")
    print = ranks.log  # noqa: A001 (rank 0 speaks for all)
    path = args.path = os.path.join(args.dir, f"graphsage-{args.nodes}x{args.dim}.f32")
    t0 = time.perf_counter()
    if ranks.rank != 0:  # rank 0 writes the feature file; the others read it
        ranks.barrier()
        args.reuse = True
    y, edge_index, train, test = generate(args, path)
    if ranks.rank == 0:
        ranks.barrier()
    file_bytes = args.nodes * args.dim * 4
    cache = max(file_bytes // args.cache_fraction // (1 << 20), 1) << 20
    print(f"graph: {args.nodes} nodes, {edge_index.shape[1]} edges, {args.classes} classes, "
          f"features {human_bytes(file_bytes)} ({path}), warpstore cache {human_bytes(cache)} "
          f"(1/{file_bytes // cache} of the file), device {device}, made in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    print(f"training: {args.epochs} epochs of {args.batches or 'all'} batches of {args.batch_size} "
          f"seeds, fanout {args.fanout}, seed {args.seed}", flush=True)
    shape = (args.nodes, args.dim)
    def reference(ids):
        """The file's rows, through a mapping made and dropped per call (one
        kept open would pin the pages it touched through later drops)."""
        return np.array(np.memmap(path, dtype=np.float32, mode="r", shape=shape)[ids])
    report = {}
    for source in args.sources.split(","):
        if args.cold:
            drop_pages(path)  # direct="auto" sees a cold file, as a user's would be
        if source == "warpstore":
            feats = warpstore.open(path, "float32", shape, cache=cache, controller=args.controller,
                                   threads=args.threads, direct=args.direct)
            args.controller_picked = feats.stats()["controller"]  # what auto chose
            if args.peer:
                from warpstore.distributed import PeerArray

                feats = PeerArray(feats)
        elif source == "gpu":
            feats = torch.from_numpy(np.fromfile(path, dtype=np.float32).reshape(shape)).to(device)
        elif source == "memmap":
            feats = MemmapRows(path, shape, device)
        else:
            p.error(f"unknown source {source}")
        acc, epochs, stats, bad = run(source, feats, y, edge_index, train, test, args, device,
                                      reference, ranks)
        report[source] = (acc, epochs, bad)
        if stats is not None:
            args.warpstore_stats = stats
        extra = (f", cache hit rate {100 * stats['hit_rate']:.1f} %" if stats else "")
        print(f"{source}: test accuracy {acc:.4f}{extra}", flush=True)
        del feats
    print("\nsource     test acc  epoch s (last)  fetch share (last)")
    for source, (acc, epochs, _) in report.items():
        print(f"{source:<10} {acc:.4f}    {epochs[-1][0]:<14.2f}  {100 * epochs[-1][1]:.1f} %")
    if args.json:
        if ranks.rank == 0:
            write_json(args, report, cache, ranks)
    if args.profile and ranks.rank == 0:
        write_profile(args, report, device)
        for source, w in args.profile_report.items():
            print(f"[{source}] last epoch {w['epoch_s']:.3f} s: loop body {w['step_s']:.3f} s, "
                  f"loader {w['loader_s']:.3f} s (sampling {w['sampling_s']:.3f}, exposed fetch "
                  f"{w['exposed_fetch_s']:.3f}); CPU by thread: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in list(w["thread_cpu_s"].items())[:6]),
                  flush=True)
    if "warpstore" in report and "gpu" in report:
        diff = abs(report["warpstore"][0] - report["gpu"][0])
        print(f"accuracy difference warpstore vs GPU memory: {diff:.4f} "
              f"({'same' if diff <= 0.01 else 'DIFFERENT'} within 0.01)")
        return finish(ranks, 0 if diff <= 0.01 else 1)
    return finish(ranks, 0)


def finish(ranks, code):
    if ranks.on:
        dist.barrier()
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
