"""apps/graphsage/train.py under torchrun: two ranks (gloo between CPU
processes here; NCCL between GPUs on the GPU machine) train one
DistributedDataParallel model, each fetching its features through its own
warpstore array, or through caches whose lines the ranks share (--peer)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "apps", "graphsage", "train.py")


def train(tmp_path, nproc, *extra):
    out = tmp_path / f"rows-{nproc}-{len(extra)}.json"
    env = dict(os.environ, WARPSTORE_BACKEND="cpu", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, "python"),
                                                       os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", TRAIN, "--nodes", "30000", "--dim", "32", "--epochs", "2",
           "--batches", "0", "--batch-size", "512", "--test-nodes", "2000", "--dir",
           str(tmp_path), "--reuse", "--sources", "warpstore,gpu", "--threads", "1",
           "--json", str(out), *extra]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {row["name"].rsplit(".", 1)[-1]: row for row in json.loads(out.read_text())}, r.stdout


@pytest.mark.parametrize("peer", [False, True])
def test_two_ranks_train_one_model(tmp_path, peer):
    rows, log = train(tmp_path, 2, *(["--peer"] if peer else []))
    ws = rows["epoch_s"]
    assert ws["params"]["gpus"] == 2 and ws["params"]["peer"] is peer
    assert ws["mismatches"] == 0  # every fetched row checked against the file, on every rank
    # Both ranks' test shares were counted: 2000 test nodes, 1000 a rank.
    assert "checked" in log
    # The same seeds and model on both sources: the same accuracy.
    assert abs(ws["params"]["warpstore_accuracy"] - rows["vs_gpu"]["params"]["other_accuracy"]) \
        <= 0.01
    # One rank's output only (rank 0 speaks for all).
    assert log.count("test accuracy") == 2, log


def test_profile_says_where_each_epoch_goes(tmp_path):
    """--profile: each source's last epoch split into the loop body and the
    loader (sampling, the exposed fetch within it), the CPU time of each
    thread, and one more epoch under the PyTorch profiler."""
    prof = tmp_path / "where.json"
    env = dict(os.environ, WARPSTORE_BACKEND="cpu", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, "python"),
                                                       os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, TRAIN, "--nodes", "20000", "--dim", "32", "--epochs", "2",
                        "--batches", "4", "--batch-size", "256", "--test-nodes", "500", "--dir",
                        str(tmp_path), "--sources", "warpstore,memmap", "--threads", "1",
                        "--profile", str(prof)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    where = json.loads(prof.read_text())["sources"]
    assert set(where) == {"warpstore", "memmap"}
    for w in where.values():
        assert w["step_s"] > 0 and w["loader_s"] > 0
        assert abs(w["step_s"] + w["loader_s"] - w["epoch_s"]) < 1e-3
        assert 0 < w["sampling_s"] < w["loader_s"]
        assert w["thread_cpu_s"]["main thread"] > 0
        p = w["profiled_epoch"]
        assert p["batches"] == 4 and p["by_cpu_self"] and p["by_cpu_self"][0]["cpu_self_ms"] > 0
    assert "[warpstore] last epoch" in r.stdout
