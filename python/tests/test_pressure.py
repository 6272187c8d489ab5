"""More lines wanted than the cache holds: gathers whose working set is 0.1x,
1x and 10x the cache, through 64 KiB lines, get slower as the ratio grows,
never wrong and never an error. A deadline means no progress, not a long
queue."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import warpstore
from conftest import write

CACHE = 1 << 20  # 16 lines of 64 KiB
LINE = 64 << 10


@pytest.mark.parametrize("ratio", [0.1, 1, 10])
def test_row_gathers_at_a_ratio_of_the_cache(tmp_path, ratio, controller):
    rng = np.random.default_rng(int(ratio * 10))
    rows = max(64, int(ratio * CACHE) // 512)  # rows of 128 float32: the working set
    data = rng.standard_normal((rows, 128)).astype(np.float32)
    path = write(tmp_path / "rows.f32", data)
    idx = rng.integers(0, rows, 20000)
    with warpstore.open(path, np.float32, (rows, 128), cache=CACHE, line_size=LINE, threads=2,
                        controller=controller, deadline=2.0) as a:
        np.testing.assert_array_equal(a.gather(idx), data[idx])
        s = a.stats()
        assert s["errors"] == 0
        if ratio > 1:
            assert s["evictions"] > 0  # the cache was really too small


@pytest.mark.parametrize("ratio", [0.1, 1, 10])
def test_element_gathers_at_a_ratio_of_the_cache(tmp_path, ratio, controller):
    rng = np.random.default_rng(int(ratio * 10) + 1)
    n = max(1024, int(ratio * CACHE) // 4)
    data = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    path = write(tmp_path / "u32.bin", data)
    idx = rng.integers(0, n, 50000)
    with warpstore.open(path, np.uint32, cache=CACHE, line_size=LINE, threads=2,
                        controller=controller, deadline=2.0) as a:
        np.testing.assert_array_equal(a[idx], data[idx])
        assert a.stats()["errors"] == 0


def test_the_pressure_bench_compares_each_gather_with_the_miss_path(tmp_path):
    """bench/python_pressure.py at a tiny scale: each ratio row is the gather's
    rate over the miss path's, in one unit, every gather checked."""
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "python_pressure.py")
    out = tmp_path / "pressure.json"
    r = subprocess.run([sys.executable, bench, "--file-mib", "8", "--cache-mib", "1",
                        "--reads", "5000", "--dir", str(tmp_path), "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = {row["name"]: row for row in json.loads(out.read_text())}
    first = rows.pop("pressure.line64k.small_cache")
    assert first["value"] == 5000 and first["mismatches"] == 0 and first["params"]["errors"] == 0
    assert sorted(rows) == sorted(f"pressure.{k}.{r}x" for k in ("rows", "elements")
                                  for r in (0.1, 1, 10))
    for name, row in rows.items():
        kind = name.split(".")[1]
        assert row["unit"] == f"{kind}/s" and row["ceiling_name"].startswith(f"miss path: {kind}/s")
        assert row["value"] > 0 and row["ceiling"] > 0
        assert row["ratio"] == pytest.approx(row["value"] / row["ceiling"], rel=1e-2, abs=1e-3)
        assert row["verified"] and row["mismatches"] == 0 and row["params"]["errors"] == 0
    # Ten times the cache: lines really were missed and filled.
    assert rows["pressure.rows.10x"]["params"]["misses"] > 0
    assert rows["pressure.elements.10x"]["params"]["line_misses_per_s"] > 0
