"""Gathers return exactly what the file holds, for every dtype, shape and index kind."""
import os

import numpy as np
import pytest

import warpstore
from conftest import SMALL, cuda_available, write

cuda = pytest.mark.skipif(not cuda_available(), reason="needs a GPU and the CUDA target")


def test_rows_match_the_file(features, controller):
    path, data = features
    idx = np.random.default_rng(1).integers(0, len(data), 30000)
    with warpstore.open(path, np.float32, (-1, 100), controller=controller, **SMALL) as a:
        assert len(a) == 20000 and a.shape == (20000, 100) and a.dtype == np.float32
        got = a.gather(idx)
        assert got.shape == (30000, 100) and got.dtype == np.float32
        np.testing.assert_array_equal(got, data[idx])
        s = a.stats()
        assert s["misses"] > 0 and s["evictions"] > 0 and s["errors"] == 0
        assert 0 < s["bytes"] <= s["misses"] * 4096
        assert s["controller"] == controller


def test_elements_of_a_1d_array(features, controller):
    path, data = features
    flat = data.reshape(-1)
    idx = np.random.default_rng(2).integers(0, flat.size, 50000).astype(np.int32)
    with warpstore.open(path, "float32", controller=controller, **SMALL) as a:
        assert a.shape == (flat.size,)
        np.testing.assert_array_equal(a[idx], flat[idx])


def test_warm_gather_hits(features):
    path, data = features
    idx = np.arange(0, 2000, 3)
    # The host controller: every line a gather reads is cached by it (the
    # memory controller may read a contended line around the cache: below).
    with warpstore.open(path, "float32", (20000, 100), cache="4MiB", threads=2,
                        controller="host") as a:
        np.testing.assert_array_equal(a[idx], data[idx])
        a.reset_stats()
        np.testing.assert_array_equal(a[idx], data[idx])
        s = a.stats()
        assert s["misses"] == 0 and s["hits"] > 0
        a.clear_cache()
        a.reset_stats()
        np.testing.assert_array_equal(a[idx], data[idx])
        assert a.stats()["misses"] > 0


def test_lines_read_around_are_cached_by_later_gathers(features):
    # Over the memory controller a group whose line is being filled by
    # another warp, or whose set is locked, reads the line from host memory
    # rather than wait: it is not cached by that gather. Later gathers of
    # the same rows fill what was read around, until every row hits.
    path, data = features
    idx = np.arange(0, 2000, 3)
    with warpstore.open(path, "float32", (20000, 100), cache="4MiB", controller="memory") as a:
        for _ in range(20):
            a.reset_stats()
            np.testing.assert_array_equal(a[idx], data[idx])
            s = a.stats()
            if s["misses"] == 0 and s["read_around"] == 0:
                break
        assert s["misses"] == 0 and s["read_around"] == 0 and s["hits"] > 0, s
        assert s["hit_rate"] == 1.0


@pytest.mark.parametrize("dtype,row", [("int8", 5), ("float16", 3), ("float32", 3), ("int64", 1),
                                       ("float64", 700), ("complex128", 2), ("uint8", 4096),
                                       ("float32", 1500)])
def test_dtypes_and_rows_that_span_lines(tmp_path, dtype, row, controller):
    # 700 float64 = 5600 B and 1500 float32 = 6000 B rows span 4 KiB lines;
    # odd rows use 1-, 2- and 4-byte words.
    rng = np.random.default_rng(3)
    n = 3000
    data = (rng.standard_normal((n, row)) * 100).astype(dtype)
    path = write(tmp_path / "a.bin", data)
    idx = rng.integers(0, n, 4000)
    with warpstore.open(path, dtype, (n, row), cache="512KiB", threads=2,
                        controller=controller) as a:
        np.testing.assert_array_equal(a[idx], data[idx])


def test_index_shapes_negative_indices_slices_and_integers(features):
    path, data = features
    with warpstore.open(path, "float32", (-1, 100), **SMALL) as a:
        idx = np.array([[0, -1], [5, -20000]])
        np.testing.assert_array_equal(a[idx], data[idx])
        np.testing.assert_array_equal(a[[3, 1, 4]], data[[3, 1, 4]])
        np.testing.assert_array_equal(a[100:200], data[100:200])
        np.testing.assert_array_equal(a[-10::3], data[-10::3])
        np.testing.assert_array_equal(a[7], data[7])
        np.testing.assert_array_equal(a[np.int64(-2)], data[-2])
        np.testing.assert_array_equal(a[np.array([], dtype=np.int64)], data[[]])
        np.testing.assert_array_equal(a[np.array([9, 8], dtype=np.uint16)], data[[9, 8]])


def test_offset(tmp_path):
    data = np.arange(10000, dtype=np.int64)
    path = write(tmp_path / "o.bin", data, offset=1024)
    with warpstore.open(path, np.int64, offset=1024, **SMALL) as a:
        assert len(a) == 10000
        np.testing.assert_array_equal(a[[0, 9999, 4096]], data[[0, 9999, 4096]])


def test_torch_tensors(features):
    torch = pytest.importorskip("torch")
    path, data = features
    idx = torch.randint(0, 20000, (5000,), generator=torch.Generator().manual_seed(0))
    with warpstore.open(path, torch.float32, (-1, 100), **SMALL) as a:
        assert a.dtype == torch.float32
        for t in (idx, idx.int(), idx.reshape(50, 100), idx[::2]):
            got = a[t]
            assert isinstance(got, torch.Tensor) and got.device == t.device
            assert got.dtype == torch.float32 and got.shape == tuple(t.shape) + (100,)
            assert torch.equal(got, torch.from_numpy(data[t.numpy()]))


def test_gather_from_addresses_checks_what_it_is_given(features):
    """The torch path's entry point (gather_raw: indices and output by
    address) reads what the DLPack one reads and refuses what it cannot
    check otherwise: index widths, null addresses, sizes, devices."""
    torch = pytest.importorskip("torch")
    path, data = features
    with warpstore.open(path, torch.float32, (-1, 100), **SMALL) as a:
        impl = a._impl
        for idx in (torch.tensor([7, 19999, 0, -1]), torch.tensor([5, 3], dtype=torch.int32)):
            out = torch.zeros((len(idx), 100), dtype=torch.float32)
            assert impl.gather_raw(idx.data_ptr(), idx.element_size(), len(idx), -1,
                                   out.data_ptr(), out.numel() * 4) == -1
            assert torch.equal(out, torch.from_numpy(data[idx.numpy()]))
        idx = torch.tensor([1, 20000, 2])
        out = torch.zeros((3, 100), dtype=torch.float32)
        assert impl.gather_raw(idx.data_ptr(), 8, 3, -1, out.data_ptr(), out.numel() * 4) == 1
        with pytest.raises(TypeError, match="int32 or int64"):
            impl.gather_raw(idx.data_ptr(), 2, 3, -1, out.data_ptr(), out.numel() * 4)
        with pytest.raises(ValueError, match="null address"):
            impl.gather_raw(0, 8, 3, -1, out.data_ptr(), out.numel() * 4)
        with pytest.raises(ValueError, match="output holds 1196 bytes"):
            impl.gather_raw(idx.data_ptr(), 8, 3, -1, out.data_ptr(), out.numel() * 4 - 4)
        with pytest.raises(ValueError, match="device must be -1"):
            impl.gather_raw(idx.data_ptr(), 8, 3, -2, out.data_ptr(), out.numel() * 4)
        assert impl.gather_raw(0, 8, 0, -1, 0, 0) == -1  # nothing to gather


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_torch_fast_path_matches_the_general_one(features, device):
    """1-D contiguous int64/int32 tensors take Array.gather's shortest way;
    everything else the general one: the same rows, shapes, devices and
    errors either way."""
    torch = pytest.importorskip("torch")
    from warpstore import _array

    path, data = features
    with warpstore.open(path, torch.float32, (-1, 100), **SMALL) as a:
        base = torch.tensor([7, 19999, 0, -1, 3, 5, 8, 13], device=device)
        a.gather(base)  # the first torch gather sets the fast path up
        assert _array._TORCH_TENSOR[0] is torch.Tensor
        cases = [base, base.to(torch.int32), base[::2], base.reshape(2, 4), base.to(torch.int16),
                 base[:0]]
        for idx in cases:
            fast = (idx.dim() == 1 and idx.is_contiguous() and
                    idx.dtype in (torch.int64, torch.int32))
            assert (a._gather_torch_fast(idx) is not None) == fast
            got = a.gather(idx)
            want = torch.from_numpy(data[idx.cpu().numpy().astype(np.int64)])
            assert got.device == idx.device and got.shape == tuple(idx.shape) + (100,)
            assert torch.equal(got.cpu(), want)
        for idx in (torch.tensor([1, 2, 20000], device=device),
                    torch.tensor([1, -20001, 2], dtype=torch.int32, device=device)):
            with pytest.raises(IndexError, match=r"\(at position"):
                a.gather(idx)


def test_torch_bfloat16(tmp_path):
    torch = pytest.importorskip("torch")
    t = torch.randn(4000, 64).to(torch.bfloat16)
    path = write(tmp_path / "b.bin", t.view(torch.int16).numpy())
    with warpstore.open(path, torch.bfloat16, (4000, 64), **SMALL) as a:
        idx = torch.tensor([3999, 0, 17])
        assert torch.equal(a[idx], t[idx])


def test_the_default_controller_follows_the_file(features, monkeypatch):
    """controller="auto": the memory controller for a small read-only file
    in the page cache (mapped on a GPU, copied on the CPU target), the host
    controller for one over WARPSTORE_MAPPED_MAX_BYTES; the same rows."""
    path, data = features
    idx = np.random.default_rng(3).integers(0, len(data), 5000)
    with warpstore.open(path, np.float32, (-1, 100), **SMALL) as a:
        got = a.gather(idx)
        got = got.cpu().numpy() if hasattr(got, "cpu") else np.asarray(got)
        np.testing.assert_array_equal(got, data[idx])
        s = a.stats()
        assert s["controller"] == "memory" and s["mapped"] == (a.device != "cpu")
    monkeypatch.setenv("WARPSTORE_MAPPED_MAX_BYTES", str(data.nbytes - 1))
    with warpstore.open(path, np.float32, (-1, 100), **SMALL) as a:
        assert a.stats()["controller"] == "host" and not a.stats()["mapped"]


def test_a_file_shrunk_under_the_default_controller_is_an_error(tmp_path):
    """The memory controller (auto's pick for a small cached file) keeps the
    pages it had; once the file shrinks, every call raises OSError naming
    the file and saying it shrank, instead of serving them."""
    data = np.arange(64 * 1024, dtype=np.float32)
    path = write(tmp_path / "shrinks.f32", data)
    with warpstore.open(path, np.float32, **SMALL) as a:
        assert a.stats()["controller"] == "memory"
        np.testing.assert_array_equal(np.asarray(a.gather(np.array([3, 60000]))), data[[3, 60000]])
        os.truncate(path, 4096)
        with pytest.raises(OSError) as e:
            a.gather(np.array([3]))
        assert path in str(e.value) and "shrank" in str(e.value)
