#!/usr/bin/env python3
"""Past one node, in simulation: N nodes of G GPUs replay a recorded trace of
row gathers through a model of warpstore's cache and share one storage
service. Prints, for each N, per-GPU and aggregate batches/s, the hit rate,
the storage traffic and the resource that bounds the step, and the N where
scaling efficiency falls below 80 %. Pure NumPy; no GPU, no warpstore.
docs/SCALE.md explains the design this models and every default.

    python bench/scale_sim.py --synthetic zipf                 # no trace needed
    python bench/scale_sim.py --trace graphsage.npz --json out.json
    python bench/scale_sim.py --synthetic uniform --write-trace t.npz

Trace (`.npz`): `rows` int64, the row ids gathered, in order, all batches
concatenated; `batch_ends` int64, the cumulative end of each batch in `rows`;
scalars `row_bytes`, `total_rows`; optional `compute_s_per_batch` (measured
training compute of a batch). `apps/graphsage/train.py --trace FILE` is to
write exactly this.

The model, exactly:

- Rows to lines. Row r covers bytes [r*row_bytes, (r+1)*row_bytes) of the
  file; it needs every line of --line-bytes those bytes touch. A batch's
  lines are deduplicated (a gather coalesces repeats: the first is the one
  access, the others wait for it) and, within the batch, taken in the order
  of their cache set (the order among one batch's lines is not modeled).
- Which batch each GPU runs. The trace's B batches are replayed in passes.
  Pass e has a seeded permutation P_e of the batches (seed, e); GPU g of a
  node runs, at step t of pass e, batch P_e[(t + o_g) mod B] with
  o_g = floor(g*B/G): every GPU runs every batch once a pass, the GPUs of a
  node spread evenly around the same shuffled ring, so they never request the
  same batch at the same step (when G <= B). The first --warmup passes fill
  the caches and are not measured.
- The cache of a GPU: C bytes of L-byte lines, --ways lines a set, exact LRU
  in each set; a line's set is murmur3 fmix64 of the line, multiply-shifted
  onto the sets (cache.cuh's set_of; the key's source-id bits left out).
- Ownership. `private`: each GPU caches what it reads. `shared`: each line
  belongs to one GPU of its node (warpstore.distributed.owner_of_lines's hash
  of the line), which caches it for all; the owner is asked for the row ids
  and sends the rows back (all_to_all over NVLink): the node caches each line
  once in G*C bytes. The node's G streams are merged step by step (GPU 0's
  batch, then GPU 1's, ...), so a line two GPUs want in one step is fetched
  once. Across nodes nothing is shared: each node fetches its own misses.
- One representative node is simulated; every node of a run of N is that
  node's measured steps rotated by a seeded offset r_n (r_0 = 0; node n runs
  at step t what the representative ran at step (t + r_n) mod T). Nodes are
  statistically alike (each GPU a rotation of the same shuffled passes), so
  the hit rate does not depend on N; the rotation keeps the nodes' heavy steps
  from coinciding. With --warmup 0 (cold caches) there is no rotation: every
  node starts cold at the same step, as a job does.
- Set sampling (--set-sample K; 'auto' doubles K while the simulated
  accesses exceed 4 M and at least 1024 sets of the node stay): only lines
  whose set (in the private cache) is a multiple of K are simulated; each
  sampled set is exact, and the misses are scaled by the ratio of all
  accesses to sampled ones. K = 1 is exact.
- Defaults: a GPU's cache is 1/32 of the bytes of distinct lines the trace
  touches (--cache-frac; --cache-bytes to set it), compute a batch is the
  trace's compute_s_per_batch, else 175 ns a row (GraphSAGE, below); the
  capacities are in STORAGE_PRESETS and the *_SOURCE texts below, each
  written into the JSON's params with its source.
- A replayed trace stands for a steady state only if a cache cannot keep the
  rows the trace reads once until they come back (every B/G steps at a
  node): the script says so when one cache holds half the trace's footprint
  or more. Record a whole epoch, or compare configurations, not absolutes.
- Time of a step (training is synchronous: a step ends when its slowest GPU
  ends): max(compute, fetch), fetch = the largest of
    storage IOPS       all nodes' line reads that step / --storage-iops
    storage bandwidth  all nodes' line bytes that step / --storage-bw
    network            the busiest node's line bytes / --network-bw
    NVLink             the busiest GPU's all_to_all bytes (row ids out, rows
                       back; the larger direction) / --nvlink-bw
    node engine        the busiest node's line reads / --node-iops (off by
                       default)
  A fluid model: the service is shared fairly, so when a step's demand
  exceeds a capacity every GPU's fetch stretches in proportion, and the step
  takes demand / capacity. The bottleneck of a row is the term that set the
  most of its time.
- Efficiency at N = per-GPU batches/s at N over per-GPU batches/s at the
  first N of --nodes (1 by default); saturation_nodes is the first N where it
  falls below --threshold (0.8), null if none does.
"""
import argparse
import dataclasses
import datetime
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

# ---------------------------------------------------------------------------
# Defaults and where they come from. Every one goes into the JSON's params.

# Training compute per fetched row, from GraphSAGE with the features already
# in GPU memory: 0.21 s for the 30-batch epoch (training.json, the ceiling of
# graphsage.host.vs_gpu, H100, 84ff350), whose batches fetch about 1,198,139
# rows (training.json graphsage.host.cpu_sampler.epoch_s params.rows_fetched:
# the CPU sampler's run; batches of the same shape): 175 ns a row, 7.0 ms a
# 40 K-row batch. A trace
# without compute_s_per_batch gets this rate times its mean rows a batch.
COMPUTE_S_PER_ROW = 0.21 / 1_198_139
COMPUTE_SOURCE = ("GraphSAGE features in GPU memory: 0.21 s for 30 batches (training.json "
                  "graphsage.host.vs_gpu ceiling, H100) over 1,198,139 rows fetched "
                  "(graphsage.host.cpu_sampler params.rows_fetched): 175 ns a row times the "
                  "trace's mean rows a batch")

STORAGE_PRESETS = {
    # Assumed: a shared NVMe-oF (or parallel-filesystem) service. Not measured.
    "nvmeof": dict(
        iops=8e6, bw=50e9,
        source=("ASSUMPTION, not measured: 8 Gen4 data-center NVMe SSDs at about 1 M random "
                "4 KiB reads/s each (vendor spec sheets), behind 400 Gb/s of target NICs "
                "(50 GB/s)")),
    # Measured: the GPU machines' virtio disk (BENCHMARKS.md, Misses from disk).
    "virtio": dict(
        iops=65672.0, bw=1.35e9,
        source=("MEASURED on the H100/H200 machines' virtio disk: 65,672 random 4 KiB O_DIRECT "
                "reads/s (training.json device.random4k.direct, bench/device_rate.py) and "
                "1.3-1.4 GB/s sequential O_DIRECT (BENCHMARKS.md, Misses from disk)")),
}
DEFAULT_NETWORK_BW = 25e9
NETWORK_SOURCE = ("ASSUMPTION: one 200 Gb/s NIC's worth (25 GB/s) of storage traffic per node; "
                  "not measured")
DEFAULT_NVLINK_BW = 200e9
NVLINK_SOURCE = ("ASSUMPTION: 200 GB/s per GPU per direction for NCCL all_to_all, under half of "
                 "NVLink 4's 450 GB/s per direction (H100 SXM spec); not measured")
NODE_IOPS_SOURCE = ("off unless --node-iops: for reference, the host controller read 2.93 M "
                    "lines/s with 4 service threads and 7.29 M with 14 from the page cache "
                    "(core.json array.host.pagecache.random4k.cold.service4/.service14, H200)")

RESOURCES = ("compute", "storage IOPS", "storage bandwidth", "network", "NVLink", "node engine")


# ---------------------------------------------------------------------------
# Hashes (the library's, so set placement and ownership match it)

def fmix64(x):
    """MurmurHash3's finalizer (include/warpstore/detail/hash.cuh), on uint64."""
    k = np.asarray(x).astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xFF51AFD7ED558CCD)
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xC4CEB9FE1A85EC53)
        k ^= k >> np.uint64(33)
    return k


def set_index(lines, num_sets):
    """The set of each line in a cache of num_sets sets: fmix64, low 32 bits,
    multiply-shift onto [0, num_sets) (cache.cuh set_of). Doubling the sets
    splits each set in two, so bigger caches nest."""
    h = fmix64(lines) & np.uint64(0xFFFFFFFF)
    return ((h * np.uint64(num_sets)) >> np.uint64(32)).astype(np.int64)


def owner_of_lines(lines, world):
    """warpstore.distributed.owner_of_lines: the rank owning each line."""
    lines = np.asarray(lines, dtype=np.int64)
    if world == 1:
        return np.zeros(lines.shape, dtype=np.int64)
    with np.errstate(over="ignore"):
        h = (lines * np.int64(0x9E3779B1)) & np.int64(0xFFFFFFFF)
    return ((h >> 13) ^ h) % world


# ---------------------------------------------------------------------------
# The cache: exact LRU in each set, all sets at once

def lru_hits(sets, keys, ways):
    """Whether each access of a stream hits in a set-associative LRU cache.

    sets[i], keys[i]: the set and line of access i, in stream order; the cache
    starts empty. Exact per set: the accesses are grouped by set (order kept
    within a set) and processed in rounds, round k taking the k-th access of
    every set at once, so the cost is (accesses per set) rounds of vectorized
    work over the sets."""
    sets = np.asarray(sets, dtype=np.int64)
    keys = np.asarray(keys, dtype=np.int64)
    n = len(keys)
    hits = np.zeros(n, dtype=bool)
    if n == 0:
        return hits
    if sets.min() < 0:
        raise ValueError("set ids must be non-negative")
    top = int(sets.max()) + 1
    if top <= max(1 << 26, 4 * n):  # number the sets in use by a table, not a sort
        present = np.zeros(top, dtype=bool)
        present[sets] = True
        compact = (np.cumsum(present) - 1)[sets]
        used = int(present.sum())
    else:
        uniq, compact = np.unique(sets, return_inverse=True)
        compact, used = compact.reshape(-1), len(uniq)
    # Stable: a set's accesses stay in stream order. Streams made of runs
    # already sorted by set (simulate_node sorts each batch so) sort fast.
    order = np.argsort(compact, kind="stable")
    cs = compact[order]
    counts = np.bincount(cs, minlength=used)
    starts = np.cumsum(counts) - counts
    rank = np.arange(n, dtype=np.int64) - starts[cs]
    top_rank = int(rank.max())
    narrow = np.int16 if top_rank < (1 << 15) else np.int32 if top_rank < (1 << 31) else np.int64
    by_round = np.argsort(rank.astype(narrow), kind="stable")  # round-major (radix sort when narrow)
    pos = order[by_round]
    bounds = np.searchsorted(rank[by_round], np.arange(top_rank + 2))
    tags = np.full((used, ways), -1, dtype=np.int64)
    stamp = np.full((used, ways), -1, dtype=np.int64)  # last use; -1 = empty
    for k in range(len(bounds) - 1):
        p = pos[bounds[k]:bounds[k + 1]]
        s = compact[p]
        key = keys[p]
        eq = tags[s] == key[:, None]
        hit = eq.any(axis=1)
        way = np.where(hit, eq.argmax(axis=1), stamp[s].argmin(axis=1))
        tags[s, way] = key
        stamp[s, way] = k
        hits[p] = hit
    return hits


def lru_hits_reference(sets, keys, ways):
    """The same cache, one access at a time (for tests)."""
    state = {}
    out = []
    for s, k in zip(np.asarray(sets).tolist(), np.asarray(keys).tolist()):
        lst = state.setdefault(s, [])  # most recent last
        if k in lst:
            lst.remove(k)
            lst.append(k)
            out.append(True)
        else:
            if len(lst) == ways:
                lst.pop(0)
            lst.append(k)
            out.append(False)
    return np.array(out, dtype=bool)


# ---------------------------------------------------------------------------
# Traces

def synthetic_trace(kind="zipf", total_rows=8_000_000, batches=1000, batch_rows=1000,
                    row_bytes=512, zipf_s=0.99, seed=0):
    """A trace without a recording: `batches` batches of `batch_rows` row ids
    each (with repeats, as a sampler's are before deduplication). uniform:
    ids uniform over the rows. zipf: rank k (1..total_rows) drawn with
    probability proportional to k**-zipf_s, and ranks mapped to row ids by a
    seeded permutation, so popular rows are scattered over the file."""
    rng = np.random.default_rng([seed, 1])
    n = batches * batch_rows
    if kind == "uniform":
        rows = rng.integers(0, total_rows, size=n, dtype=np.int64)
    elif kind == "zipf":
        w = np.arange(1, total_rows + 1, dtype=np.float64) ** -float(zipf_s)
        cdf = np.cumsum(w)
        cdf /= cdf[-1]
        ranks = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), total_rows - 1)
        rows = rng.permutation(total_rows).astype(np.int64)[ranks]
    else:
        raise ValueError(f"synthetic trace kind must be zipf or uniform, got {kind!r}")
    return dict(rows=rows, batch_ends=np.arange(1, batches + 1, dtype=np.int64) * batch_rows,
                row_bytes=int(row_bytes), total_rows=int(total_rows),
                name=f"synthetic_{kind}",
                synthetic=dict(kind=kind, total_rows=int(total_rows), batches=int(batches),
                               batch_rows=int(batch_rows), row_bytes=int(row_bytes),
                               zipf_s=float(zipf_s) if kind == "zipf" else None, seed=int(seed)))


def save_trace(path, trace):
    extra = {}
    if trace.get("compute_s_per_batch") is not None:
        extra["compute_s_per_batch"] = np.float64(trace["compute_s_per_batch"])
    np.savez(path, rows=np.asarray(trace["rows"], dtype=np.int64),
             batch_ends=np.asarray(trace["batch_ends"], dtype=np.int64),
             row_bytes=np.int64(trace["row_bytes"]), total_rows=np.int64(trace["total_rows"]),
             **extra)


def load_trace(path):
    with np.load(path) as z:
        missing = {"rows", "batch_ends", "row_bytes", "total_rows"} - set(z.files)
        if missing:
            raise ValueError(f"{path}: trace lacks {sorted(missing)}")
        t = dict(rows=z["rows"].astype(np.int64), batch_ends=z["batch_ends"].astype(np.int64),
                 row_bytes=int(z["row_bytes"]), total_rows=int(z["total_rows"]))
        if "compute_s_per_batch" in z.files:
            t["compute_s_per_batch"] = float(z["compute_s_per_batch"])
    stem = os.path.splitext(os.path.basename(path))[0]
    t["name"] = re.sub(r"[^A-Za-z0-9_-]", "_", stem) or "trace"
    check_trace(t, path)
    return t


def check_trace(t, where="trace"):
    rows, ends = t["rows"], t["batch_ends"]
    if t["row_bytes"] <= 0 or t["total_rows"] <= 0:
        raise ValueError(f"{where}: row_bytes and total_rows must be positive")
    if len(ends) == 0 or ends[-1] != len(rows) or np.any(np.diff(ends) < 0) or ends[0] < 0:
        raise ValueError(f"{where}: batch_ends must be non-decreasing and end at len(rows) "
                         f"({len(rows)})")
    if len(rows) and (rows.min() < 0 or rows.max() >= t["total_rows"]):
        raise ValueError(f"{where}: row ids must lie in [0, total_rows={t['total_rows']})")


# ---------------------------------------------------------------------------
# The simulation

@dataclasses.dataclass
class Config:
    gpus_per_node: int = 8
    ownership: str = "shared"          # shared | private
    line_bytes: int = 0                # 0: the row size rounded up to a power of two, >= 512
    cache_bytes: int = 0               # per GPU; 0: cache_frac of the trace's footprint
    cache_frac: float = 1 / 32
    ways: int = 16
    passes: int = 2
    warmup: int = 1
    seed: int = 0
    set_sample: int = 1                # K; 0 = auto
    compute_s: float = None            # None: the trace's, else COMPUTE_S_PER_ROW a row
    storage_iops: float = STORAGE_PRESETS["nvmeof"]["iops"]
    storage_bw: float = STORAGE_PRESETS["nvmeof"]["bw"]
    network_bw: float = DEFAULT_NETWORK_BW
    nvlink_bw: float = DEFAULT_NVLINK_BW
    node_iops: float = math.inf
    sample_budget: int = 4_000_000


def line_size_for(row_bytes, line_bytes):
    if line_bytes:
        return int(line_bytes)
    return max(512, 1 << (int(row_bytes) - 1).bit_length())


def prepare(trace, line_bytes):
    """Each batch's distinct lines (CSR: lines, ptr) and distinct rows."""
    rows, ends = trace["rows"], trace["batch_ends"]
    rb, L = int(trace["row_bytes"]), int(line_bytes)
    B = len(ends)
    sizes = np.diff(np.concatenate([[0], ends]))
    bidx = np.repeat(np.arange(B, dtype=np.int64), sizes)
    first = rows * rb // L
    last = ((rows + 1) * rb - 1) // L
    span = last - first + 1
    if span.max(initial=1) > 1:
        cum = np.cumsum(span) - span
        lines = np.repeat(first, span) + (np.arange(int(span.sum())) - np.repeat(cum, span))
        lbidx = np.repeat(bidx, span)
    else:
        lines, lbidx = first, bidx
    if lines.size and lines.max() >= (1 << 40):
        raise ValueError("file too large for the simulation's keys (2^40 lines)")
    u = np.unique((lbidx << 40) | lines)
    ub, ul = u >> 40, u & ((1 << 40) - 1)
    ptr = np.searchsorted(ub, np.arange(B + 1))
    ur = np.unique((bidx << 40) | rows)
    rbatch, urows = ur >> 40, ur & ((1 << 40) - 1)
    return dict(lines=ul, ptr=ptr, urows=urows, rbatch=rbatch, B=B,
                footprint_lines=int(len(np.unique(ul))), row_bytes=rb, line_bytes=L)


def _expand(seq, ptr):
    """Indices into the CSR arrays for the batches of seq in order, and the
    position in seq of each."""
    lens = ptr[seq + 1] - ptr[seq]
    total = int(lens.sum())
    offs = np.cumsum(lens) - lens
    idx = np.repeat(ptr[seq] - offs, lens) + np.arange(total, dtype=np.int64)
    which = np.repeat(np.arange(len(seq), dtype=np.int64), lens)
    return idx, which


def batch_orders(B, G, passes, seed):
    """seq[g, step]: the batch GPU g runs at each step (see the module text)."""
    offsets = (np.arange(G, dtype=np.int64) * B) // G
    t = np.arange(B, dtype=np.int64)
    seq = np.empty((G, passes * B), dtype=np.int64)
    for e in range(passes):
        perm = np.random.default_rng([seed, 2, e]).permutation(B)
        seq[:, e * B:(e + 1) * B] = perm[(t[None, :] + offsets[:, None]) % B]
    return seq, offsets


def simulate_node(trace, cfg, prep=None):
    """One representative node: per measured step, the node's storage line
    reads (estimated when set-sampled), its line requests, and the busiest
    GPU's NVLink bytes."""
    G = int(cfg.gpus_per_node)
    L = line_size_for(trace["row_bytes"], cfg.line_bytes)
    if prep is None or prep["line_bytes"] != L:
        prep = prepare(trace, L)
    B = prep["B"]
    if cfg.passes <= cfg.warmup:
        raise ValueError("passes must exceed warmup: nothing would be measured")
    cache_bytes = int(cfg.cache_bytes) or int(cfg.cache_frac * prep["footprint_lines"] * L)
    sets = max(1, cache_bytes // (L * cfg.ways))
    cache_bytes = sets * cfg.ways * L  # what the model holds
    pset = set_index(prep["lines"], sets)  # each trace line's set in a private cache
    shared = cfg.ownership == "shared"
    if cfg.ownership not in ("shared", "private"):
        raise ValueError(f"ownership must be shared or private, got {cfg.ownership!r}")
    owner = owner_of_lines(prep["lines"], G) if shared else np.zeros(len(pset), np.int64)
    req_b = np.diff(prep["ptr"])  # distinct lines a batch asks for
    accesses = int(req_b.sum()) * G * cfg.passes
    K = int(cfg.set_sample)
    if K == 0:  # auto: keep the simulated accesses near the budget
        K = 1
        while accesses / K > cfg.sample_budget and G * sets // (2 * K) >= 1024:
            K *= 2
    if K > 1:
        keep = pset % K == 0
        kidx = np.nonzero(keep)[0]
        kept_counts = np.bincount(np.repeat(np.arange(B), req_b)[keep], minlength=B)
        kptr = np.concatenate([[0], np.cumsum(kept_counts)])
        lines_k, pset_k, owner_k = prep["lines"][kidx], pset[kidx], owner[kidx]
        scale = req_b.sum() / max(1, kept_counts.sum())
    else:
        kptr, lines_k, pset_k, owner_k, scale = prep["ptr"], prep["lines"], pset, owner, 1.0

    # Within a batch, lines go in the order of their set: the order among one
    # batch's distinct lines is not modeled, and sorted runs sort fast.
    key_k = owner_k * sets + pset_k
    kb = np.repeat(np.arange(B, dtype=np.int64), np.diff(kptr))
    within = np.lexsort((key_k, kb))
    lines_k, pset_k, owner_k, key_k = lines_k[within], pset_k[within], owner_k[within], key_k[within]

    seq, offsets = batch_orders(B, G, cfg.passes, cfg.seed)
    steps = cfg.passes * B
    first_measured = cfg.warmup * B
    misses = np.zeros(steps, dtype=np.float64)
    if shared:
        merged = seq.T.reshape(-1)  # step-major: GPU 0's batch, GPU 1's, ...
        idx, which = _expand(merged, kptr)
        h = lru_hits(key_k[idx], lines_k[idx], cfg.ways)
        misses += np.bincount(which[~h] // G, minlength=steps)
    else:  # each GPU its own cache: GPU g's sets numbered g*sets.., one call for all
        idx, which = _expand(seq.reshape(-1), kptr)
        gpu = which // steps
        h = lru_hits(gpu * sets + pset_k[idx], lines_k[idx], cfg.ways)
        misses += np.bincount(which[~h] % steps, minlength=steps)
    misses *= scale
    requests = req_b[seq].sum(axis=0).astype(np.float64)

    # NVLink: GPU g sends 8-byte row ids for its rows other GPUs own and gets
    # those rows back; as owner it receives others' ids and sends their rows.
    nvl = np.zeros(steps, dtype=np.float64)
    if shared and G > 1:
        rb = prep["row_bytes"]
        rown = owner_of_lines(prep["urows"] * rb // L, G)
        own_cnt = np.bincount(prep["rbatch"] * G + rown, minlength=B * G).reshape(B, G)
        total = own_cnt.sum(axis=1)
        mine = own_cnt[seq, np.arange(G)[:, None]]            # [G, steps] rows I own of my batch
        foreign = total[seq] - mine                           # rows of my batch others own
        owned_all = own_cnt[seq.T].sum(axis=1).T              # [G, steps]: rows owned by g, all batches
        served = owned_all - mine                             # rows I own that others asked
        out_b = 8 * foreign + rb * served
        in_b = rb * foreign + 8 * served
        nvl = np.maximum(out_b, in_b).max(axis=0).astype(np.float64)

    m = slice(first_measured, steps)
    return dict(misses=misses[m], requests=requests[m], nvlink=nvl[m], line_bytes=L,
                cache_bytes_per_gpu=int(cache_bytes), sets=int(sets), set_sample=K,
                footprint_lines=prep["footprint_lines"], gpu_offsets=offsets.tolist(),
                hit_rate=float(1 - misses[m].sum() / max(1.0, requests[m].sum())),
                steps=steps - first_measured, prep=prep)


def node_rotations(n_max, steps, seed, warmup):
    if warmup == 0:
        return np.zeros(n_max, dtype=np.int64)
    r = np.random.default_rng([seed, 3]).integers(0, steps, size=n_max)
    r[0] = 0
    return r


def sweep(node, cfg, nodes, compute_s):
    """The table over N: one row per N (see the module text for the model)."""
    T, L, G = node["steps"], node["line_bytes"], int(cfg.gpus_per_node)
    rot = node_rotations(max(nodes), T, cfg.seed, cfg.warmup)
    inv = lambda c: 0.0 if c == math.inf else 1.0 / c  # noqa: E731
    rows = []
    base = None
    for N in nodes:
        ix = (np.arange(T)[None, :] + rot[:N, None]) % T
        ops = node["misses"][ix]                 # [N, T] line reads of each node
        d_ops = ops.sum(axis=0)
        busiest = ops.max(axis=0)
        times = np.vstack([
            np.full(T, compute_s),
            d_ops * inv(cfg.storage_iops),
            d_ops * L * inv(cfg.storage_bw),
            busiest * L * inv(cfg.network_bw),
            node["nvlink"][ix].max(axis=0) * inv(cfg.nvlink_bw),
            busiest * inv(cfg.node_iops),
        ])
        step_t = times.max(axis=0)
        arg = times.argmax(axis=0)
        total = float(step_t.sum())
        by_res = np.bincount(arg, weights=step_t, minlength=len(RESOURCES))
        per_gpu = T / total if total > 0 else math.inf
        if base is None:
            base = (N, per_gpu)
        eff = per_gpu / base[1] if base[1] not in (0, math.inf) else 1.0
        bytes_total = float(d_ops.sum() * L)
        rows.append(dict(
            nodes=N, gpus=N * G, per_gpu=per_gpu, aggregate=per_gpu * N * G, efficiency=eff,
            gpu_busy=(compute_s * T / total) if total > 0 else 1.0,
            hit_rate=node["hit_rate"],
            storage_Bps=bytes_total / total if total > 0 else math.inf,
            storage_iops=float(d_ops.sum()) / total if total > 0 else math.inf,
            storage_Bps_needed=(bytes_total / T / compute_s) if compute_s > 0 else None,
            bottleneck=RESOURCES[int(by_res.argmax())],
            bottleneck_share=float(by_res.max() / total) if total > 0 else 1.0,
        ))
    return rows


def saturation(rows, threshold):
    for r in rows:
        if r["efficiency"] < threshold:
            return r["nodes"]
    return None


def resolve_compute(trace, cfg):
    if cfg.compute_s is not None:
        return float(cfg.compute_s), "--compute-s"
    if trace.get("compute_s_per_batch") is not None:
        return float(trace["compute_s_per_batch"]), "the trace's compute_s_per_batch"
    per_batch = len(trace["rows"]) / max(1, len(trace["batch_ends"]))
    return COMPUTE_S_PER_ROW * per_batch, COMPUTE_SOURCE


def run(trace, cfg, nodes=(1, 2, 4, 8, 16, 32, 64), threshold=0.8, prep=None):
    """Simulate one configuration; returns the node model, the table, the
    saturation N and the compute time used."""
    compute_s, compute_src = resolve_compute(trace, cfg)
    node = simulate_node(trace, cfg, prep)
    rows = sweep(node, cfg, list(nodes), compute_s)
    return dict(node=node, rows=rows, saturation_nodes=saturation(rows, threshold),
                compute_s=compute_s, compute_source=compute_src)


# ---------------------------------------------------------------------------
# Command line

_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def number(text):
    """'8M' = 8e6, '50G' = 50e9, '1GiB' = 2**30, 'inf' or '0' = unlimited
    where that makes sense (the caller decides)."""
    t = str(text).strip().lower()
    if t in ("inf", "none", "off"):
        return math.inf
    m = re.fullmatch(r"([0-9.e+-]+)\s*([kmgt]i?)?(b|b/s|/s)?", t)
    if not m:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def capacity(text):
    v = number(text)
    return math.inf if v == 0 else v


def fmt_rate(v, unit):
    if v is None:
        return "-"
    if v == math.inf:
        return "inf"
    for div, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            return f"{v / div:.3g} {p}{unit}"
    return f"{v:.3g} {unit}"


def print_table(title, res, cfg, threshold, out=None):
    out = out or sys.stdout
    node = res["node"]
    print(f"\n{title}", file=out)
    print(f"  hit rate {node['hit_rate']:.3f}, line {node['line_bytes']} B, cache "
          f"{fmt_rate(node['cache_bytes_per_gpu'], 'B')} a GPU, {cfg.gpus_per_node} GPUs a node, "
          f"{node['steps']} measured steps, set sample 1/{node['set_sample']}", file=out)
    hdr = (f"{'N':>4} {'GPUs':>5} {'batch/s/GPU':>11} {'aggregate':>10} {'eff':>5} "
           f"{'busy':>5} {'hit':>5} {'storage':>10} {'IOPS':>9} {'needed':>10}  bottleneck")
    print(hdr, file=out)
    for r in res["rows"]:
        print(f"{r['nodes']:>4} {r['gpus']:>5} {r['per_gpu']:>11.1f} {r['aggregate']:>10.1f} "
              f"{r['efficiency']:>5.2f} {r['gpu_busy']:>5.2f} {r['hit_rate']:>5.3f} "
              f"{fmt_rate(r['storage_Bps'], 'B/s'):>10} "
              f"{fmt_rate(r['storage_iops'], ''):>9} {fmt_rate(r['storage_Bps_needed'], 'B/s'):>10}  "
              f"{r['bottleneck']} ({r['bottleneck_share']:.0%})", file=out)
    sat = res["saturation_nodes"]
    print(f"  efficiency below {threshold:.0%} from N = {sat}" if sat is not None else
          f"  efficiency stays at or above {threshold:.0%} up to N = {res['rows'][-1]['nodes']}",
          file=out)


def params_of(trace, cfg, res, args, storage_src):
    node = res["node"]
    t_info = dict(name=trace["name"], batches=int(len(trace["batch_ends"])),
                  rows=int(len(trace["rows"])), row_bytes=int(trace["row_bytes"]),
                  total_rows=int(trace["total_rows"]),
                  footprint_lines=node["footprint_lines"])
    if trace.get("synthetic"):
        t_info["synthetic"] = trace["synthetic"]
    cap = lambda v: None if v == math.inf else v  # noqa: E731
    return dict(
        trace=t_info, ownership=cfg.ownership, gpus_per_node=cfg.gpus_per_node,
        line_bytes=node["line_bytes"], cache_bytes_per_gpu=node["cache_bytes_per_gpu"],
        cache_sizing=("--cache-bytes" if cfg.cache_bytes else
                      f"{cfg.cache_frac} of the trace's distinct-line footprint"),
        ways=cfg.ways, replacement="exact LRU per set (the library uses clock)",
        passes=cfg.passes, warmup_passes=cfg.warmup, measured_steps=node["steps"],
        seed=cfg.seed, set_sample=node["set_sample"],
        batch_order=("pass e: seeded permutation P_e; GPU g runs P_e[(t + o_g) mod B], "
                     f"o_g = floor(g*B/G) = {node['gpu_offsets']}"),
        node_model=("one representative node; node n replays its measured steps rotated by a "
                    "seeded offset (none when warmup is 0)"),
        compute_s_per_batch=res["compute_s"], compute_source=res["compute_source"],
        storage_iops=cap(cfg.storage_iops), storage_bw=cap(cfg.storage_bw),
        storage_source=storage_src,
        network_bw_per_node=cap(cfg.network_bw), network_source=NETWORK_SOURCE,
        nvlink_bw_per_gpu=cap(cfg.nvlink_bw), nvlink_source=NVLINK_SOURCE,
        node_iops=cap(cfg.node_iops), node_iops_source=NODE_IOPS_SOURCE,
        time_model="step = max(compute, fetch); fetch = max over resources of demand/capacity "
                   "(fluid, fair share); synchronous steps",
        threshold=args.threshold,
        hit_rate=node["hit_rate"],
    )


def result_rows(trace, cfg, res, args, storage_src):
    prefix = f"scale.sim.{trace['name']}" + ("" if cfg.ownership == "shared" else f".{cfg.ownership}")
    params = params_of(trace, cfg, res, args, storage_src)
    table = [{k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in r.items()}
             for r in res["rows"]]
    out = [dict(name=f"{prefix}.saturation_nodes", value=res["saturation_nodes"], unit="nodes",
                ceiling=None, ceiling_name=None, ratio=None, verified=False, mismatches=0,
                params=dict(params, table=table,
                            note=("simulated, not measured; null: efficiency stays at or above "
                                  "the threshold over the N simulated")))]
    for r in res["rows"]:
        ideal = r["gpus"] / res["compute_s"] if res["compute_s"] > 0 else None
        out.append(dict(
            name=f"{prefix}.n{r['nodes']}.aggregate", value=r["aggregate"], unit="batches/s",
            ceiling=ideal, ceiling_name="compute-bound aggregate (no fetch cost), simulated",
            ratio=(r["aggregate"] / ideal) if ideal else None, verified=False, mismatches=0,
            params=dict(nodes=r["nodes"], gpus=r["gpus"], per_gpu=r["per_gpu"],
                        efficiency=r["efficiency"], gpu_busy=r["gpu_busy"],
                        hit_rate=r["hit_rate"],
                        storage_Bps=r["storage_Bps"], storage_iops=r["storage_iops"],
                        storage_Bps_needed=r["storage_Bps_needed"],
                        bottleneck=r["bottleneck"], bottleneck_share=r["bottleneck_share"],
                        assumptions=f"see {prefix}.saturation_nodes")))
    return out


def write_json(path, rows):
    """Merge rows into a results file (docs/RESULTS.md), replacing same names."""
    doc = None
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    commit = os.environ.get("WARPSTORE_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except OSError:
            commit = ""
    command = "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    if doc is None:
        doc = dict(study="scale", device="simulation (NumPy on the CPU; no device)",
                   date=datetime.date.today().isoformat(), commit=commit or None,
                   command=command, results=[])
    else:
        doc.update(date=datetime.date.today().isoformat(), commit=commit or doc.get("commit"))
        if command not in doc.get("command", ""):
            doc["command"] = " && ".join(c for c in (doc.get("command"), command) if c)
    names = {r["name"] for r in rows}
    doc["results"] = [r for r in doc.get("results", []) if r["name"] not in names] + rows
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Scale-out simulation of warpstore's cache and storage over N nodes "
                    "(docs/SCALE.md; the model is in this file's docstring).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help="a recorded trace (.npz: rows, batch_ends, row_bytes, "
                                     "total_rows[, compute_s_per_batch])")
    src.add_argument("--synthetic", choices=["zipf", "uniform"], help="generate a trace")
    ap.add_argument("--rows", type=number, default=8e6, help="synthetic: rows in the file")
    ap.add_argument("--batches", type=int, default=1000, help="synthetic: batches")
    ap.add_argument("--batch-rows", type=number, default=1000,
                    help="synthetic: row ids a batch (GraphSAGE fetched about 40 K a batch; "
                         "smaller batches make a longer trace of the same accesses)")
    ap.add_argument("--row-bytes", type=int, default=512, help="synthetic: bytes a row")
    ap.add_argument("--zipf", type=float, default=0.99,
                    help="synthetic: zipf exponent (0.99 as warpstore-bench --pattern zipf)")
    ap.add_argument("--write-trace", help="save the synthetic trace to this .npz")
    ap.add_argument("--nodes", default="1,2,4,8,16,32,64", help="node counts N")
    ap.add_argument("--gpus-per-node", "-G", type=int, default=8)
    ap.add_argument("--ownership", default="shared,private",
                    help="shared (lines owned across a node's GPUs), private, or both")
    ap.add_argument("--line-bytes", type=number, default=0,
                    help="cache line; 0: the row size rounded up to a power of two, at least "
                         "512 (train.py's arrays use their row size)")
    ap.add_argument("--cache-bytes", type=number, default=0,
                    help="cache a GPU; 0: --cache-frac of the trace's footprint")
    ap.add_argument("--cache-frac", type=float, default=1 / 32,
                    help="cache a GPU as a share of the bytes of distinct lines the trace "
                         "touches (assumed; 8 GPUs then pool 1/4 of it)")
    ap.add_argument("--ways", type=int, default=16)
    ap.add_argument("--passes", type=int, default=2, help="passes over the trace a GPU")
    ap.add_argument("--warmup", type=int, default=1, help="passes not measured")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set-sample", default="auto", help="simulate 1 set in K (1: exact)")
    ap.add_argument("--compute-s", type=float, default=None,
                    help="compute a batch (default: the trace's, else 175 ns a row, GraphSAGE)")
    ap.add_argument("--storage", choices=sorted(STORAGE_PRESETS), default="nvmeof",
                    help="capacity preset of the shared storage service")
    ap.add_argument("--storage-iops", type=capacity, help="line reads/s, whole service (0: no limit)")
    ap.add_argument("--storage-bw", type=capacity, help="bytes/s, whole service (0: no limit)")
    ap.add_argument("--network-bw", type=capacity, default=DEFAULT_NETWORK_BW,
                    help="bytes/s a node to storage (0: no limit)")
    ap.add_argument("--nvlink-bw", type=capacity, default=DEFAULT_NVLINK_BW,
                    help="bytes/s a GPU, each direction (0: no limit)")
    ap.add_argument("--node-iops", type=capacity, default=math.inf,
                    help="line reads/s a node's I/O engine issues (0: no limit)")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--json", help="merge result rows into this results file")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    if args.trace:
        trace = load_trace(args.trace)
    else:
        trace = synthetic_trace(args.synthetic, int(args.rows), args.batches,
                                int(args.batch_rows), args.row_bytes, args.zipf, args.seed)
        if args.write_trace:
            save_trace(args.write_trace, trace)
    preset = STORAGE_PRESETS[args.storage]
    storage_src = preset["source"]
    if args.storage_iops is not None or args.storage_bw is not None:
        storage_src = f"--storage-iops/--storage-bw given; otherwise preset {args.storage}: " + storage_src
    nodes = sorted({int(x) for x in args.nodes.split(",") if x.strip()})
    if not nodes or nodes[0] < 1:
        ap.error("--nodes: positive counts")
    K = 0 if args.set_sample == "auto" else int(args.set_sample)
    base = Config(gpus_per_node=args.gpus_per_node, line_bytes=int(args.line_bytes),
                  cache_bytes=int(args.cache_bytes) if args.cache_bytes != math.inf else 0,
                  cache_frac=args.cache_frac, ways=args.ways, passes=args.passes,
                  warmup=args.warmup, seed=args.seed, set_sample=K, compute_s=args.compute_s,
                  storage_iops=args.storage_iops if args.storage_iops is not None else preset["iops"],
                  storage_bw=args.storage_bw if args.storage_bw is not None else preset["bw"],
                  network_bw=args.network_bw, nvlink_bw=args.nvlink_bw, node_iops=args.node_iops)
    L = line_size_for(trace["row_bytes"], base.line_bytes)
    prep = prepare(trace, L)
    print(f"trace {trace['name']}: {len(trace['batch_ends'])} batches, {len(trace['rows']):,} row "
          f"ids, {trace['row_bytes']} B rows, {prep['footprint_lines']:,} distinct {L} B lines "
          f"({fmt_rate(prep['footprint_lines'] * L, 'B')})")
    st = (f"storage {fmt_rate(base.storage_iops, 'IOPS')}, {fmt_rate(base.storage_bw, 'B/s')} "
          f"({args.storage}); network {fmt_rate(base.network_bw, 'B/s')} a node; NVLink "
          f"{fmt_rate(base.nvlink_bw, 'B/s')} a GPU; node engine {fmt_rate(base.node_iops, 'IOPS')}")
    print(st)
    rows_out = []
    for own in [o.strip() for o in args.ownership.split(",") if o.strip()]:
        cfg = dataclasses.replace(base, ownership=own)
        res = run(trace, cfg, nodes, args.threshold, prep)
        pooled = res["node"]["cache_bytes_per_gpu"] * (cfg.gpus_per_node if own == "shared" else 1)
        share = pooled / (res["node"]["footprint_lines"] * L)
        if share >= 0.5:
            print(f"note ({own}): one cache holds {share:.2f} of the trace's footprint. A batch "
                  f"comes back every {prep['B'] / cfg.gpus_per_node:.1f} steps at a node, so "
                  f"rows the trace reads once hit as if they were popular: the hit rate is the "
                  f"trace repeating itself unless the trace is a whole epoch")
        print_table(f"{own} ownership, compute {res['compute_s'] * 1e3:.2f} ms a batch "
                    f"({res['compute_source'].split(':')[0]})", res, cfg, args.threshold)
        rows_out += result_rows(trace, cfg, res, args, storage_src)
    if args.json:
        write_json(args.json, rows_out)
        print(f"\n{len(rows_out)} rows merged into {args.json}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
