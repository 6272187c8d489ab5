"""The warpstore CLI: info, gen, and the gather benchmark harness (tiny, on any machine)."""
import json
import subprocess
import sys

import numpy as np


def cli(*args):
    r = subprocess.run([sys.executable, "-m", "warpstore", *args], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_info():
    i = json.loads(cli("info", "--json"))
    assert i["controllers"] == ["host", "memory"] and i["settings"]["line_size"] == 4096


def test_gen(tmp_path):
    cli("gen", "pattern", str(tmp_path / "p.dat"), "--size", "1MiB")
    w = np.fromfile(tmp_path / "p.dat", dtype=np.uint64)
    with np.errstate(over="ignore"):
        assert np.array_equal(w, np.arange(w.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    cli("gen", "features", str(tmp_path / "f.f32"), "--nodes", "1000", "--dim", "16")
    assert (tmp_path / "f.f32").stat().st_size == 1000 * 16 * 4


def test_gather_bench_writes_verified_results(tmp_path):
    out = tmp_path / "gather.json"
    text = cli("bench", "gather", "--file", str(tmp_path / "g.dat"), "--size", "8MiB", "--batch",
               "256KiB", "--cache", "1MiB", "--threads", "2", "--json", str(out), "--plot",
               str(tmp_path / "g.png"))
    doc = json.loads(out.read_text())
    assert doc["study"] == "gather"
    names = {r["name"] for r in doc["results"]}
    assert {"gather.host.random4k.cold.vs_memmap", "gather.host.zipf4k.warm.vs_memmap",
            "gather.memory.random512.cold.vs_memmap"} <= names
    assert all(r["verified"] and r["mismatches"] == 0 for r in doc["results"])
    assert "0 wrong" in text
