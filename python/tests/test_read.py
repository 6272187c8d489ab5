"""Array.read (and contiguous slices): bulk reads of a row range, on the CPU target
(and, marked gpu, into CUDA memory)."""
import os
import signal
import threading

import numpy as np
import pytest

import warpstore
from conftest import SMALL, write


@pytest.fixture
def rows(tmp_path):
    """[5000, 37] float32 (740 000 bytes: rows not aligned to anything) after a 1 KiB header."""
    data = np.random.default_rng(3).standard_normal((5000, 37)).astype(np.float32)
    return write(tmp_path / "rows.f32", data, offset=1024), data


def host(x):
    """A result as NumPy: read() gives a CUDA tensor on the GPU target."""
    return x.cpu().numpy() if type(x).__module__.startswith("torch") else x


def eq(got, want):
    np.testing.assert_array_equal(host(got), want)


def open_rows(path, **kw):
    return warpstore.open(path, np.float32, (-1, 37), offset=1024, **{**SMALL, **kw})


RANGES = [(None, None), (0, 1), (4999, 5000), (1, 4999), (123, 4567), (-10, None), (None, -4990),
          (-5000, 5000), (2500, 2500), (0, 0), (5000, 5000)]


@pytest.mark.parametrize("direct", ["off", "on"])
def test_read_matches_numpy_slicing(rows, controller, direct):
    path, data = rows
    try:
        a = open_rows(path, controller=controller, direct=direct)
    except OSError:
        pytest.skip("no O_DIRECT here")
    with a:
        for start, stop in RANGES:
            got = a.read(start, stop)
            if a.device == "cpu":
                assert isinstance(got, np.ndarray) and got.dtype == np.float32
            else:  # onto the array's GPU
                assert str(got.device) == a.device and str(got.dtype) == "torch.float32"
            eq(got, data[start:stop])
        eq(a.read(), data)
        eq(a.read(stop=7), data[:7])
        eq(a.read(np.int64(3), np.int32(9)), data[3:9])
        assert a.stats()["misses"] == 0  # the cache was not used


def test_contiguous_slices_are_bulk_reads_and_others_gather(rows):
    path, data = rows
    with open_rows(path) as a:
        for key in (slice(None), slice(10, 20), slice(-3, None), slice(4000, 10**9),
                    slice(30, 10), slice(None, None, 1)):
            eq(a[key], data[key])
        assert a.stats()["misses"] == 0
        for key in (slice(None, None, 7), slice(100, 10, -3)):
            eq(a[key], data[key])
        assert a.stats()["misses"] > 0


def test_bulk_stats_count_each_read(rows):
    # The process's bulk reader says what each read did (for benchmarks:
    # where a slow read's time went).
    from warpstore._backend import backend

    path, data = rows
    ext = backend()
    with open_rows(path) as a:
        before = ext.bulk_stats()
        eq(a.read(123, 4567), data[123:4567])
        after = ext.bulk_stats()
    d = {k: after[k] - before[k] for k in after}
    assert d["calls"] == 1 and d["bytes"] == (4567 - 123) * 37 * 4, d
    # The caller and its helpers take chunks in turn: on a loaded machine the
    # helpers may take every one before the caller gets to its first.
    assert d["chunks"] > 0 and d["caller_chunks"] <= d["chunks"], d
    assert d["lanes"] >= 1 and d["helpers"] == d["lanes"] - 1, d
    assert d["read_ns"] > 0 and d["call_ns"] > 0, d
    assert (d["wake_ns"] > 0) == (d["helpers"] > 0), d


def test_one_dimensional_and_byte_swapped(tmp_path):
    data = (np.arange(100_003) * 7919).astype(">i8")
    path = write(tmp_path / "be.i8", data)
    with warpstore.open(path, ">i8", **SMALL) as a:
        got = a.read(17, 99_999)
        assert host(got).dtype == np.int64 and host(got).dtype.isnative
        eq(got, data[17:99_999].astype(np.int64))
        eq(a[5:10], data[5:10].astype(np.int64))
    c = (np.arange(1000) * (1 + 2j)).astype(">c8")
    path = write(tmp_path / "be.c8", c)
    with warpstore.open(path, ">c8", **SMALL) as a:
        eq(a.read(1, 999), c[1:999].astype(np.complex64))


def test_bad_ranges(rows):
    path, _ = rows
    with open_rows(path) as a:
        for start, stop in ((5001, None), (None, 5001), (-5001, None), (0, 10**30)):
            with pytest.raises(IndexError, match="out of range"):
                a.read(start, stop)
        with pytest.raises(ValueError, match="after stop"):
            a.read(10, 5)
        with pytest.raises(ValueError, match="after stop"):
            a.read(-1, 10)
        for bad in (1.5, "3", True, [1]):
            with pytest.raises(TypeError, match="integer"):
                a.read(bad, None)


def test_out_is_checked_and_filled(rows):
    path, data = rows
    with open_rows(path) as a:
        out = np.empty((100, 37), np.float32)
        assert a.read(200, 300, out=out) is out
        eq(out, data[200:300])
        with pytest.raises(ValueError, match="shape"):
            a.read(200, 301, out=out)
        with pytest.raises(TypeError, match="dtype"):
            a.read(200, 300, out=np.empty((100, 37), np.float64))
        with pytest.raises(TypeError, match="byte order"):
            a.read(200, 300, out=np.empty((100, 37), ">f4"))
        with pytest.raises(ValueError, match="contiguous"):
            a.read(200, 300, out=np.empty((37, 100), np.float32).T)
        ro = np.empty((100, 37), np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            a.read(200, 300, out=ro)
        with pytest.raises(TypeError, match="NumPy array or a torch tensor"):
            a.read(200, 300, out=[0] * 3700)
        eq(out, data[200:300])  # refused calls wrote nothing


def test_torch_out_on_the_cpu(rows):
    torch = pytest.importorskip("torch")
    path, data = rows
    with open_rows(path) as a:
        out = torch.empty((50, 37), dtype=torch.float32)
        assert a.read(-50, None, out=out) is out
        eq(out.numpy(), data[-50:])
        with pytest.raises(TypeError, match="dtype"):
            a.read(-50, None, out=torch.empty((50, 37), dtype=torch.float64))
        with pytest.raises(ValueError, match="contiguous"):
            a.read(-50, None, out=torch.empty((37, 50), dtype=torch.float32).t())
        if a.device == "cpu":
            with pytest.raises(ValueError, match="meta"):
                a.read(-50, None, out=torch.empty((50, 37), dtype=torch.float32, device="meta"))


def test_bfloat16_comes_back_as_a_torch_tensor(tmp_path):
    torch = pytest.importorskip("torch")
    t = torch.randn(999, 5).to(torch.bfloat16)
    path = write(tmp_path / "bf16", t.view(torch.int16).numpy())
    with warpstore.open(path, "bfloat16", (-1, 5), **SMALL) as a:
        got = a.read(3, 900)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
        assert torch.equal(got.cpu(), t[3:900])
        with pytest.raises(TypeError, match="bfloat16"):
            a.read(0, 1, out=np.empty((1, 5), np.float32))


def test_a_file_that_shrank_is_an_oserror_with_path_and_row(rows):
    path, data = rows
    # The host controller: it fails only what lies past the new end (the
    # memory controller, auto's pick for this cached file, fails every call
    # once the file shrank: test_gather.py).
    with open_rows(path, controller="host") as a:
        os.truncate(path, 1024 + 3000 * 37 * 4 + 5)
        with pytest.raises(OSError) as info:
            a.read(100, 4000)
        e = info.value
        assert e.filename == path and "shrank" in str(e) and "now" in str(e)
        end = 1024 + 3000 * 148 + 5
        assert e.offset is not None and end - 4096 <= e.offset < 1024 + 4000 * 148
        assert e.row == (e.offset - 1024) // 148
        eq(a.read(0, 3000), data[:3000])


def test_reads_from_threads_and_close_waits_for_them(rows):
    path, data = rows
    for trial in range(8):
        a = open_rows(path)
        outcomes = []
        started = threading.Barrier(4)

        def reader(seed):
            rng = np.random.default_rng(seed)
            started.wait()
            while True:
                lo = int(rng.integers(0, 5000))
                hi = int(rng.integers(lo, 5001))
                try:
                    got = a.read(lo, hi)
                except ValueError as e:
                    assert "closed" in str(e)
                    outcomes.append("closed")
                    return
                eq(got, data[lo:hi])

        threads = [threading.Thread(target=reader, args=(trial * 10 + k,)) for k in range(3)]
        for t in threads:
            t.start()
        started.wait()
        threading.Event().wait(0.003 * trial)
        a.close()
        for t in threads:
            t.join()
        assert outcomes == ["closed"] * 3
        with pytest.raises(ValueError, match="closed"):
            a.read(0, 1)
        with pytest.raises(ValueError, match="closed"):
            a.read(0, 0)


class Interrupted(Exception):
    pass


def test_a_signal_handler_that_raises_stops_a_read(tmp_path):
    n = 8 << 20  # 64 MiB of float64: a read takes a while on any machine
    data = np.arange(n, dtype=np.float64)
    path = write(tmp_path / "big.f64", data)

    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    inside = 0
    try:
        with warpstore.open(path, np.float64, **SMALL) as a:
            for delay in (0.001, 0.003, 0.005, 0.002) * 5:
                signal.setitimer(signal.ITIMER_REAL, delay)  # one shot
                try:
                    for _ in range(100):
                        a.read()
                except Interrupted as e:
                    # Raised from inside the extension's read (its poll ran
                    # the handler), not between two reads.
                    tb, frames = e.__traceback__, []
                    while tb is not None:
                        frames.append(tb.tb_frame.f_code.co_name)
                        tb = tb.tb_next
                    inside += frames[-2:] == ["_bulk", "handler"]
                signal.setitimer(signal.ITIMER_REAL, 0)
                if inside >= 2:
                    break
            eq(a.read(n - 1000, None), data[-1000:])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert inside >= 2, "no interrupt reached a read in progress"


@pytest.mark.gpu
def test_read_into_cuda_memory(rows):
    torch = pytest.importorskip("torch")
    path, data = rows
    with open_rows(path, backend="cuda") as a:
        got = a.read(7, 4321)
        assert got.is_cuda and got.device == torch.device(a.device)
        eq(got.cpu().numpy(), data[7:4321])
        out = torch.full((100, 37), -1.0, device=a.device)
        stream = torch.cuda.Stream(device=a.device)
        with torch.cuda.stream(stream):
            out.fill_(3.0)  # queued before the read: the read must land after it
            assert a.read(-100, None, out=out) is out
        eq(out.cpu().numpy(), data[-100:])
        assert isinstance(a[10:20], np.ndarray)  # slices stay NumPy
        eq(a[10:20], data[10:20])
        host = torch.empty((10, 37), dtype=torch.float32).pin_memory()
        a.read(0, 10, out=host)
        eq(host.numpy(), data[:10])


@pytest.mark.parametrize("read_ahead", [None, 0])
def test_dense_misses_read_ahead_sparse_ones_do_not(tmp_path, monkeypatch, read_ahead):
    """O_DIRECT, 512 B rows: a gather of a contiguous range in random order
    reads whole extents (read_ahead, 128 KiB by default) and serves most rows
    from them; a few random rows over the 64 MiB file seldom read one. Each row
    checked against the file; read_ahead=0 reads every row alone."""
    data = np.random.default_rng(11).integers(0, 255, (131072, 512), dtype=np.uint8)
    path = write(tmp_path / "rows.u8", data)
    if read_ahead is not None:  # a tuning setting: the environment only
        monkeypatch.setenv("WARPSTORE_READ_AHEAD", str(read_ahead))
    try:
        a = warpstore.open(path, np.uint8, (-1, 512), cache="1MiB", threads=2,
                           controller="host", direct="on", backend="cpu")
    except OSError:
        pytest.skip("no O_DIRECT here")
    with a:
        assert a.stats()["direct"] is True
        dense = np.random.default_rng(1).permutation(8192) + 20000  # 4 MiB, 32 extents
        np.testing.assert_array_equal(a.gather(dense), data[dense])
        s = a.stats()
        sparse = np.random.default_rng(2).choice(131072, 300, replace=False)
        np.testing.assert_array_equal(a.gather(sparse), data[sparse])
        t = a.stats()
    if read_ahead == 0:
        assert s["read_ahead_loads"] == 0 and t["read_ahead_lines"] == 0, t
        assert t["read_ahead_trigger"] == 0, t  # no read-ahead
        return
    assert s["read_ahead_trigger"] == 3, s  # dense extents pay: the lowest trigger
    assert 16 <= s["read_ahead_loads"] <= 64, s  # 32 extents, each at most twice
    assert s["read_ahead_lines"] >= 8192 // 2, s  # most rows from the extents
    # 300 rows over 512 extents: about 11 extents get three of them.
    assert t["read_ahead_loads"] - s["read_ahead_loads"] <= 40, t


@pytest.mark.parametrize("shared", [False, True])
def test_clear_cache_forgets_read_ahead(tmp_path, shared):
    """A file rewritten behind an open array's back, then clear_cache() (or a
    shared Cache's clear()): the next gather reads the new bytes, none from
    read-ahead's extents of the old ones (they would be served without a
    word: the cache is clear, the extents are not)."""
    old = np.random.default_rng(12).integers(0, 255, (16384, 512), dtype=np.uint8)
    new = 255 - old
    path = write(tmp_path / "rows.u8", old)
    kw = dict(cache=warpstore.Cache("1MiB", line_size=512, backend="cpu")) if shared else \
        dict(cache="1MiB")
    try:
        a = warpstore.open(path, np.uint8, (-1, 512), threads=2, controller="host", direct="on",
                           backend="cpu", **kw)
    except OSError:
        pytest.skip("no O_DIRECT here")
    with a:
        dense = np.random.default_rng(3).permutation(2048) + 1000  # 1 MiB, 8 extents
        np.testing.assert_array_equal(a.gather(dense), old[dense])
        assert a.stats()["read_ahead_loads"] > 0
        with open(path, "r+b") as f:
            f.write(new.tobytes())
        (kw["cache"].clear if shared else a.clear_cache)()
        np.testing.assert_array_equal(a.gather(dense), new[dense])
