"""bench/scale_sim.py, the scale-out simulation (docs/SCALE.md): its cache
model against a one-access-at-a-time reference, and invariants of its results
that a wrong model would break. Pure NumPy; no GPU, no warpstore."""
import dataclasses
import importlib.util
import json
import math
import os

import numpy as np
import pytest

SIM = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "scale_sim.py")


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("scale_sim", SIM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def small_trace(sim, kind="zipf", seed=3):
    return sim.synthetic_trace(kind, total_rows=20000, batches=40, batch_rows=500,
                               row_bytes=512, zipf_s=0.99, seed=seed)


def config(sim, **kw):
    base = dict(gpus_per_node=1, ownership="private", line_bytes=512, cache_bytes=64 * 1024,
                ways=4, passes=2, warmup=1, seed=1, set_sample=1, compute_s=0.0,
                storage_iops=math.inf, storage_bw=1e9, network_bw=math.inf,
                nvlink_bw=math.inf, node_iops=math.inf)
    base.update(kw)
    return sim.Config(**base)


@pytest.mark.parametrize("ways,sets", [(1, 4), (4, 8), (16, 3)])
def test_lru_matches_reference(sim, ways, sets):
    """The vectorized set-associative LRU gives exactly the hits of a cache
    simulated one access at a time, on a random stream with reuse."""
    rng = np.random.default_rng(ways * 100 + sets)
    keys = np.concatenate([rng.integers(0, 200, 1500), rng.zipf(1.3, 1500) % 300])
    rng.shuffle(keys)
    set_ids = sim.set_index(keys, sets)
    got = sim.lru_hits(set_ids, keys, ways)
    want = sim.lru_hits_reference(set_ids, keys, ways)
    assert got.sum() == want.sum()
    assert np.array_equal(got, want)
    assert 0 < want.sum() < len(keys)  # the stream both hits and misses


def test_hit_rate_grows_with_the_cache(sim):
    """On one stream, a bigger cache (more sets, or more ways) never hits
    less; and it does hit more somewhere."""
    trace = small_trace(sim)
    prep = sim.prepare(trace, 512)
    rates = []
    for cache in [2**k for k in range(14, 23)]:
        for ways in (4, 8):
            node = sim.simulate_node(trace, config(sim, cache_bytes=cache, ways=ways), prep)
            rates.append((cache, ways, node["hit_rate"]))
    by_size = {}
    for cache, ways, rate in rates:
        by_size.setdefault(ways, []).append(rate)
    for ways, seq in by_size.items():
        assert all(b >= a for a, b in zip(seq, seq[1:])), (ways, seq)
        assert seq[-1] > seq[0]
    for (c4, w4, r4), (c8, w8, r8) in zip(rates[0::2], rates[1::2]):
        # the same number of sets with twice the ways: twice the cache
        node = sim.simulate_node(trace, config(sim, cache_bytes=2 * c4, ways=8), prep)
        assert node["hit_rate"] >= r4


def test_shared_ownership_reads_storage_no_more(sim):
    """Lines owned across a node's GPUs: storage reads at most what private
    caches read on the same stream, and exactly as much with one GPU."""
    trace = small_trace(sim)
    prep = sim.prepare(trace, 512)
    one_p = sim.simulate_node(trace, config(sim, gpus_per_node=1, ownership="private"), prep)
    one_s = sim.simulate_node(trace, config(sim, gpus_per_node=1, ownership="shared"), prep)
    assert np.array_equal(one_p["misses"], one_s["misses"])
    assert not one_s["nvlink"].any()
    for g in (2, 4):
        priv = sim.simulate_node(trace, config(sim, gpus_per_node=g, ownership="private"), prep)
        shar = sim.simulate_node(trace, config(sim, gpus_per_node=g, ownership="shared"), prep)
        assert np.array_equal(priv["requests"], shar["requests"])
        assert shar["misses"].sum() <= priv["misses"].sum()
        assert shar["misses"].sum() < priv["misses"].sum()  # and it helps here
        assert shar["nvlink"].all() and not priv["nvlink"].any()


def test_uniform_stream_saturates_at_storage_bandwidth(sim):
    """Compute 0 (and then a compute time only one node can meet), storage
    bandwidth the only limit: aggregate batches/s is storage_bw / (miss rate
    x bytes a batch asks for), within 5 %."""
    trace = small_trace(sim, "uniform")
    bw = 2e9
    cfg = config(sim, gpus_per_node=2, storage_bw=bw)
    res = sim.run(trace, cfg, nodes=(1, 2, 8, 64))
    node = res["node"]
    miss_rate = 1 - node["hit_rate"]
    bytes_per_batch = node["requests"].mean() / cfg.gpus_per_node * node["line_bytes"]
    analytic = bw / (miss_rate * bytes_per_batch)
    assert 0.5 < miss_rate < 1
    for row in res["rows"]:
        assert row["aggregate"] == pytest.approx(analytic, rel=0.05)
        assert row["bottleneck"] == "storage bandwidth"
    # With compute that one node's fetch fits in, N = 1 runs at compute speed
    # and large N saturates at the same ceiling.
    per_gpu_fetch = 1 / analytic * cfg.gpus_per_node  # one node's step at full bandwidth
    c = 2 * per_gpu_fetch
    res = sim.run(trace, dataclasses.replace(cfg, compute_s=c), nodes=(1, 64))
    first, last = res["rows"]
    assert first["per_gpu"] == pytest.approx(1 / c, rel=0.05)
    assert first["bottleneck"] == "compute"
    assert last["aggregate"] == pytest.approx(analytic, rel=0.05)
    assert last["bottleneck"] == "storage bandwidth"
    assert res["saturation_nodes"] == 64


def test_trace_round_trip(sim, tmp_path):
    """A synthetic trace written to .npz and read back gives the same
    simulation, row for row."""
    trace = small_trace(sim, seed=9)
    trace["compute_s_per_batch"] = 0.001
    path = tmp_path / "t.npz"
    sim.save_trace(path, trace)
    back = sim.load_trace(str(path))
    for k in ("rows", "batch_ends"):
        assert np.array_equal(back[k], trace[k])
    assert (back["row_bytes"], back["total_rows"]) == (trace["row_bytes"], trace["total_rows"])
    assert back["compute_s_per_batch"] == 0.001
    cfg = config(sim, gpus_per_node=4, ownership="shared", storage_iops=1e6, compute_s=None)
    a = sim.run(trace, cfg, nodes=(1, 2, 4))
    b = sim.run(back, cfg, nodes=(1, 2, 4))
    assert a["compute_s"] == b["compute_s"] == 0.001
    assert a["rows"] == b["rows"]
    np.savez(tmp_path / "bad.npz", rows=trace["rows"], batch_ends=trace["batch_ends"][:-1],
             row_bytes=512, total_rows=20000)
    with pytest.raises(ValueError, match="batch_ends"):
        sim.load_trace(str(tmp_path / "bad.npz"))


def test_command_line_writes_results_rows(sim, tmp_path, capsys):
    """The command line prints the table and writes rows in the results
    format (docs/RESULTS.md), with the saturation N and its assumptions."""
    out = tmp_path / "scale.json"
    assert sim.main(["--synthetic", "zipf", "--rows", "20000", "--batches", "40",
                     "--batch-rows", "500", "-G", "2", "--nodes", "1,2,4",
                     "--storage-iops", "2M", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bottleneck" in text and "shared ownership" in text and "private ownership" in text
    doc = json.loads(out.read_text())
    names = {r["name"]: r for r in doc["results"]}
    sat = names["scale.sim.synthetic_zipf.saturation_nodes"]
    assert sat["unit"] == "nodes" and sat["verified"] is False
    assert sat["value"] in (None, 2, 4)
    for key in ("storage_iops", "storage_bw", "network_bw_per_node", "nvlink_bw_per_gpu",
                "compute_s_per_batch", "compute_source", "storage_source", "cache_bytes_per_gpu"):
        assert key in sat["params"]
    assert "scale.sim.synthetic_zipf.private.saturation_nodes" in names
    agg = names["scale.sim.synthetic_zipf.n4.aggregate"]
    assert agg["unit"] == "batches/s" and 0 < agg["ratio"] <= 1.0 + 1e-9
