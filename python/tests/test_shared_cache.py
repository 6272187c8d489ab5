"""warpstore.Cache: one cache several arrays share. Every read is checked
against the file's bytes; arrays open and close, are freed unclosed, and the
cache is cleared while other threads gather."""
import pickle
import threading

import numpy as np
import pytest

import warpstore
from conftest import SMALL, write


@pytest.fixture
def two_files(tmp_path):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((6000, 64)).astype(np.float32)
    b = rng.integers(0, 2**62, size=50000, dtype=np.int64)
    return (write(tmp_path / "a.f32", a), a), (write(tmp_path / "b.i64", b), b)


def test_arrays_share_one_cache(two_files, controller):
    (pa, a), (pb, b) = two_files
    c = warpstore.Cache("1MiB", line_size="4KiB", backend="cpu")
    assert c.size == 1 << 20 and c.line_size == 4096 and c.arrays == 0
    with warpstore.open(pa, "float32", (-1, 64), cache=c, controller=controller, threads=2,
                        backend="cpu") as x, \
         warpstore.open(pb, "int64", cache=c, controller=controller, threads=2,
                        backend="cpu") as y:
        assert c.arrays == 2
        assert x.stats()["cache_bytes"] == c.size and x.stats()["line_size"] == 4096
        rng = np.random.default_rng(1)
        for _ in range(5):
            i = rng.integers(0, len(a), 700)
            j = rng.integers(0, len(b), 900)
            np.testing.assert_array_equal(x[i], a[i])
            np.testing.assert_array_equal(y[j], b[j])
        s = c.stats()
        assert s["hits"] + s["misses"] > 0
        assert s["misses"] == x.stats()["misses"]  # one cache, one count
        y.close()
        assert c.arrays == 1
        np.testing.assert_array_equal(x[np.arange(0, len(a), 7)], a[::7])
    assert c.arrays == 0


def test_line_size_must_match(two_files):
    (pa, _), _ = two_files
    c = warpstore.Cache("1MiB", line_size=4096, backend="cpu")
    with pytest.raises(ValueError, match="line_size 8192 differs"):
        warpstore.open(pa, "float32", (-1, 64), cache=c, line_size=8192, backend="cpu")
    with warpstore.open(pa, "float32", (-1, 64), cache=c, line_size=4096, backend="cpu") as x:
        assert x.stats()["line_size"] == 4096


def test_more_arrays_over_time_than_source_ids(two_files):
    """1023 arrays at once is the limit, not 1023 ever: a closed array's id
    (and one freed without close) goes to the next, whose reads never see
    the lines of the array that had it (the files alternate)."""
    (pa, a), (pb, b) = two_files
    a_words = a.view(np.int64).reshape(-1)
    c = warpstore.Cache("256KiB", line_size=4096, backend="cpu")
    keep = warpstore.open(pb, "int64", cache=c, threads=1, backend="cpu")
    rng = np.random.default_rng(3)
    for k in range(1030):
        path, ref = (pa, a_words) if k % 2 else (pb, b)
        x = warpstore.open(path, "int64", (len(ref),), cache=c, threads=1, backend="cpu")
        i = rng.integers(0, len(ref), 40)
        np.testing.assert_array_equal(x[i], ref[i])
        if k % 3 == 0:
            del x  # freed unclosed (no cycle holds it): retired at the next open
        else:
            x.close()
    assert c.arrays == 1
    np.testing.assert_array_equal(keep[np.arange(0, len(b), 13)], b[::13])
    keep.close()


def test_clear_and_close_while_others_gather(two_files, controller):
    (pa, a), (pb, b) = two_files
    c = warpstore.Cache("512KiB", line_size=4096, backend="cpu")
    x = warpstore.open(pa, "float32", (-1, 64), cache=c, controller=controller, threads=2,
                       backend="cpu")
    y = warpstore.open(pb, "int64", cache=c, controller=controller, threads=2, backend="cpu")
    wrong, errors = [], []
    stop = threading.Event()

    def reader(arr, ref, seed):
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                i = rng.integers(0, len(ref), 300)
                if not np.array_equal(arr[i], ref[i]):
                    wrong.append(seed)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def churn():
        try:
            for k in range(20):
                z = warpstore.open(pb, "int64", cache=c, controller=controller, threads=1,
                                   backend="cpu")
                j = np.arange(k, len(b), 97)
                if not np.array_equal(z[j], b[j]):
                    wrong.append("churn")
                z.close()
                c.clear()
                y.clear_cache()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(x, a, 1)),
               threading.Thread(target=reader, args=(y, b, 2)),
               threading.Thread(target=reader, args=(x, a, 3))]
    for t in threads:
        t.start()
    churn_thread = threading.Thread(target=churn)
    churn_thread.start()
    churn_thread.join(timeout=120)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not churn_thread.is_alive() and not any(t.is_alive() for t in threads), "a call hung"
    assert not errors, errors
    assert not wrong, wrong
    x.close()
    y.close()


def test_pickled_arrays_share_a_new_cache(two_files):
    (pa, a), (pb, b) = two_files
    c = warpstore.Cache("1MiB", line_size=4096, backend="cpu")
    x = warpstore.open(pa, "float32", (-1, 64), cache=c, backend="cpu")
    y = warpstore.open(pb, "int64", cache=c, backend="cpu")
    x2, y2 = pickle.loads(pickle.dumps([x, y]))
    c2 = x2._settings["cache"]
    assert isinstance(c2, warpstore.Cache) and c2 is y2._settings["cache"] and c2 is not c
    assert c2.arrays == 2 and c2.size == c.size and c2.line_size == c.line_size
    np.testing.assert_array_equal(x2[[0, 5, 5999]], a[[0, 5, 5999]])
    np.testing.assert_array_equal(y2[[1, 49999]], b[[1, 49999]])
    for arr in (x, y, x2, y2):
        arr.close()


def test_bad_cache_arguments():
    with pytest.raises(ValueError):
        warpstore.Cache("0", backend="cpu")
    with pytest.raises(ValueError):
        warpstore.Cache("1MiB", ways=0, backend="cpu")
    with pytest.raises(ValueError):
        warpstore.Cache("1MiB", line_size=1000, backend="cpu")
    assert "warpstore.Cache(" in repr(warpstore.Cache("1MiB", backend="cpu"))


def test_small_settings_still_apply(features):
    path, data = features
    c = warpstore.Cache(SMALL["cache"], backend="cpu")
    with warpstore.open(path, "float32", (-1, 100), cache=c, threads=SMALL["threads"],
                        backend="cpu") as x:
        i = np.arange(0, len(data), 11)
        np.testing.assert_array_equal(x[i], data[i])
