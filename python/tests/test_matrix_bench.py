"""The regime map (bench/python_matrix.py, `warpstore bench matrix`) at a tiny
scale: its results file, its checks, and that its checks catch wrong rows."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "python_matrix.py")
SUMMARY = ("gather.matrix.worst.vs_best_cpu", "gather.matrix.median.vs_best_cpu",
           "gather.matrix.cold.median.vs_memmap", "gather.random512.defaults.vs_best_cpu",
           "bulk.host.vs_kvikio", "bulk.defaults.vs_kvikio")


@pytest.fixture(scope="module")
def regimes(tmp_path_factory):
    d = tmp_path_factory.mktemp("regimes")
    out = d / "regimes.json"
    r = subprocess.run(
        [sys.executable, "-m", "warpstore", "bench", "matrix", "--dir", str(d), "--scale", "1/512",
         "--rows", "512B,4096B", "--batches", "1K,64K", "--bulk", "64MiB,1GiB", "--reps", "2",
         "--budget-s", "60", "--json", str(out), "--plots", str(d / "plots")],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not [f for f in os.listdir(d) if f.endswith(".dat")], "data files left behind"
    return json.loads(out.read_text()), r.stdout


def test_header(regimes):
    doc, _ = regimes
    assert doc["study"] == "regimes"
    for key in ("device", "date", "commit", "command"):
        assert doc[key], key
    assert doc["command"].startswith("warpstore bench matrix")


def test_every_row_verified(regimes):
    doc, text = regimes
    rows = doc["results"]
    assert len(rows) > 50
    bad = [r["name"] for r in rows if not r["verified"] or r["mismatches"] != 0]
    assert not bad, bad
    assert doc["params"]["failures"] == []
    assert "verified against the file: 0 wrong rows" in text
    for r in rows:
        if r["name"].startswith("gather.matrix.") and r["name"].split(".")[-1] in (
                "warpstore_host", "warpstore_memory", "memmap", "threads_pinned"):
            assert r["params"]["rows_checked"] > 0 and r["value"] > 0, r["name"]


def test_cells_and_summaries(regimes):
    doc, text = regimes
    names = {r["name"]: r for r in doc["results"]}
    for s in SUMMARY:
        assert s in names, s
        assert names[s]["value"] is not None, (s, names[s]["params"])
    # Both residencies and all three ws ratios were measured somewhere.
    for part in (".page.", ".disk.", ".ws0p1.", ".ws1.", ".ws10."):
        assert any(part in n and n.endswith(".warpstore_host") for n in names), part
    # Warpstore rows carry the cell's best CPU path as their ceiling.
    r = next(r for n, r in names.items() if n.startswith("gather.matrix.page.")
             and n.endswith(".warpstore_host"))
    assert r["ceiling"] and r["ratio"] == pytest.approx(r["value"] / r["ceiling"])
    assert r["params"]["best_cpu_method"] in ("memmap", "threads_pinned", "kvikio")
    assert r["params"]["hit_rate"] is not None and r["params"]["cache_bytes"] > 0
    # The on-disk cells read the file after a drop (O_DIRECT where the file system allows it).
    disk = [r for n, r in names.items() if ".disk." in n and n.endswith(".warpstore_host")]
    assert disk and all(r["params"]["residency"] == "disk" for r in disk)
    assert "summary:" in text and "left out" in text
    # Short page-cache sequences are timed in rounds, the median kept; a
    # ws10 cell's warpstore rounds each over batches of their own (its
    # first round's would hit on what they admitted); on-disk cells once.
    for n, r in names.items():
        p = r.get("params") or {}
        rounds = p.get("round_seconds")
        if rounds:
            assert ".page." in n, n
            fresh = "each over batches of its own" in p["figure"]
            assert fresh == (".ws10." in n and ".warpstore_" in n), (n, p["figure"])
            assert len(rounds) == 5 and p["seconds"] == pytest.approx(sorted(rounds)[2], abs=2e-6)
    assert any((r.get("params") or {}).get("round_seconds") for n, r in names.items()
               if ".page.512B.1K.ws0p1." in n and n.endswith(".warpstore_host"))
    assert not any((r.get("params") or {}).get("round_seconds") for n, r in names.items()
                   if ".disk." in n)
    # Bulk reads: the methods of a cell take turns, one read a round; each
    # read's speed kept, the best the figure.
    bulk = [r for n, r in names.items() if n.startswith("bulk.page.") and r["value"]]
    assert bulk
    for r in bulk:
        p = r["params"]
        assert "taking turns" in p["figure"], p
        assert len(p["rep_gb_s"]) == p["reps"]
        assert max(p["rep_gb_s"]) == pytest.approx(r["value"], rel=0.01, abs=1e-4)
        # warpstore's reads say where their time went, one entry a read.
        if ".warpstore_" in r["name"]:
            assert len(p["rep_breakdown"]) == p["reps"], p
            for b in p["rep_breakdown"]:
                assert b["calls"] == 1 and b["lanes"] >= 1 and b["chunks"] >= 1, b
                assert b["read_ms"] > 0 and b["call_ms"] > 0, b
        else:
            assert "rep_breakdown" not in p


def test_left_out_listed_with_reasons(regimes):
    doc, text = regimes
    left = doc["left_out"]
    assert left and all(e["reason"] and e["cell"] and e["methods"] for e in left)
    reasons = " ".join(e["reason"] for e in left)
    assert "not selected" in reasons  # --rows / --batches
    if doc["device"] == "CPU":
        assert "no GPU" in reasons
    cells = {e["cell"] for e in left}
    assert "gather.matrix.page.128B.1K.*.sparse" in cells  # --rows left 128 B out
    assert any(c.startswith("gather.matrix.disk.") and ".ws1." in c for c in cells)


def _bench_module():
    spec = importlib.util.spec_from_file_location("python_matrix", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_check_catches_wrong_rows():
    """The pattern check the map relies on finds a changed byte and a
    swapped row, not only clean data."""
    import torch

    mod = _bench_module()
    m = mod.Matrix.__new__(mod.Matrix)
    m.torch = torch
    idx = torch.tensor([5, 0, 17, 3], dtype=torch.int64)
    words = np.arange(64 * 512 // 8, dtype=np.uint64)
    with np.errstate(over="ignore"):
        file_rows = (words * mod.GOLDEN).view(np.uint8).reshape(64, 512)
    out = torch.from_numpy(file_rows[idx.numpy()].copy())
    assert m.verify(out, idx, 512) == (0, 4)
    out[2, 100] ^= 1
    assert m.verify(out, idx, 512) == (1, 4)
    out = torch.from_numpy(file_rows[[5, 0, 3, 17]].copy())
    assert m.verify(out, idx, 512) == (2, 4)


def test_bad_arguments_fail_in_one_line(tmp_path):
    for args in (["--scale", "2"], ["--rows", "100"], ["--rows", "0B"],
                 ["--dir", str(tmp_path / "nope")]):
        r = subprocess.run([sys.executable, "-m", "warpstore", "bench", "matrix", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_rows_that_are_not_a_power_of_two(tmp_path):
    """--rows takes any <bytes>B: 400 B rows (100 float32) span 512 B lines,
    and every gathered row is still checked against the file."""
    out = tmp_path / "odd.json"
    r = subprocess.run(
        [sys.executable, "-m", "warpstore", "bench", "matrix", "--dir", str(tmp_path), "--scale",
         "1/512", "--rows", "400B", "--batches", "1K", "--densities", "sparse,dense",
         "--residencies", "page", "--bulk", "64MiB", "--reps", "2", "--budget-s", "60",
         "--json", str(out), "--plots", str(tmp_path / "plots")],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads(out.read_text())["results"]
    cells = [x for x in rows if x["name"].startswith("gather.matrix.page.400B.1K.")]
    ws = [x for x in cells if x["name"].endswith((".warpstore_host", ".warpstore_memory"))]
    assert len(ws) >= 6, [x["name"] for x in cells]
    for x in ws:
        assert x["verified"] and x["mismatches"] == 0 and x["params"]["rows_checked"] > 0, x
        assert x["params"]["row_bytes"] == 400 and x["params"]["line_size"] == 512, x["params"]


def _fake_kvikio(monkeypatch, honours_threads):
    """A stand-in `kvikio` whose `defaults` submodule keeps (or ignores) num_threads."""
    import types

    state = {"num_threads": 1, "compat_mode": None}
    kv = types.ModuleType("kvikio")
    kv.__version__ = "0.test"
    defaults = types.ModuleType("kvikio.defaults")

    def set_(d):
        if honours_threads:
            state.update(d)

    defaults.set = set_
    defaults.get = state.get
    defaults.is_compat_mode_preferred = lambda: True
    kv.defaults = defaults
    monkeypatch.setitem(sys.modules, "kvikio", kv)
    monkeypatch.setitem(sys.modules, "kvikio.defaults", defaults)


def test_kvikio_competitor_gets_every_core(monkeypatch):
    # KvikIO's pool defaults to one thread: a competitor left there is a weak one.
    from warpstore._tools import import_kvikio

    _fake_kvikio(monkeypatch, honours_threads=True)
    _, note = import_kvikio(threads=12)
    assert "12 threads" in note and "POSIX" in note
    _fake_kvikio(monkeypatch, honours_threads=False)
    with pytest.raises(RuntimeError, match="1 threads after asking for 12"):
        import_kvikio(threads=12)


def test_results_name_the_commit_they_were_given(monkeypatch):
    # A GPU machine's checkout may name an older commit than the tree it runs:
    # WARPSTORE_COMMIT (scripts/gpu.sh exports it) wins over the checkout's HEAD.
    from warpstore._tools import git_commit

    monkeypatch.setenv("WARPSTORE_COMMIT", "0123abc")
    assert git_commit() == "0123abc"
    monkeypatch.delenv("WARPSTORE_COMMIT")
    assert git_commit() != "0123abc"


def test_results_say_when_the_tree_is_not_its_commit(monkeypatch, tmp_path):
    # Without WARPSTORE_COMMIT: HEAD, marked +dirty where tracked files differ
    # from it (on the GPU machine, a newer tree over a stale .git).
    import shutil

    from warpstore._tools import git_commit

    if shutil.which("git") is None:
        pytest.skip("no git")
    monkeypatch.delenv("WARPSTORE_COMMIT", raising=False)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "--short", "HEAD")
    assert git_commit(str(tmp_path)) == head
    (tmp_path / "untracked.txt").write_text("x")  # not part of the tree measured
    assert git_commit(str(tmp_path)) == head
    (tmp_path / "a.txt").write_text("two")
    assert git_commit(str(tmp_path)) == head + "+dirty"
    assert git_commit(str(tmp_path / "nowhere")) == "unknown"


def test_disk_lower_bound():
    """The on-disk ceiling's least time: bytes at the disk's bandwidth or
    requests at its rate, whichever bounds, with gaps read through where
    that is faster; never below either for the rows' own sectors."""
    lb = _bench_module().disk_lower_bound
    # 1 K contiguous 512 B rows: 512 KiB in one request at 1 GB/s.
    assert lb(np.arange(1024)[::-1], 512, 1e5, 1e9) == pytest.approx(1024 * 512 / 1e9)
    # 1 K rows far apart: a request each (no gap is worth reading through).
    far = np.arange(1024) * 1_000_000
    assert lb(far, 512, 1e5, 1e9) == pytest.approx(1024 / 1e5)
    # 128 B rows share sectors: 8 rows in 2 sectors cost 2 sectors' bytes.
    assert lb(np.arange(8), 128, 1e9, 1e6) == pytest.approx(2 * 512 / 1e6)
    # 400 B rows cross sectors: rows 0 and 2 are sectors 0 and 1..2, one run.
    assert lb(np.array([0, 2]), 400, 1e3, 1e9) == pytest.approx(1 / 1e3)
    # Two runs a sector apart at a low request rate: read as one (3 sectors).
    two = np.array([0, 2])
    assert lb(two, 512, 1.0, 1e9) == pytest.approx(1.0)
    assert lb(two, 512, 1e9, 512.0) == pytest.approx(2.0)  # bandwidth-bound: 2 sectors
    # Both bounds hold for any gathering: each is at most the true least.
    rng = np.random.default_rng(3)
    for row in (128, 400, 512, 4096, 16384):
        idx = rng.choice(100_000, 2000, replace=False)
        t = lb(idx, row, 5e4, 2e9)
        sectors = {s for i in idx for s in range(i * row // 512, (i * row + row - 1) // 512 + 1)}
        assert t >= len(sectors) * 512 / 2e9 * (1 - 1e-9)
        assert t >= 1 / 5e4
        assert t <= len(idx) / 5e4 + len(sectors) * 512 / 2e9


def test_cold_ceiling_row(regimes):
    """The run measures the disk and bounds the cold median with it, or
    says why not (a file system without O_DIRECT)."""
    doc, text = regimes
    names = {r["name"]: r for r in doc["results"]}
    c = names["gather.matrix.cold.median.ceiling"]
    assert "gather.matrix.cold.median.ceiling" in text
    if c["value"] is None:
        assert "O_DIRECT" in c["params"]["reason"], c["params"]
        return
    p = c["params"]
    assert c["verified"] and p["reads_s"] > 0 and p["gb_s"] > 0
    for n in ("device.random512.direct", "device.random4k.direct", "device.read1m.direct"):
        assert names[n]["verified"] and names[n]["value"] > 0, n
    disk = {n: r for n, r in names.items()
            if n.startswith("gather.matrix.disk.") and n.endswith(".warpstore_host")}
    assert p["cells"] == len(disk) == len(p["ceilings"])
    for n, r in disk.items():
        assert r["params"]["ceiling_vs_memmap"] > 0, n
    ceilings = sorted(p["ceilings"].values())
    assert c["value"] == pytest.approx(ceilings[(len(ceilings) - 1) // 2], rel=1e-3)
    assert names["gather.matrix.cold.median.vs_memmap"]["params"]["ceiling_median"] == \
        pytest.approx(c["value"], rel=1e-3)
