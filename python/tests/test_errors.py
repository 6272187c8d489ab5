"""Errors are loud, precise and of the Python type a user expects; nothing hangs."""
import errno
import os
import threading

import numpy as np
import pytest

import warpstore
from warpstore._files import drop_pages
from conftest import SMALL, write


def test_out_of_range_names_the_first_bad_index(features, controller):
    path, data = features
    with warpstore.open(path, "float32", (-1, 100), controller=controller, **SMALL) as a:
        idx = np.array([1, 2, 20000, 5, 99999, -20001])
        with pytest.raises(IndexError, match=r"index 20000 \(at position 2\) is out of range for 20000 rows"):
            a[idx]
        with pytest.raises(IndexError, match=r"index -20001 \(at position 0\)"):
            a[[-20001, 3]]
        with pytest.raises(IndexError, match="20000"):
            a[20000]
        # The array is still usable.
        np.testing.assert_array_equal(a[[1, 2]], data[[1, 2]])


def test_out_of_range_1d(features):
    path, _ = features
    with warpstore.open(path, "float32", **SMALL) as a:
        with pytest.raises(IndexError, match=r"index 2000000 \(at position 1\)"):
            a[np.array([0, 2_000_000], dtype=np.int32)]


def test_out_of_range_torch(features):
    torch = pytest.importorskip("torch")
    path, _ = features
    with warpstore.open(path, "float32", (-1, 100), **SMALL) as a:
        with pytest.raises(IndexError, match=r"index 123456 \(at position 3\)"):
            a[torch.tensor([0, 1, 2, 123456])]


@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), np.array([True, False])])
def test_non_integer_indices_are_type_errors(features, bad):
    path, _ = features
    with warpstore.open(path, "float32", (-1, 100), **SMALL) as a:
        with pytest.raises(TypeError, match="integers"):
            a[bad]
        with pytest.raises(TypeError):
            a[1, 2]


def test_bad_dtype_shape_offset_and_mode(features, tmp_path):
    path, _ = features
    with pytest.raises(TypeError, match="dtype"):
        warpstore.open(path, "object")
    with pytest.raises(TypeError, match="dtype"):
        warpstore.open(path, "not-a-dtype")
    with pytest.raises(ValueError, match="needs 8000400 bytes"):
        warpstore.open(path, "float32", (20001, 100))
    with pytest.raises(ValueError, match="shape"):
        warpstore.open(path, "float32", (100, -1))
    with pytest.raises(ValueError, match="multiple of the 512"):
        warpstore.open(path, "float32", (100, 100), offset=4)
    with pytest.raises(ValueError, match="read-only"):
        warpstore.open(path, "float32", mode="w")
    with pytest.raises(ValueError, match="controller"):
        warpstore.open(path, "float32", controller="nvme")
    with pytest.raises(ValueError, match="line_size"):
        warpstore.open(path, "float32", line_size=1000)
    with pytest.raises(FileNotFoundError):
        warpstore.open(tmp_path / "missing.bin", "float32")


def test_closed_array(features):
    path, _ = features
    a = warpstore.open(path, "float32", **SMALL)
    a.close()
    assert a.closed
    with pytest.raises(ValueError, match="closed"):
        a[[0]]


def test_read_failure_is_an_os_error_with_path_and_offset(tmp_path):
    data = np.random.default_rng(0).standard_normal((4096, 256)).astype(np.float32)
    path = write(tmp_path / "shrinks.f32", data)
    with warpstore.open(path, "float32", (4096, 256), cache="256KiB", threads=2,
                        controller="host") as a:
        np.testing.assert_array_equal(a[[0]], data[[0]])
        os.truncate(path, 4096)  # the file shrinks under the array
        with pytest.raises(OSError) as e:
            a[[4000]]
        assert e.value.filename == path
        # The shrink is named; the read that failed is the cause.
        assert "is now 4096 bytes, the array needs 4194304" in str(e.value)
        assert "byte " + str(4000 * 1024) in str(e.value.__cause__)


# -- fields: every error says what it knows as attributes, not only in words --

def test_out_of_range_index_has_fields(features):
    path, _ = features
    with warpstore.open(path, "float32", (20000, 100), **SMALL) as a:
        with pytest.raises(IndexError) as e:
            a[np.array([0, 5, 20003])]
        assert (e.value.kind, e.value.path, e.value.index, e.value.row, e.value.position) == (
            "index_out_of_range", path, 20003, 20003, 2)
        assert e.value.lba is None and e.value.offset is None and e.value.status is None
        with pytest.raises(IndexError) as e:
            a[-20001]
        assert (e.value.index, e.value.position, e.value.path) == (-20001, None, path)


def test_read_failure_has_path_row_lba_offset_and_status(tmp_path):
    data = np.random.default_rng(1).standard_normal((4096, 256)).astype(np.float32)
    path = write(tmp_path / "shrinks.f32", data)
    with warpstore.open(path, "float32", (4096, 256), cache="256KiB", threads=2,
                        controller="host", line_size=4096) as a:
        a[[0]]
        os.truncate(path, 4096)
        with pytest.raises(OSError) as e:
            a[[1, 4000]]
    for err in (e.value, e.value.__cause__):  # the shrink, and the read that failed
        assert err.kind == "io" and err.path == path and err.filename == path
        assert err.errno == errno.EIO
        assert err.row == 4000
        assert err.index is not None  # the element (word of the cache) the read needed
        assert err.offset == 4000 * 1024 and err.lba == err.offset // 512
        assert err.status & 0x7FF != 0  # a failure; the message names the same one
        sct, sc = (err.status >> 8) & 0x7, err.status & 0xFF
        assert f"(sct {sct:#x}, sc {sc:#04x})" in str(e.value.__cause__)
        assert err.count >= 1 and err.position is None


def test_closed_array_error_names_the_path(features):
    path, _ = features
    a = warpstore.open(path, "float32", (20000, 100), **SMALL)
    a.close()
    with pytest.raises(ValueError) as e:
        a[[0]]
    assert e.value.kind == "invalid_argument" and e.value.path == path
    assert e.value.lba is None and e.value.status is None


def test_bad_setting_error_from_the_extension_has_a_kind():
    with pytest.raises(ValueError, match="deadline of 0 ms") as e:
        warpstore.backend().validate_settings(1 << 20, 4096, "host", 2, 0, "auto")
    assert e.value.kind == "invalid_argument" and e.value.path is None and e.value.count == 1


def _open_with_1ms_deadline(path, **kw):
    kw = dict(line_size=512, controller="host", threads=2, deadline=0.001, **kw)
    try:
        return warpstore.open(path, "uint32", direct="on", **kw)
    except (OSError, ValueError):  # no O_DIRECT here: cold buffered reads
        return warpstore.open(path, "uint32", direct="off", **kw)


def _provoke_deadline(a, path):
    """A large cold gather with a 1 ms deadline: some wait sees no progress
    for that long (a 2-core machine, reads from the disk); skips the test
    where none does."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        drop_pages(path)
        try:
            a[rng.integers(0, len(a), 20000)]
        except OSError as e:
            if e.kind == "deadline":
                return
            assert e.kind == "io" and "abort requested" in str(e), e
    pytest.skip("no read here waited past a 1 ms deadline")


def test_a_deadline_reopens_the_array_at_its_next_call(tmp_path):
    """A wait that passes its deadline fails its queue pair for good (the
    controller may still write the slot it gave up on). The array reopens its
    file at its next call: later calls read the right rows, none fails with
    "abort requested" (before, every call on the failed pair did, forever),
    and stats() counts the reopen."""
    data = np.random.default_rng(3).integers(0, 2**32, (64 << 20) // 4, dtype=np.uint32)
    path = write(tmp_path / "r.u32", data)
    a = _open_with_1ms_deadline(path, cache="16KiB")
    with a:
        _provoke_deadline(a, path)
        # Each call from a thread of its own: a CPU gather's lanes pick their
        # queue pairs by thread, and the failed pair is one of them.
        wrong, failed, gave_up = [], [], []

        def one(i):
            idx = np.array([i * 1000 + 7, len(a) - 1 - i])
            # Another deadline may come on this loaded machine (and fail that
            # call's pair under it): the next call reopens again. Before the
            # reopen, every call on the failed pair failed, forever.
            for _ in range(5):
                try:
                    wrong.append(int((a[idx] != data[idx]).sum()))
                    return
                except OSError as e:
                    failed.append(f"{e.kind}: {e}")
                    if e.kind != "deadline" and "abort requested" not in str(e):
                        return
            gave_up.append(i)

        for i in range(40):
            t = threading.Thread(target=one, args=(i,))
            t.start()
            t.join()
        assert not [f for f in failed
                    if not f.startswith("deadline") and "abort requested" not in f], failed
        assert not gave_up, failed
        assert sum(wrong) == 0 and len(wrong) == 40
        assert a.stats()["reopens"] >= 1


def test_a_reopen_that_fails_closes_the_array_and_leaves_its_cache(tmp_path):
    """The file is gone when the array reopens after a deadline: the call
    raises why, the array is closed (later calls say why), and a shared
    cache no longer lists it: clearing it and its other arrays work (it
    kept a freed array before, and clear() crashed)."""
    data = np.random.default_rng(4).integers(0, 2**32, (64 << 20) // 4, dtype=np.uint32)
    path = write(tmp_path / "r.u32", data)
    other = write(tmp_path / "o.u32", data[:4096])
    c = warpstore.Cache("64KiB", line_size=512, backend="cpu")
    a = _open_with_1ms_deadline(path, cache=c, backend="cpu")
    b = warpstore.open(other, "uint32", cache=c, threads=1, backend="cpu")
    try:
        _provoke_deadline(a, path)
        os.rename(path, path + ".gone")
        with pytest.raises(FileNotFoundError):
            a[[1]]
        assert a.closed
        with pytest.raises(ValueError, match="could not reopen after a deadline"):
            a[[1]]
        assert c.arrays == 1
        del a
        c.clear()
        np.testing.assert_array_equal(b[[0, 4095]], data[[0, 4095]])
    finally:
        b.close()


def test_a_reopen_of_a_shrunk_file_says_it_shrank(tmp_path):
    """The file shrank before the reopen after a deadline: the array
    closes, and the call says the file shrank (an OSError naming the bytes),
    not the shape check's words."""
    data = np.random.default_rng(5).integers(0, 2**32, (64 << 20) // 4, dtype=np.uint32)
    path = write(tmp_path / "r.u32", data)
    with _open_with_1ms_deadline(path, cache="16KiB") as a:
        _provoke_deadline(a, path)
        os.truncate(path, 1 << 20)
        with pytest.raises(OSError, match="the file shrank") as e:
            a[[1]]
        assert e.value.errno == errno.EIO and e.value.filename == path
        assert a.closed


def test_writable_in_the_environment_leaves_python_opens_read_only(features, monkeypatch):
    """WARPSTORE_WRITABLE=1 made Python's opens writable: the second open of
    a file then failed on the first one's write lock."""
    path, data = features
    monkeypatch.setenv("WARPSTORE_WRITABLE", "1")
    with warpstore.open(path, "float32", (-1, 100), **SMALL) as a, \
            warpstore.open(path, "float32", (-1, 100), **SMALL) as b:
        np.testing.assert_array_equal(a[[3]], data[[3]])
        np.testing.assert_array_equal(b[[4]], data[[4]])


@pytest.mark.parametrize("idx,index,position", [
    (np.array([1, 2**63, 2**64 - 1], dtype=np.uint64), 2**63, 1),
    (np.array([20000, 2**64 - 1], dtype=np.uint64), 20000, 0),
    ([20000, 2**70], 20000, 0),
    ([5, -2**70, 3], -2**70, 1),
], ids=["numpy-past-int64", "numpy-first-in-range", "list-first-in-range", "list-negative"])
def test_indices_past_int64_name_the_first_bad_one(features, idx, index, position):
    path, _ = features
    with warpstore.open(path, "float32", (-1, 100), **SMALL) as a:
        with pytest.raises(IndexError) as e:
            a[idx]
        assert (e.value.index, e.value.position) == (index, position), str(e.value)


def test_torch_uint64_past_int64_names_the_first_bad_one(features):
    torch = pytest.importorskip("torch")
    path, _ = features
    with warpstore.open(path, "float32", (-1, 100), **SMALL) as a:
        with pytest.raises(IndexError) as e:
            a[torch.tensor([3, 20000, 2**63], dtype=torch.uint64)]
        assert (e.value.index, e.value.position) == (20000, 1), str(e.value)


def test_the_automatic_line_fits_the_cache_with_more_ways(features, monkeypatch):
    """Rows of 4000 B ask for 4 KiB lines; a 64 KiB cache of 64 ways holds
    one set of 1 KiB lines only. The line was picked for 16 ways, and the
    open failed."""
    path, data = features
    monkeypatch.setenv("WARPSTORE_CACHE_WAYS", "64")
    with warpstore.open(path, "float32", (-1, 1000), cache="64KiB", threads=2) as a:
        assert a.stats()["line_size"] == 1024
        np.testing.assert_array_equal(a[[0, 1999]], data.reshape(-1, 1000)[[0, 1999]])
