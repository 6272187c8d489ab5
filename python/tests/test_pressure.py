"""More lines wanted than the cache holds: gathers whose working set is 0.1x,
1x and 10x the cache, through 64 KiB lines, get slower as the ratio grows,
never wrong and never an error. A deadline means no progress, not a long
queue."""
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
