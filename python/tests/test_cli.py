"""The warpstore CLI: info, gen, and the gather benchmark harness (tiny, on any machine)."""
import json
import subprocess
import sys

import numpy as np
import pytest


def cli(*args):
    r = subprocess.run([sys.executable, "-m", "warpstore", *args], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_info():
    i = json.loads(cli("info", "--json"))
    assert i["controllers"] == ["host", "memory", "nvme-model", "nvme"] and i["settings"]["line_size"] == 4096


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


# -- bad input: one line on stderr, status 2, nothing written

def cli_fails(*args, env=None):
    import os

    r = subprocess.run([sys.executable, "-m", "warpstore", *args], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, **(env or {})))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("args,words", [
    (["features", "--nodes", "-5"], ["--nodes", "-5"]),
    (["features", "--nodes", "0"], ["--nodes"]),
    (["features", "--dim", "0"], ["--dim"]),
    (["features", "--nodes", "many"], ["--nodes", "many"]),
    (["graph", "--degree", "-1"], ["--degree"]),
    (["graph", "--nodes", "-3"], ["--nodes"]),
    (["features", "--seed", "-1"], ["--seed"]),
    (["pattern", "--size", "7"], ["--size", "multiple of 8"]),
    (["pattern", "--size", "0"], ["--size"]),
    (["pattern", "--size", "-8"], ["--size"]),
    (["pattern", "--size", "lots"], ["--size", "lots"]),
    (["pattern"], ["--size"]),
    (["pattern", "--size", "1PiB"], ["free"]),
    (["features", "--nodes", "1000000000000", "--dim", "1000"], ["free"]),
])
def test_gen_refuses_bad_numbers_before_writing(tmp_path, args, words):
    out = tmp_path / "out.dat"
    kind, rest = args[0], args[1:]
    line = cli_fails("gen", kind, str(out), *rest)
    for w in words:
        assert w in line, line
    assert not out.exists()


def test_gen_refuses_a_directory_or_a_missing_directory(tmp_path):
    assert "directory" in cli_fails("gen", "pattern", str(tmp_path), "--size", "8")
    assert "does not exist" in cli_fails("gen", "pattern", str(tmp_path / "no" / "f"), "--size",
                                         "8")


@pytest.mark.parametrize("args,word", [
    (["--size", "100"], "--size"),
    (["--size", "lots"], "--size"),
    (["--batch", "0"], "--batch"),
    (["--cache", "huge"], "--cache"),
    (["--cache", "1"], "cache"),
    (["--threads", "0"], "--threads"),
    (["--threads", "1000"], "threads"),
    (["--rows", "4k,3k"], "--rows"),
    (["--streams", "random,sorted"], "--streams"),
    (["--controllers", "host,nvme"], "--controllers"),
    (["--zipf-a", "0.5"], "--zipf-a"),
    (["--zipf-a", "nan"], "--zipf-a"),
    (["--seed", "-2"], "--seed"),
    (["--size", "1PiB"], "free"),
])
def test_bench_gather_refuses_bad_arguments_before_writing(tmp_path, args, word):
    f = tmp_path / "g.dat"
    line = cli_fails("bench", "gather", "--file", str(f), "--json", str(tmp_path / "g.json"), *args)
    assert word in line, line
    assert not f.exists()


@pytest.mark.parametrize("var,value", [
    ("WARPSTORE_TIMEOUT_MS", "0"),
    ("WARPSTORE_TIMEOUT_MS", "18446744073710"),
    ("WARPSTORE_THREADS", "4294967300"),
    ("WARPSTORE_LINE_SIZE", "3000"),
    ("WARPSTORE_CACHE_BYTES", "lots"),
    ("WARPSTORE_CONTROLLER", "vfio"),
])
def test_bad_environment_is_one_line(tmp_path, var, value):
    assert var in cli_fails("info", env={var: value})
    f = tmp_path / "g.dat"
    assert var in cli_fails("bench", "gather", "--file", str(f), "--size", "8MiB",
                            env={var: value})
    assert not f.exists()


def test_unknown_subcommand_and_argument_are_one_line():
    cli_fails("frobnicate")
    cli_fails("info", "--colour")
    cli_fails("gen", "triangle", "/tmp/x")
