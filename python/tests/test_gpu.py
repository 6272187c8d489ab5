"""CUDA tensors: results land on the index tensor's device and stream (run where a GPU is)."""
import numpy as np
import pytest

import warpstore
from conftest import write

pytestmark = pytest.mark.gpu


@pytest.fixture
def big(tmp_path):
    """64 MiB of rows of 4 KiB (1024 float32), 16x a 4 MiB cache."""
    data = np.random.default_rng(11).standard_normal((16384, 1024)).astype(np.float32)
    return write(tmp_path / "big.f32", data), data


def test_cuda_indices_give_cuda_results(big, controller):
    import torch

    path, data = big
    idx = torch.randint(0, 16384, (100000,), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    with warpstore.open(path, torch.float32, (-1, 1024), cache="4MiB", controller=controller) as a:
        assert a.device == "cuda:0"
        got = a[idx]
        assert got.is_cuda and got.shape == (100000, 1024)
        assert torch.equal(got.cpu(), torch.from_numpy(data[idx.cpu().numpy()]))
        s = a.stats()
        assert s["evictions"] > 0 and s["errors"] == 0


def test_elements_and_odd_rows_on_the_gpu(tmp_path, controller):
    import torch

    rng = np.random.default_rng(5)
    for dtype, row in (("float32", 1), ("int8", 5), ("float64", 700), ("float16", 3)):
        data = (rng.standard_normal((6000, row)) * 50).astype(dtype)
        path = write(tmp_path / f"{dtype}{row}.bin", data)
        idx = torch.from_numpy(rng.integers(0, 6000, 20000)).cuda()
        with warpstore.open(path, dtype, (6000, row), cache="1MiB", controller=controller) as a:
            got = a[idx].cpu().numpy()
            np.testing.assert_array_equal(got, data[idx.cpu().numpy()])


def test_results_follow_the_current_stream(big):
    import torch

    path, data = big
    s = torch.cuda.Stream()
    with warpstore.open(path, "float32", (-1, 1024), cache="4MiB") as a, torch.cuda.stream(s):
        idx = torch.arange(0, 16384, 7, device="cuda")  # made on s
        got = a[idx] * 2  # gathered on s, used on s
        s.synchronize()
        assert torch.equal(got.cpu(), torch.from_numpy(data[::7] * 2))


def test_cpu_indices_on_the_gpu_build(big):
    import torch

    path, data = big
    with warpstore.open(path, "float32", (-1, 1024), cache="4MiB") as a:
        got = a[torch.tensor([5, 16383, 0])]
        assert got.device.type == "cpu"
        assert torch.equal(got, torch.from_numpy(data[[5, 16383, 0]]))
        np.testing.assert_array_equal(a[10:20], data[10:20])


def test_out_of_range_on_the_gpu(big):
    import torch

    path, _ = big
    with warpstore.open(path, "float32", (-1, 1024), cache="4MiB") as a:
        idx = torch.arange(0, 100000, device="cuda")
        with pytest.raises(IndexError, match=r"index 16384 \(at position 16384\)"):
            a[idx]
        assert a[torch.tensor([1], device="cuda")].is_cuda  # still usable


@pytest.mark.parametrize("share,spread", [(1, "0"), (4, "1"), (64, "1")])
def test_gathers_confined_to_a_share_of_the_gpu(big, monkeypatch, share, spread):
    # gather_sm_share runs a gather on 1/N of the multiprocessors (one wide
    # block each); queue_spread spreads their warps over the queue pairs.
    # Rows and elements, async and not, all right.
    import torch

    path, data = big
    monkeypatch.setenv("WARPSTORE_GATHER_SM_SHARE", str(share))
    monkeypatch.setenv("WARPSTORE_QUEUE_SPREAD", spread)
    idx = torch.randint(0, 16384, (50000,), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(share))
    want = torch.from_numpy(data[idx.cpu().numpy()])
    with warpstore.open(path, torch.float32, (-1, 1024), cache="4MiB") as a:
        assert torch.equal(a[idx].cpu(), want)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            p = a.gather_async(idx)
        assert torch.equal(p.wait().cpu(), want)
        assert a.stats()["errors"] == 0
    flat = data.reshape(-1)
    eidx = torch.randint(0, flat.size, (200000,), device="cuda")
    with warpstore.open(path, torch.float32, cache="4MiB") as a:
        assert torch.equal(a[eidx].cpu(), torch.from_numpy(flat[eidx.cpu().numpy()]))


@pytest.mark.parametrize("dtype,row,n", [("float32", 32, 40000), ("int8", 512, 40000),
                                         ("int32", 1, 4000000), ("float64", 300, 20000)])
def test_large_gathers_that_miss_read_in_file_order(tmp_path, monkeypatch, dtype, row, n):
    # Over the memory controller a gather of gather_sort_rows positions or
    # more sorts its indices and reads its rows in file order while the
    # array's gathers miss; every row still lands at its own position
    # (duplicates, negative indices, int32 and int64 indices), and the first
    # out-of-range position is the one reported. Once the cache holds the
    # working set, gathers go in index order again.
    import torch

    monkeypatch.setenv("WARPSTORE_GATHER_SORT_ROWS", "4096")
    monkeypatch.setenv("WARPSTORE_GATHER_SORT_BYTES", "1MiB")
    rng = np.random.default_rng(row)
    data = (rng.standard_normal((n, row)) * 100).astype(dtype)
    path = write(tmp_path / f"sorted-{dtype}-{row}.bin", data)
    flat_shape = (n,) if row == 1 else (n, row)
    want_rows = data.reshape(flat_shape)
    with warpstore.open(path, dtype, flat_shape, cache="1MiB", controller="memory") as a:
        idx = rng.integers(-n, n, 30000)
        idx[:50] = idx[50:100]  # duplicates
        for itype in (torch.int64, torch.int32):
            t = torch.from_numpy(idx).to(itype).cuda()
            before = a.stats()["sorted_gathers"]
            got = a[t]
            assert a.stats()["sorted_gathers"] == before + 1
            np.testing.assert_array_equal(got.cpu().numpy(), want_rows[idx])
        p = a.gather_async(torch.from_numpy(idx[::-1].copy()).cuda())
        np.testing.assert_array_equal(p.wait().cpu().numpy(), want_rows[idx[::-1]])
        bad = torch.from_numpy(rng.integers(0, n, 8192)).cuda()
        bad[5000], bad[7000] = n + 3, -n - 1
        with pytest.raises(IndexError, match=rf"index {n + 3} \(at position 5000\)"):
            a[bad]
        # The working set now fits the cache: a warm pass, then no sorting.
        ws = torch.from_numpy(rng.integers(0, 100, 10000)).cuda()
        for _ in range(3):
            a[ws]
        before = a.stats()["sorted_gathers"]
        np.testing.assert_array_equal(a[ws].cpu().numpy(), want_rows[ws.cpu().numpy()])
        assert a.stats()["sorted_gathers"] == before
        small = torch.from_numpy(rng.integers(0, n, 4095)).cuda()
        np.testing.assert_array_equal(a[small].cpu().numpy(), want_rows[small.cpu().numpy()])
        assert a.stats()["sorted_gathers"] == before  # under gather_sort_rows
        assert a.stats()["errors"] == 0
    for var, value in (("WARPSTORE_GATHER_SORT_ROWS", "0"),  # off
                       ("WARPSTORE_GATHER_SORT_BYTES", str(data.nbytes))):  # too small
        monkeypatch.setenv(var, value)
        with warpstore.open(path, dtype, flat_shape, cache="1MiB", controller="memory") as a:
            t = torch.from_numpy(idx).cuda()
            np.testing.assert_array_equal(a[t].cpu().numpy(), want_rows[idx])
            assert a.stats()["sorted_gathers"] == 0


# 128 and 256 bytes, lines of 512; and 400 (100 float32), rows that span
# two lines three times in four: each line's piece is read around alone.
@pytest.mark.parametrize("row", [32, 64, 100])
def test_gathers_that_keep_missing_read_their_misses_around_the_cache(tmp_path, monkeypatch, row):
    # Over the memory controller, once an array's gathers miss on 3 lookups
    # in 4, a miss fills its line one time in gather_miss_admit and reads
    # the row straight from host memory otherwise: every row still right,
    # read_around counts them, the cache evicts less. A working set that
    # fits gets in all the same (lines read often are admitted soon), and
    # admission then ends. 0 turns it off.
    import torch

    monkeypatch.setenv("WARPSTORE_GATHER_SORT_ROWS", "0")  # sorted gathers never admit
    rng = np.random.default_rng(row)
    n = (16 << 20) // (4 * row) // 32 * 32  # about 16 MiB of float32, whole 512 B lines
    data = rng.standard_normal((n, row)).astype(np.float32)
    path = write(tmp_path / f"admit-{row}.bin", data)
    shape = (n, row)
    want = data
    with warpstore.open(path, "float32", shape, cache="1MiB", line_size=512,
                        controller="memory") as a:
        for _ in range(6):  # working set 16x the cache
            idx = rng.integers(-n, n, 20000)
            np.testing.assert_array_equal(a[torch.from_numpy(idx).cuda()].cpu().numpy(), want[idx])
        st = a.stats()
        assert st["admitting_gathers"] >= 4, st
        assert st["read_around"] > 2 * st["misses"], st
        assert st["errors"] == 0
        # A bad index among them is still the one reported.
        bad = torch.from_numpy(rng.integers(0, n, 5000)).cuda()
        bad[3000] = n
        with pytest.raises(IndexError, match=rf"index {n} \(at position 3000\)"):
            a[bad]
        # A working set a quarter of the cache: cached in a few passes, then hits.
        ws = torch.from_numpy(rng.integers(0, (256 << 10) // (4 * row), 20000)).cuda()
        for _ in range(8):
            np.testing.assert_array_equal(a[ws].cpu().numpy(), want[ws.cpu().numpy()])
        before = a.stats()["admitting_gathers"]
        a.reset_stats()
        for _ in range(3):
            np.testing.assert_array_equal(a[ws].cpu().numpy(), want[ws.cpu().numpy()])
        st = a.stats()
        assert st["admitting_gathers"] == before, st  # admission ended
        assert st["hit_rate"] > 0.99, st
    monkeypatch.setenv("WARPSTORE_GATHER_MISS_ADMIT", "0")
    with warpstore.open(path, "float32", shape, cache="1MiB", line_size=512,
                        controller="memory") as a:
        for _ in range(4):
            idx = rng.integers(0, n, 20000)
            np.testing.assert_array_equal(a[torch.from_numpy(idx).cuda()].cpu().numpy(), want[idx])
        assert a.stats()["admitting_gathers"] == 0
    monkeypatch.delenv("WARPSTORE_GATHER_MISS_ADMIT")
    # Rows of a whole line, and 1-D gathers, never admit: a miss fills. Nor
    # after large gathers that sort (and sample the cache) on such an array.
    monkeypatch.setenv("WARPSTORE_GATHER_SORT_ROWS", "4096")
    monkeypatch.setenv("WARPSTORE_GATHER_SORT_BYTES", "1MiB")
    for other in ((n * row // 128, 128), (n * row,)):
        with warpstore.open(path, "float32", other, cache="1MiB", line_size=512,
                            controller="memory") as a:
            for size in (20000, 20000, 2000, 2000):  # sorted and sampled, then not
                idx = rng.integers(0, other[0], size)
                np.testing.assert_array_equal(a[torch.from_numpy(idx).cuda()].cpu().numpy(),
                                              data.reshape(other)[idx])
            assert a.stats()["sorted_gathers"] == 2
            assert a.stats()["admitting_gathers"] == 0


def test_the_default_reads_a_cached_file_through_its_pinned_pages(big):
    """controller="auto" (the default): a read-only file in the page cache is
    mapped and pinned, and kernels read its own pages; a writable or
    too-large one keeps the host controller."""
    import torch

    path, data = big
    idx = torch.randint(0, 16384, (50000,), device="cuda", generator=torch.Generator("cuda").manual_seed(2))
    with warpstore.open(path, torch.float32, (-1, 1024), cache="4MiB") as a:
        assert torch.equal(a[idx].cpu(), torch.from_numpy(data[idx.cpu().numpy()]))
        s = a.stats()
        assert (s["controller"], s["mapped"]) == ("memory", True)
    with warpstore.open(path, torch.float32, (-1, 1024), cache="4MiB", controller="host") as a:
        assert torch.equal(a[idx].cpu(), torch.from_numpy(data[idx.cpu().numpy()]))
        assert (a.stats()["controller"], a.stats()["mapped"]) == ("host", False)


def _engine_thread_seconds():
    """CPU seconds the I/O engine's threads (warpstore-io*) have used."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if not f.read().startswith("warpstore-io"):
                    continue
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except OSError:
            continue  # a thread that ended
    return total


def test_gathers_that_hit_leave_the_service_threads_asleep(big):
    """A stream of small sync gathers that hit ends before the host
    controller's threads could help: they are not woken for it (each wake
    would keep them polling), and a gather that misses still wakes them."""
    import time

    import torch

    path, data = big
    with warpstore.open(path, torch.float32, (-1, 1024), cache="8MiB", controller="host",
                        threads=4) as a:
        hot = torch.arange(0, 1024, 3, device="cuda")
        want = torch.from_numpy(data[hot.cpu().numpy()]).cuda()
        assert torch.equal(a[hot], want)  # the lines are in the cache now
        time.sleep(0.2)  # the threads nap
        c0, t0, calls = _engine_thread_seconds(), time.perf_counter(), 0
        while time.perf_counter() - t0 < 1.0:
            got = a[hot]
            calls += 1
        used = _engine_thread_seconds() - c0
        assert torch.equal(got, want)
        assert a.stats()["hit_rate"] > 0.99
        # Woken by every call, 4 threads would poll nearly the whole second.
        assert used < 0.3, f"{calls} hit gathers kept the service threads busy for {used:.2f} s"
        cold = torch.arange(8192, 16384, 7, device="cuda")
        t0 = time.perf_counter()
        assert torch.equal(a[cold], torch.from_numpy(data[cold.cpu().numpy()]).cuda())
        assert time.perf_counter() - t0 < 2.0
