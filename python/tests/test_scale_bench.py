"""bench/python_scale.py's harness on CPU processes (gloo): each subcommand
runs its torchrun workers, checks every row they gathered against the
file's formula, and writes the rows scale.json is made of."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "python_scale.py")


def run(tmp_path, *args):
    env = dict(os.environ, WARPSTORE_BACKEND="cpu", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, "python"),
                                                       os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, BENCH, *args, "--dir", str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def test_reads_and_peer_rows_are_verified_and_collected(tmp_path):
    reads, peer, doc = (str(tmp_path / n) for n in ("reads.json", "peer.json", "scale.json"))
    run(tmp_path, "reads", "--gpus", "2", "--controllers", "host", "--rows", "8192", "--batch",
        "256", "--seconds", "0.5", "--cache", "2MiB", "--json", reads)
    run(tmp_path, "peer", "--rows", "16384", "--batch", "1024", "--batches", "4",
        "--cache-fractions", "8", "--streams", "skewed", "--json", peer)
    subprocess.run([sys.executable, BENCH, "collect", reads, peer, "--out", doc], check=True,
                   timeout=60)
    rows = {r["name"]: r for r in json.load(open(doc))["results"]}
    for name in ("scale.reads.host.1gpu.rows_per_s", "scale.reads.host.2gpu",
                 "scale.peer_cache.storage_bytes", "scale.peer_cache.throughput"):
        assert name in rows, sorted(rows)
        assert rows[name]["verified"] and rows[name]["mismatches"] == 0
    r = rows["scale.peer_cache.storage_bytes"]
    # Shared ownership never reads more than private caches on the same stream.
    assert 0 < r["value"] <= 1.0 and r["params"]["storage_bytes_shared"] <= \
        r["params"]["storage_bytes_private"]
    assert rows["scale.reads.host.2gpu"]["params"]["gpus"] == 2


def test_peer_rows_must_be_a_power_of_two(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, BENCH, "peer", "--rows", "1000"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "power of two" in r.stderr
