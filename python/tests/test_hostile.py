"""Hostile input: every case checks the exact exception class and a
fragment of its message, or compares the data with NumPy reading the same
file. Small files, a 1 MiB cache and one service thread: the file runs in
seconds on 2 cores."""
import errno
import math
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import warpstore

try:
    import torch
except ImportError:  # the torch cases skip
    torch = None

N = 4096          # 1-D: float32 elements (16 KiB)
ROWS, D = 256, 16  # 2-D: [256, 16] float32 rows (16 KiB)
OPTS = dict(cache="1MiB", threads=1)


# -- files and arrays shared by the module ---------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(17)
    one = rng.standard_normal(N).astype(np.float32)
    two = rng.standard_normal((ROWS, D)).astype(np.float32)
    f = {
        "dir": str(d),
        "one": str(d / "one.f32"), "one_data": one,
        "two": str(d / "two.f32"), "two_data": two,
        "big": str(d / "big.f32"),  # big-endian float32
        "off": str(d / "off.f32"),  # 1 KiB of header, then `one`
    }
    one.tofile(f["one"])
    two.tofile(f["two"])
    one.astype(">f4").tofile(f["big"])
    with open(f["off"], "wb") as h:
        h.write(b"\xee" * 1024 + one.tobytes())
    os.mkfifo(d / "fifo")
    f["fifo"] = str(d / "fifo")
    os.symlink(d / "nowhere", d / "dangling")
    f["dangling"] = str(d / "dangling")
    os.symlink(d / "loop", d / "loop")
    f["loop"] = str(d / "loop")
    return f


@pytest.fixture(scope="module")
def a1(files):
    a = warpstore.open(files["one"], "float32", **OPTS)
    yield a
    a.close()


@pytest.fixture(scope="module")
def a2(files):
    a = warpstore.open(files["two"], "float32", (ROWS, D), **OPTS)
    yield a
    a.close()


def _available_memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 40


# -- open(): every argument ------------------------------------------------
# (id, path key or value, positional/keyword overrides, exception, message fragment)
P = object()  # "the 1-D file"
OPEN_BAD = [
    # path kinds
    ("path-int", 3, {}, TypeError, "expected str, bytes or os.PathLike"),
    ("path-none", None, {}, TypeError, "expected str, bytes or os.PathLike"),
    ("path-float", 1.5, {}, TypeError, "expected str, bytes or os.PathLike"),
    ("path-list", ["a"], {}, TypeError, "expected str, bytes or os.PathLike"),
    ("path-missing", "/nonexistent/warpstore/x.bin", {}, FileNotFoundError, "No such file"),
    ("path-missing-bytes", b"/nonexistent/warpstore/x.bin", {}, FileNotFoundError, "No such file"),
    ("path-empty", "", {}, FileNotFoundError, "No such file"),
    ("path-nul", "a\0b", {}, ValueError, "NUL"),
    ("path-nul-bytes", b"a\0b", {}, ValueError, "NUL"),
    ("path-directory", "dir", {}, IsADirectoryError, "is a directory"),
    ("path-devnull", "/dev/null", {}, ValueError, "only regular files and block devices"),
    ("path-fifo", "fifo", {}, ValueError, "FIFO"),
    ("path-dangling-link", "dangling", {}, FileNotFoundError, "No such file"),
    ("path-link-loop", "loop", {}, OSError, "Too many levels of symbolic links"),
    ("path-through-a-file", "one/x", {}, NotADirectoryError, "Not a directory"),
    # dtypes
    ("dtype-none", P, {"dtype": None}, TypeError, "not a dtype: None"),
    ("dtype-object-name", P, {"dtype": "object"}, TypeError, "unsupported dtype object"),
    ("dtype-object-type", P, {"dtype": object}, TypeError, "unsupported dtype object"),
    ("dtype-instance", P, {"dtype": object()}, TypeError, "not a dtype"),
    ("dtype-garbage", P, {"dtype": "not-a-dtype"}, TypeError, "not a dtype"),
    ("dtype-float", P, {"dtype": 3.5}, TypeError, "not a dtype"),
    ("dtype-dict", P, {"dtype": {}}, TypeError, "unsupported dtype"),
    ("dtype-structured", P, {"dtype": [("a", "f4"), ("b", "i4")]}, TypeError, "structured"),
    ("dtype-subarray", P, {"dtype": ("f4", (2,))}, TypeError, "sub-array"),
    ("dtype-unicode", P, {"dtype": "U4"}, TypeError, "unsupported dtype"),
    ("dtype-bytes", P, {"dtype": "S4"}, TypeError, "unsupported dtype"),
    ("dtype-void", P, {"dtype": "V8"}, TypeError, "unsupported dtype"),
    ("dtype-datetime", P, {"dtype": "datetime64[s]"}, TypeError, "unsupported dtype"),
    ("dtype-timedelta", P, {"dtype": "m8[s]"}, TypeError, "unsupported dtype"),
    ("dtype-longdouble", P, {"dtype": np.longdouble}, TypeError, "unsupported dtype"),
    ("dtype-int4", P, {"dtype": "int4"}, TypeError, "not a dtype"),
    # shapes: integers only, never silently int()-ed
    ("shape-float", P, {"shape": 3.5}, TypeError, "3.5"),
    ("shape-str", P, {"shape": "10"}, TypeError, "'10'"),
    ("shape-bytes", P, {"shape": b"10"}, TypeError, "b'10'"),
    ("shape-float-row", P, {"shape": (10.7, 64)}, TypeError, "(10.7, 64)"),
    ("shape-bool-row", P, {"shape": (True, 4)}, TypeError, "bool"),
    ("shape-bool", P, {"shape": True}, TypeError, "bool"),
    ("shape-bool-dim", P, {"shape": (4, True)}, TypeError, "bool"),
    ("shape-numpy-bool", P, {"shape": (np.bool_(True), 4)}, TypeError, "bool"),
    ("shape-float-dim", P, {"shape": (4, 2.0)}, TypeError, "2.0"),
    ("shape-numpy-float", P, {"shape": np.float64(4)}, TypeError, "float64"),
    ("shape-numpy-float-dim", P, {"shape": (np.float32(4),)}, TypeError, "float32"),
    ("shape-complex", P, {"shape": 4j}, TypeError, "4j"),
    ("shape-none-dim", P, {"shape": (None,)}, TypeError, "None"),
    ("shape-str-dim", P, {"shape": (4, "4")}, TypeError, "'4'"),
    ("shape-dict", P, {"shape": {}}, ValueError, "shape must be positive sizes"),
    ("shape-object", P, {"shape": object()}, TypeError, "shape must hold integer sizes"),
    ("shape-float-array", P, {"shape": np.array([4.0, 2.0])}, TypeError, "float"),
    ("shape-empty", P, {"shape": ()}, ValueError, "shape must be positive sizes"),
    ("shape-empty-list", P, {"shape": []}, ValueError, "shape must be positive sizes"),
    ("shape-zero", P, {"shape": 0}, ValueError, "shape must be positive sizes"),
    ("shape-zero-row", P, {"shape": (0, 4)}, ValueError, "shape must be positive sizes"),
    ("shape-zero-dim", P, {"shape": (4, 0)}, ValueError, "shape must be positive sizes"),
    ("shape-minus-two", P, {"shape": -2}, ValueError, "shape must be positive sizes"),
    ("shape-minus-one-inner", P, {"shape": (4, -1)}, ValueError, "shape must be positive sizes"),
    ("shape-two-minus-ones", P, {"shape": (-1, -1)}, ValueError, "shape must be positive sizes"),
    ("shape-too-many-rows", P, {"shape": N + 1}, ValueError, "needs 16388 bytes, the file has 16384"),
    ("shape-huge", P, {"shape": 2**70}, ValueError, "the file has 16384"),
    ("shape-huge-row", P, {"shape": (1, 2**70)}, ValueError, "the file has 16384"),
    ("shape-huge-row-fill", P, {"shape": (-1, 2**40)}, ValueError, "not one row"),
    ("shape-row-too-wide", P, {"shape": (-1, N + 1)}, ValueError, "not one row"),
    # offsets
    ("offset-negative", P, {"offset": -512}, ValueError, "non-negative integer"),
    ("offset-float", P, {"offset": 512.0}, ValueError, "non-negative integer"),
    ("offset-str", P, {"offset": "512"}, ValueError, "non-negative integer"),
    ("offset-bool", P, {"offset": True}, ValueError, "non-negative integer"),
    ("offset-none", P, {"offset": None}, ValueError, "non-negative integer"),
    ("offset-unaligned", P, {"offset": 4}, ValueError, "multiple of the 512"),
    ("offset-past-end", P, {"offset": 16384 + 512}, ValueError, "past the end of the file"),
    ("offset-huge", P, {"offset": 2**70}, ValueError, "past the end of the file"),
    ("offset-at-end", P, {"offset": 16384}, ValueError, "not one row"),
    # mode
    ("mode-w", P, {"mode": "w"}, ValueError, "read-only"),
    ("mode-r+", P, {"mode": "r+"}, ValueError, "read-only"),
    ("mode-rb", P, {"mode": "rb"}, ValueError, "read-only"),
    ("mode-a", P, {"mode": "a"}, ValueError, "read-only"),
    ("mode-none", P, {"mode": None}, ValueError, "read-only"),
    ("mode-int", P, {"mode": 0}, ValueError, "read-only"),
    # cache
    ("cache-zero", P, {"cache": 0}, ValueError, "positive size"),
    ("cache-negative", P, {"cache": -1}, ValueError, "positive size"),
    ("cache-float", P, {"cache": 1.5e6}, ValueError, "positive size"),
    ("cache-bool", P, {"cache": True}, ValueError, "positive size"),
    ("cache-2**64", P, {"cache": 2**64}, ValueError, "too large"),
    ("cache-garbage", P, {"cache": "lots"}, ValueError, "lots"),
    ("cache-lines-too-many", P, {"cache": 2**60}, ValueError, "lines of 4096 bytes"),
    ("cache-too-small", P, {"cache": 1024}, ValueError, "cache"),
    # line size
    ("line-1000", P, {"line_size": 1000}, ValueError, "line_size"),
    ("line-256", P, {"line_size": 256}, ValueError, "line_size"),
    ("line-128KiB", P, {"line_size": 1 << 17}, ValueError, "line_size"),
    ("line-zero", P, {"line_size": 0}, ValueError, "line_size"),
    ("line-negative", P, {"line_size": -4096}, ValueError, "line_size"),
    ("line-float", P, {"line_size": 4096.0}, ValueError, "line_size"),
    ("line-2**40", P, {"line_size": 2**40}, ValueError, "line_size"),
    # controller
    ("controller-nvme", P, {"controller": "nvme"}, ValueError, "is not such a path"),
    ("controller-vfio", P, {"controller": "vfio"}, ValueError, "'nvme-model' or 'nvme'"),
    ("controller-upper", P, {"controller": "HOST"}, ValueError, "'nvme-model' or 'nvme'"),
    ("controller-empty", P, {"controller": ""}, ValueError, "'nvme-model' or 'nvme'"),
    ("controller-int", P, {"controller": 1}, ValueError, "'nvme-model' or 'nvme'"),
    # threads
    ("threads-zero", P, {"threads": 0}, ValueError, "positive integer"),
    ("threads-negative", P, {"threads": -1}, ValueError, "positive integer"),
    ("threads-float", P, {"threads": 1.5}, ValueError, "positive integer"),
    ("threads-bool", P, {"threads": True}, ValueError, "positive integer"),
    ("threads-str", P, {"threads": "2"}, ValueError, "positive integer"),
    ("threads-2**32", P, {"threads": 2**32}, ValueError, "threads"),
    # deadline
    ("deadline-zero", P, {"deadline": 0}, ValueError, "finite positive"),
    ("deadline-negative", P, {"deadline": -1}, ValueError, "finite positive"),
    ("deadline-nan", P, {"deadline": math.nan}, ValueError, "finite positive"),
    ("deadline-inf", P, {"deadline": math.inf}, ValueError, "finite positive"),
    ("deadline-str", P, {"deadline": "1"}, ValueError, "finite positive"),
    ("deadline-bool", P, {"deadline": True}, ValueError, "finite positive"),
    ("deadline-microsecond", P, {"deadline": 1e-6}, ValueError, "under a millisecond"),
    ("deadline-forever", P, {"deadline": 1e30}, ValueError, "too long"),
    # direct
    ("direct-yes", P, {"direct": "yes"}, ValueError, "'auto', 'on' or 'off'"),
    ("direct-true", P, {"direct": True}, ValueError, "'auto', 'on' or 'off'"),
    ("direct-int", P, {"direct": 1}, ValueError, "'auto', 'on' or 'off'"),
    ("direct-empty", P, {"direct": ""}, ValueError, "'auto', 'on' or 'off'"),
    # backend
    ("backend-gpu", P, {"backend": "gpu"}, ValueError, "backend must be auto, cpu or cuda"),
    ("backend-int", P, {"backend": 1}, TypeError, "backend must be a string"),
    ("backend-empty-list", P, {"backend": ["cpu"]}, TypeError, "backend must be a string"),
    # keywords
    ("unknown-keyword", P, {"size": 3}, TypeError, "unexpected keyword"),
]


@pytest.mark.parametrize("case", OPEN_BAD, ids=[c[0] for c in OPEN_BAD])
def test_open_refuses(files, case):
    _, path, kw, exc, fragment = case
    if path is P:
        path = files["one"]
    elif isinstance(path, str) and path.split("/")[0] in files:
        head, *rest = path.split("/")
        path = "/".join([files[head]] + rest)
    kw = dict(kw)
    dtype = kw.pop("dtype", "float32")
    args = (path, dtype, kw.pop("shape")) if "shape" in kw else (path, dtype)
    with pytest.raises(exc) as e:
        warpstore.open(*args, **{**OPTS, **kw}).close()
    assert type(e.value) is exc
    assert fragment in str(e.value)


def test_cache_larger_than_memory_is_refused(files):
    cache = (_available_memory() * 2) // 4096 * 4096
    with pytest.raises(ValueError) as e:
        warpstore.open(files["one"], "float32", cache=cache, threads=1)
    assert type(e.value) is ValueError
    gpu = warpstore.open(files["one"], "float32", cache="1MiB", threads=1)
    where = "GPU memory" if "cuda" in repr(gpu) else "host memory"
    gpu.close()
    assert where in str(e.value) and "choose a smaller cache" in str(e.value)


def test_cuda_backend_without_a_gpu_is_a_runtime_error(files):
    if warpstore.backend().gpu_build():
        pytest.skip("a GPU is here")
    with pytest.raises(RuntimeError, match="the CUDA backend is unavailable"):
        warpstore.open(files["one"], "float32", backend="cuda", **OPTS)


# Opens that work: the data must equal NumPy's reading of the same file.
OPEN_GOOD = [
    ("shape-none", "one", "float32", None, {}),
    ("shape-int", "one", "float32", N, {}),
    ("shape-minus-one", "one", "float32", -1, {}),
    ("shape-numpy-int", "one", "float32", np.int64(N), {}),
    ("shape-numpy-uint", "one", "float32", np.uint16(N), {}),
    ("shape-numpy-0d", "one", "float32", np.array(N), {}),
    ("shape-list", "two", "float32", [ROWS, D], {}),
    ("shape-numpy-array", "two", "float32", np.array([ROWS, D]), {}),
    ("shape-numpy-dims", "two", "float32", (np.int32(ROWS), np.int8(D)), {}),
    ("shape-fill-rows", "two", "float32", (-1, D), {}),
    ("shape-fewer-rows", "two", "float32", (10, D), {}),
    ("shape-3d", "two", "float32", (ROWS, 4, 4), {}),
    ("dtype-numpy-type", "one", np.float32, None, {}),
    ("dtype-numpy-dtype", "one", np.dtype("<f4"), None, {}),
    ("dtype-char", "one", "f4", None, {}),
    ("dtype-bytes-name", "one", b"f4", None, {}),
    ("dtype-int32", "one", "int32", None, {}),
    ("dtype-uint8", "one", "uint8", None, {}),
    ("dtype-complex64", "one", "complex64", None, {}),
    ("dtype-big-endian", "big", ">f4", None, {}),
    ("offset", "off", "float32", None, {"offset": 1024}),
    ("offset-numpy", "off", "float32", None, {"offset": np.int64(1024)}),
    ("direct-off", "one", "float32", None, {"direct": "off"}),
    ("memory-controller", "two", "float32", (ROWS, D), {"controller": "memory"}),
    ("line-512", "two", "float32", (ROWS, D), {"line_size": 512}),
    ("cache-string", "one", "float32", None, {"cache": "64KiB"}),
    ("deadline-int", "one", "float32", None, {"deadline": 5}),
    ("backend-cpu", "one", "float32", None, {"backend": "cpu"}),
    ("backend-upper", "one", "float32", None, {"backend": "CPU"}),
]


def _reference(files, key, dtype, shape, offset):
    d = np.dtype(dtype)
    ref = np.fromfile(files[key], dtype=d, offset=offset)
    if shape is not None:
        dims = tuple(int(s) for s in np.atleast_1d(shape))
        rows = dims[0] if dims[0] != -1 else ref.size // math.prod(dims[1:])
        ref = ref[: rows * math.prod(dims[1:])].reshape((rows,) + dims[1:])
    return ref.astype(d.newbyteorder("="))


@pytest.mark.parametrize("case", OPEN_GOOD, ids=[c[0] for c in OPEN_GOOD])
def test_open_reads_what_numpy_reads(files, case):
    _, key, dtype, shape, kw = case
    with warpstore.open(files[key], dtype, shape, **{**OPTS, **kw}) as a:
        ref = _reference(files, key, dtype, shape, int(kw.get("offset", 0)))
        assert a.shape == ref.shape
        idx = np.random.default_rng(1).integers(-len(ref), len(ref), 300)
        np.testing.assert_array_equal(a[idx], ref[idx])
        np.testing.assert_array_equal(a[:], ref)


@pytest.mark.parametrize("kind", ["str", "bytes", "pathlib", "pathlike"])
def test_path_kinds(files, kind):
    import pathlib

    class Like:
        def __fspath__(self):
            return files["one"]

    path = {"str": files["one"], "bytes": os.fsencode(files["one"]),
            "pathlib": pathlib.Path(files["one"]), "pathlike": Like()}[kind]
    with warpstore.open(path, "float32", **OPTS) as a:
        assert a.path == files["one"]
        np.testing.assert_array_equal(a[:], files["one_data"])


@pytest.mark.parametrize("name", [b"caf\xe9.f32", b"\xff\xfe.f32", "caf\u00e9 \u2603.f32".encode()])
def test_non_utf8_and_unicode_file_names(files, name):
    path = os.path.join(os.fsencode(files["dir"]), name)
    files["one_data"].tofile(path)
    try:
        for p in (path, os.fsdecode(path)):
            with warpstore.open(p, "float32", **OPTS) as a:
                assert a.path == os.fsdecode(path)
                np.testing.assert_array_equal(a[[0, -1, 7]], files["one_data"][[0, -1, 7]])
                assert "warpstore.Array(" in repr(a)
    finally:
        os.remove(path)


def test_non_utf8_missing_file_names_the_path(files):
    path = os.path.join(os.fsencode(files["dir"]), b"\xff-missing")
    with pytest.raises(FileNotFoundError) as e:
        warpstore.open(path, "float32")
    assert e.value.filename == os.fsdecode(path)


# -- exception classes -----------------------------------------------------
def test_unreadable_file_is_a_permission_error(files, tmp_path):
    """EACCES from the C++ open becomes PermissionError with the path. Root
    reads anything, so the check runs in a child without capabilities."""
    path = str(tmp_path / "secret.f32")
    files["one_data"].tofile(path)
    os.chmod(path, 0)
    script = textwrap.dedent(f"""
        import ctypes, os, warpstore
        if os.geteuid() == 0:  # drop CAP_DAC_OVERRIDE and friends: root obeys modes
            libc = ctypes.CDLL(None, use_errno=True)
            class Hdr(ctypes.Structure):
                _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
            class Data(ctypes.Structure):
                _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                            ("inheritable", ctypes.c_uint32)]
            h, d = Hdr(0x20080522, 0), (Data * 2)()
            assert libc.capget(ctypes.byref(h), d) == 0
            d[0].effective = d[1].effective = 0
            assert libc.capset(ctypes.byref(h), d) == 0
        try:
            warpstore.open({path!r}, "float32", cache="1MiB", threads=1)
        except Exception as e:
            print(type(e).__name__, e.errno, e.filename == {path!r}, "|", e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"PermissionError {errno.EACCES} True |"), r.stdout
    assert "Permission denied" in r.stdout


def test_missing_file_is_file_not_found_with_the_path(tmp_path):
    path = str(tmp_path / "missing.f32")
    with pytest.raises(FileNotFoundError) as e:
        warpstore.open(path, "float32")
    assert e.value.errno == errno.ENOENT and e.value.filename == path


# The software NVMe device too: it read the bytes gone as zeros, silently.
@pytest.mark.parametrize("controller", ["host", "nvme-model"])
def test_file_that_shrank_says_so(files, tmp_path, controller):
    path = str(tmp_path / "shrinks.f32")
    files["one_data"].tofile(path)
    with warpstore.open(path, "float32", controller=controller, **OPTS) as a:
        np.testing.assert_array_equal(a[[0]], files["one_data"][[0]])
        os.truncate(path, 4096)
        with pytest.raises(OSError) as e:
            a[[N - 1]]
        assert type(e.value) is OSError and e.value.errno == errno.EIO
        assert e.value.filename == path
        assert "is now 4096 bytes, the array needs 16384" in str(e.value)
        assert "byte" in str(e.value.__cause__)  # the read that failed
        np.testing.assert_array_equal(a[[1, 2]], files["one_data"][[1, 2]])  # what is left


# -- settings ----------------------------------------------------------------
SETTINGS_BAD = [
    ("cache", 0, "positive size"), ("cache", -5, "positive size"), ("cache", 1.5, "positive size"),
    ("cache", True, "positive size"), ("cache", None, "positive size"),
    ("cache", 2**64, "too large"), ("cache", "much", "much"), ("cache", "-1MiB", "-1MiB"),
    ("line_size", 1000, "line_size"), ("line_size", 2**17, "line_size"),
    ("line_size", 2**33, "line_size"), ("line_size", "4 kilo", "4 kilo"),
    ("line_size", 0, "positive size"),
    ("controller", "vfio", "'nvme-model' or 'nvme'"), ("controller", None, "'nvme-model' or 'nvme'"),
    ("threads", 0, "positive integer"), ("threads", "8", "positive integer"),
    ("threads", 2.0, "positive integer"), ("threads", 2**32, "threads"),
    ("deadline", 0, "finite positive"), ("deadline", math.nan, "finite positive"),
    ("deadline", -math.inf, "finite positive"), ("deadline", "10", "finite positive"),
    ("deadline", 1e-9, "under a millisecond"), ("deadline", 1e300, "too long"),
    ("direct", "maybe", "'auto', 'on' or 'off'"), ("direct", False, "'auto', 'on' or 'off'"),
]


@pytest.mark.parametrize("name,value,fragment", SETTINGS_BAD,
                         ids=[f"{n}={v!r}" for n, v, _ in SETTINGS_BAD])
def test_settings_set_refuses(name, value, fragment):
    before = warpstore.settings.as_dict()
    with pytest.raises(ValueError) as e:
        warpstore.settings.set(name, value)
    assert type(e.value) is ValueError and fragment in str(e.value)
    assert warpstore.settings.as_dict() == before  # nothing half-set


@pytest.mark.parametrize("call", ["get", "set", "reset-is-fine"])
def test_settings_unknown_name(call):
    if call == "get":
        with pytest.raises(KeyError, match="no setting 'speed'"):
            warpstore.settings.get("speed")
    elif call == "set":
        with pytest.raises(KeyError, match="no setting 'speed'"):
            warpstore.settings.set("speed", 1)
    else:
        warpstore.settings.reset("speed")  # dropping an override that is not there


ENV_BAD = [
    ("WARPSTORE_CACHE_BYTES", "lots"), ("WARPSTORE_CACHE_BYTES", "-1"),
    ("WARPSTORE_CACHE_BYTES", "1.5.3GiB"), ("WARPSTORE_CACHE_BYTES", "99999999999999999999999"),
    ("WARPSTORE_LINE_SIZE", "1000"), ("WARPSTORE_LINE_SIZE", "x"),
    ("WARPSTORE_LINE_SIZE", "4294967808"),
    ("WARPSTORE_CONTROLLER", "vfio"), ("WARPSTORE_CONTROLLER", "HOST "),
    ("WARPSTORE_THREADS", "0"), ("WARPSTORE_THREADS", "two"), ("WARPSTORE_THREADS", "-3"),
    ("WARPSTORE_TIMEOUT_MS", "0"), ("WARPSTORE_TIMEOUT_MS", "soon"),
    ("WARPSTORE_TIMEOUT_MS", "18446744073710"),
    ("WARPSTORE_DIRECT", "maybe"), ("WARPSTORE_DIRECT", "sometimes"),
]


@pytest.mark.parametrize("var,value", ENV_BAD, ids=[f"{v}={x}" for v, x in ENV_BAD])
def test_environment_refuses(monkeypatch, files, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as e:
        warpstore.settings.as_dict()
    assert type(e.value) is ValueError and var in str(e.value)
    with pytest.raises(ValueError) as e:
        warpstore.open(files["one"], "float32")
    assert var in str(e.value)


@pytest.mark.parametrize("value", ["GPU0", "numpy", "cpu,cuda"])
def test_environment_backend_refused(monkeypatch, files, value):
    monkeypatch.setenv("WARPSTORE_BACKEND", value)
    with pytest.raises(ValueError, match="backend must be auto, cpu or cuda"):
        warpstore.open(files["one"], "float32", **OPTS)


# -- indexing: what NumPy would return ----------------------------------------
def _keys_1d():
    rng = np.random.default_rng(5)
    r = rng.integers(0, N, 64)
    return [
        ("empty-list", []), ("empty-int64", np.array([], np.int64)),
        ("empty-2d", np.zeros((0, 3), np.int64)), ("empty-slice", slice(5, 5)),
        ("first", [0]), ("last", [N - 1]), ("minus-one", [-1]), ("minus-n", [-N]),
        ("negatives", [-1, -2, -N, -7]), ("repeated", [3, 3, 3, 0, 3]),
        ("random", r), ("random-negative", r - N),
        ("int8", np.array([1, -1, 127, -128], np.int8)),
        ("int16", np.array([300, -300], np.int16)),
        ("int32", r.astype(np.int32)), ("uint8", np.array([0, 255], np.uint8)),
        ("uint16", np.array([4095, 1], np.uint16)), ("uint32", r.astype(np.uint32)),
        ("uint64", r.astype(np.uint64)), ("big-endian-int64", r.astype(">i8")),
        ("big-endian-int32", r.astype(">i4")), ("little-endian-uint16", r.astype("<u2")),
        ("2d", r.reshape(8, 8)), ("3d", r.reshape(4, 4, 4)), ("2d-fortran", np.asfortranarray(r.reshape(8, 8))),
        ("non-contiguous", r[::3]), ("reversed-view", r[::-1]),
        ("transposed", r.reshape(8, 8).T), ("0d-array", np.array(17)),
        ("nested-list", [[1, 2], [3, 4]]), ("list-of-numpy-ints", [np.int64(5), np.int32(6)]),
        ("list-of-uint64", [np.uint64(9)]), ("tuple-inside-list", [(1, 2), (3, 4)]),
        ("int-0", 0), ("int-last", N - 1), ("int-minus-1", -1), ("int-minus-n", -N),
        ("numpy-int32", np.int32(7)), ("numpy-uint16", np.uint16(8)), ("numpy-uint64", np.uint64(9)),
        ("slice-all", slice(None)), ("slice-reversed", slice(None, None, -1)),
        ("slice-step", slice(1, None, 7)), ("slice-negative", slice(-10, None)),
        ("slice-backwards", slice(100, 0, -3)), ("slice-past-end", slice(N - 2, N + 50)),
        ("slice-huge", slice(-2**70, 2**70, 2**60)), ("range-like", np.arange(N)),
    ]


KEYS_1D = _keys_1d()


@pytest.mark.parametrize("key", [k for _, k in KEYS_1D], ids=[i for i, _ in KEYS_1D])
def test_index_1d_matches_numpy(files, a1, key):
    ref = files["one_data"]
    got = a1[key]
    want = ref[key] if not isinstance(key, list) else ref[np.asarray(key, dtype=np.int64)]
    assert np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)


KEYS_2D = [
    ("rows", [0, 5, ROWS - 1]), ("negative-rows", [-1, -ROWS]), ("2d-index", np.arange(12).reshape(3, 4)),
    ("int", 3), ("int-minus-1", -1), ("slice", slice(2, 9, 3)), ("empty", []),
    ("0d", np.array(4)), ("int32-rows", np.array([1, 2], np.int32)), ("non-contiguous", np.arange(40)[::5]),
]


@pytest.mark.parametrize("key", [k for _, k in KEYS_2D], ids=[i for i, _ in KEYS_2D])
def test_index_2d_matches_numpy(files, a2, key):
    ref = files["two_data"]
    got = a2[key]
    want = ref[key] if not isinstance(key, list) else ref[np.asarray(key, dtype=np.int64)]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _bad_keys():
    return [
        # out of range, at various positions
        ("past-end", [N], IndexError, f"index {N} (at position 0)"),
        ("past-start", [-N - 1], IndexError, f"index {-N - 1} (at position 0)"),
        ("second", [0, N], IndexError, "(at position 1)"),
        ("last-of-four", [0, 1, 2, N + 5], IndexError, f"index {N + 5} (at position 3)"),
        ("first-of-two-bad", [N + 1, N + 2], IndexError, f"index {N + 1} (at position 0)"),
        ("in-2d", np.array([[0, 1], [2, N]]), IndexError, "(at position 3)"),
        ("int32-past-end", np.array([5, N], np.int32), IndexError, "(at position 1)"),
        ("uint16-past-end", np.array([N], np.uint16), IndexError, f"index {N}"),
        ("uint64-2**63", np.array([2**63], np.uint64), IndexError, str(2**63)),
        ("uint64-max", np.array([0, 2**64 - 1], np.uint64), IndexError, str(2**64 - 1)),
        ("list-2**63", [2**63], IndexError, str(2**63)),
        ("list-2**70", [1, 2**70], IndexError, f"index {2**70} (at position 1)"),
        ("list-minus-2**70", [-2**70], IndexError, f"index {-2**70} (at position 0)"),
        ("int64-min", np.array([-2**63]), IndexError, str(-2**63)),
        ("int64-max", np.array([2**63 - 1]), IndexError, str(2**63 - 1)),
        ("int-past-end", N, IndexError, f"index {N} is out of range"),
        ("int-past-start", -N - 1, IndexError, f"index {-N - 1} is out of range"),
        ("int-huge", 2**70, IndexError, f"index {2**70} is out of range"),
        ("int-minus-huge", -2**70, IndexError, "is out of range"),
        ("numpy-int-past-end", np.int64(N), IndexError, f"index {N}"),
        ("numpy-uint64-max", np.uint64(2**64 - 1), IndexError, str(2**64 - 1)),
        # not integers
        ("float-list", [1.0], TypeError, "indices must be integers, got float64"),
        ("mixed-list", [1, 2.5], TypeError, "indices must be integers, got float64"),
        ("mixed-int-float-exact", [1, 2.0], TypeError, "indices must be integers"),
        ("float32", np.array([1, 2], np.float32), TypeError, "got float32"),
        ("float16", np.array([1], np.float16), TypeError, "got float16"),
        ("complex", np.array([1j]), TypeError, "got complex128"),
        ("bool-array", np.array([True, False]), TypeError, "got bool"),
        ("bool-list", [True, False], TypeError, "got bool"),
        ("bool", True, TypeError, "got bool"),
        ("numpy-bool", np.bool_(False), TypeError, "got bool"),
        ("float", 1.5, TypeError, "got float64"),
        ("numpy-float", np.float64(1), TypeError, "got float64"),
        ("none", None, TypeError, "indices must be integers"),
        ("ellipsis", Ellipsis, TypeError, "indices must be integers"),
        ("str", "3", TypeError, "indices must be integers"),
        ("bytes", b"3", TypeError, "indices must be integers"),
        ("str-array", np.array(["1"]), TypeError, "indices must be integers"),
        ("datetime", np.array(["2020-01-01"], "datetime64[D]"), TypeError, "indices must be integers"),
        ("object-mixed", [1, "a"], TypeError, "indices must be integers"),
        ("object-none", np.array([1, None], dtype=object), TypeError, "NoneType"),
        ("object-bool", np.array([1, True], dtype=object), TypeError, "bool"),
        ("dict", {}, TypeError, "indices must be integers"),
        ("set", {1, 2}, TypeError, "indices must be integers"),
        ("tuple", (1, 2), TypeError, "index with one tensor"),
        ("tuple-slices", (slice(None), 0), TypeError, "index with one tensor"),
        # shapes NumPy cannot make
        ("ragged", [[1], [2, 3]], ValueError, "inhomogeneous"),
        ("slice-step-zero", slice(None, None, 0), ValueError, "slice step cannot be zero"),
    ]


def _torch_bad():
    if torch is None:
        return []
    return [
        ("float", torch.tensor([1.0]), TypeError, "indices must be integers, got torch.float32"),
        ("half", torch.tensor([1.0], dtype=torch.float16), TypeError, "got torch.float16"),
        ("bfloat16", torch.tensor([1.0], dtype=torch.bfloat16), TypeError, "got torch.bfloat16"),
        ("bool", torch.tensor([True]), TypeError, "got torch.bool"),
        ("complex", torch.tensor([1j]), TypeError, "got torch.complex64"),
        ("meta", torch.empty(3, dtype=torch.int64, device="meta"), ValueError, "'meta' device"),
        ("past-end", torch.tensor([0, N]), IndexError, f"index {N} (at position 1)"),
        ("past-start", torch.tensor([-N - 1]), IndexError, f"index {-N - 1}"),
        ("int32-past-end", torch.tensor([N], dtype=torch.int32), IndexError, f"index {N}"),
        ("uint64-2**63", torch.tensor([2**63], dtype=torch.uint64), IndexError, str(2**63)),
    ]





BAD_KEYS = _bad_keys() + [("torch-" + c[0],) + tuple(c[1:]) for c in _torch_bad()]


@pytest.mark.parametrize("key,exc,fragment", [c[1:] for c in BAD_KEYS], ids=[c[0] for c in BAD_KEYS])
def test_index_refused(a1, key, exc, fragment):
    with pytest.raises(exc) as e:
        a1[key]
    assert type(e.value) is exc
    assert fragment in str(e.value)


@pytest.mark.parametrize("key", [[ROWS], [-ROWS - 1], ROWS, np.array([[0], [ROWS]])],
                         ids=["list", "negative", "int", "2d"])
def test_index_2d_out_of_range(a2, key):
    with pytest.raises(IndexError) as e:
        a2[key]
    assert f"out of range for {ROWS} rows" in str(e.value)


def test_gather_accepts_what_getitem_does(files, a1):
    np.testing.assert_array_equal(a1.gather([3, -3]), files["one_data"][[3, -3]])
    with pytest.raises(TypeError, match="indices must be integers"):
        a1.gather(1.5)


# -- PyTorch indices ---------------------------------------------------------
def _torch_cases():
    if torch is None:
        return []
    r = torch.arange(0, N, 37)
    return [
        ("int64", r), ("int32", r.to(torch.int32)), ("int16", r.to(torch.int16)),
        ("int8", torch.tensor([1, -1, 100], dtype=torch.int8)),
        ("uint8", torch.tensor([0, 255], dtype=torch.uint8)),
        ("negative", torch.tensor([-1, -N])), ("empty", torch.tensor([], dtype=torch.int64)),
        ("2d", r[:100].reshape(10, 10)), ("non-contiguous", r[::2]),
        ("transposed", r[:100].reshape(10, 10).t()), ("0d", torch.tensor(11)),
        ("expanded", torch.tensor([4]).expand(5)),
        ("requires-grad-view", torch.arange(5)),
    ]


TORCH_GOOD = _torch_cases()


@pytest.mark.skipif(torch is None, reason="needs PyTorch")
@pytest.mark.parametrize("key", [k for _, k in TORCH_GOOD], ids=[i for i, _ in TORCH_GOOD])
def test_torch_index_matches_numpy(files, a1, key):
    got = a1[key]
    assert isinstance(got, torch.Tensor) and got.shape == key.shape
    np.testing.assert_array_equal(got.numpy(), files["one_data"][key.numpy().astype(np.int64)])


@pytest.mark.gpu
def test_indices_on_another_cuda_device(files):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    with torch.cuda.device(0):
        a = warpstore.open(files["one"], "float32", **OPTS)
    with a, pytest.raises(ValueError, match="indices are on cuda:1, the array's cache on cuda:0"):
        a[torch.tensor([1], device="cuda:1")]


# -- lifecycle ---------------------------------------------------------------
@pytest.fixture
def closed(files):
    a = warpstore.open(files["two"], "float32", (ROWS, D), **OPTS)
    a.close()
    return a


@pytest.mark.parametrize("call", [
    lambda a: a[[0]], lambda a: a[0], lambda a: a[1:3], lambda a: a.gather([1]),
    lambda a: a.stats(), lambda a: a.reset_stats(), lambda a: a.clear_cache(),
    lambda a: a[np.array([], np.int64)],
], ids=["list", "int", "slice", "gather", "stats", "reset_stats", "clear_cache", "empty"])
def test_use_after_close_is_a_value_error(closed, call):
    with pytest.raises(ValueError) as e:
        call(closed)
    assert type(e.value) is ValueError and "the array is closed" in str(e.value)


@pytest.mark.parametrize("what", ["closed", "repr", "len", "shape", "dtype", "path", "ndim",
                                  "double-close", "pickle"])
def test_after_close(files, closed, what):
    if what == "closed":
        assert closed.closed is True
    elif what == "repr":
        assert repr(closed).endswith("closed)") and files["two"] in repr(closed)
    elif what == "len":
        assert len(closed) == ROWS
    elif what == "shape":
        assert closed.shape == (ROWS, D)
    elif what == "dtype":
        assert closed.dtype == np.float32
    elif what == "path":
        assert closed.path == files["two"]
    elif what == "ndim":
        assert closed.ndim == 2
    elif what == "double-close":
        closed.close()
        closed.close()
        assert closed.closed
    else:
        with pytest.raises(ValueError, match="a closed array cannot be pickled"):
            pickle.dumps(closed)


def test_context_manager_closes_and_propagates(files):
    with pytest.raises(KeyError, match="inside"):
        with warpstore.open(files["one"], "float32", **OPTS) as a:
            assert not a.closed and a[0] == files["one_data"][0]
            raise KeyError("inside")
    assert a.closed


def test_close_inside_with(files):
    with warpstore.open(files["one"], "float32", **OPTS) as a:
        a.close()
    assert a.closed


def test_repr_and_stats_open(files, a2):
    assert repr(a2) == f"warpstore.Array({files['two']!r}, float32, shape=(256, 16), cpu)" \
        or "cuda:" in repr(a2)
    s = a2.stats()
    assert s["cache_bytes"] == 1 << 20 and s["errors"] == 0


# -- process boundaries --------------------------------------------------------
def _in_child(fn):
    """Runs fn() in a forked child; returns what it printed (one line)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        os.close(r)
        try:
            out = fn()
        except BaseException as e:  # noqa: BLE001
            out = f"{type(e).__name__}: {e}"
        os.write(w, str(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return out


FORK_MESSAGE = "RuntimeError: warpstore arrays cannot cross fork(): open the file again in the child"


@pytest.mark.parametrize("call", [
    lambda a: a[[0]], lambda a: a[0], lambda a: a[:2], lambda a: a.gather([1]), lambda a: a.stats(),
    lambda a: a.clear_cache(), lambda a: a.reset_stats(),
], ids=["list", "int", "slice", "gather", "stats", "clear_cache", "reset_stats"])
def test_fork_child_gets_a_clear_error(files, call):
    with warpstore.open(files["one"], "float32", **OPTS) as a:
        a[[1, 2]]  # the parent has used it: threads, cache lines
        out = _in_child(lambda: call(a))
        assert out.startswith(FORK_MESSAGE) and "worker_init_fn" in out
        np.testing.assert_array_equal(a[[3]], files["one_data"][[3]])  # the parent goes on


CACHE_FORK_MESSAGE = ("RuntimeError: a warpstore.Cache cannot cross fork(): make a new Cache "
                      "in the child")


@pytest.mark.parametrize("call", [
    lambda c, f: warpstore.open(f, "uint8", cache=c, threads=1), lambda c, f: c.stats(),
    lambda c, f: c.clear(), lambda c, f: c.reset_stats(), lambda c, f: c.arrays,
], ids=["open", "stats", "clear", "reset_stats", "arrays"])
def test_fork_child_cannot_use_a_cache(files, call):
    """A parent thread gathers through a shared Cache while the process
    forks: the child's copy of the cache's gate counts that gather forever,
    and a child that opened an array on the cache and closed it hung there.
    The child gets a clear error instead, and the parent goes on."""
    c = warpstore.Cache("64KiB", line_size=512, backend="cpu")
    with warpstore.open(files["one"], "float32", cache=c, threads=1, backend="cpu") as a:
        stop = threading.Event()

        def gather():
            rng = np.random.default_rng(0)
            while not stop.is_set():
                a[rng.integers(0, N, 4000)]

        t = threading.Thread(target=gather)
        t.start()
        try:
            def child():
                signal.alarm(30)  # a hang ends the child, and the test fails
                try:
                    out = call(c, files["one"])
                    if isinstance(out, warpstore.Array):
                        out.close()
                    return f"no error: {out!r}"
                finally:
                    signal.alarm(0)

            out = _in_child(child)
        finally:
            stop.set()
            t.join()
        assert out.startswith(CACHE_FORK_MESSAGE), out
        np.testing.assert_array_equal(a[[3]], files["one_data"][[3]])


def test_fork_child_can_open_its_own(files):
    with warpstore.open(files["one"], "float32", **OPTS) as a:
        a[[0]]

        def child():
            a.close()  # a no-op in the child: the array is the parent's
            with warpstore.open(files["one"], "float32", **OPTS) as b:
                return float(b[5])

        got = _in_child(child)
        if "cuda" in repr(a):  # CUDA does not survive fork(): a clear error, not a crash
            assert got.startswith("RuntimeError: warpstore: CUDA cannot be used in a process "
                                  "forked") and "spawn" in got
        else:
            assert float(got) == float(files["one_data"][5])
        assert not a.closed
        np.testing.assert_array_equal(a[[5]], files["one_data"][[5]])


def test_fork_child_exits_normally(files, tmp_path):
    """A child that ends the usual way (interpreter shutdown, not os._exit)
    must not free or join the parent's array: no hang, no crash, no noise."""
    script = textwrap.dedent(f"""
        import os, sys, warpstore
        a = warpstore.open({files['one']!r}, "float32", cache="1MiB", threads=1)
        a[[0, 1]]
        pid = os.fork()
        if pid == 0:
            try:
                a[[0]]
            except RuntimeError as e:
                print("child:", str(e)[:40])
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("parent:", os.waitstatus_to_exitcode(status), float(a[2]))
        a.close()
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "child: warpstore arrays cannot cross fork()" in r.stdout
    assert f"parent: 0 {float(files['one_data'][2])}" in r.stdout
    assert "leak" not in r.stderr


PICKLE_CASES = [
    ("1d", "one", "float32", None, {}),
    ("2d", "two", "float32", (ROWS, D), {}),
    ("3d", "two", "float32", (ROWS, 4, 4), {}),
    ("offset", "off", "float32", None, {"offset": 1024}),
    ("big-endian", "big", ">f4", None, {}),
    ("numpy-dtype", "one", np.dtype("int32"), None, {}),
    ("settings", "two", "float32", (ROWS, D), {"cache": "2MiB", "line_size": 1024,
                                              "controller": "memory", "deadline": 7.5,
                                              "direct": "off"}),
]


@pytest.mark.parametrize("case", PICKLE_CASES, ids=[c[0] for c in PICKLE_CASES])
def test_pickle_reopens(files, case):
    _, key, dtype, shape, kw = case
    with warpstore.open(files[key], dtype, shape, **{**OPTS, **kw}) as a:
        a[[0]]
        b = pickle.loads(pickle.dumps(a))
        with b:
            assert b is not a and not b.closed
            assert (b.path, b.shape, b.dtype) == (a.path, a.shape, a.dtype)
            assert b._settings == a._settings and b._offset == a._offset
            sa, sb = a.stats(), b.stats()
            assert (sb["cache_bytes"], sb["line_size"], sb["controller"]) == \
                (sa["cache_bytes"], sa["line_size"], sa["controller"])
            assert sb["misses"] == 0  # a cache of its own
            ref = _reference(files, key, dtype, shape, kw.get("offset", 0))
            np.testing.assert_array_equal(b[:], ref)
        assert not a.closed  # closing the copy leaves the original open


@pytest.mark.skipif(torch is None, reason="needs PyTorch")
def test_pickle_keeps_a_torch_dtype(files):
    with warpstore.open(files["one"], torch.float32, **OPTS) as a:
        with pickle.loads(pickle.dumps(a)) as b:
            assert b.dtype is torch.float32
            assert torch.equal(b[torch.tensor([1, 2])], a[torch.tensor([1, 2])])


def test_pickle_to_a_spawned_process(files):
    """What DataLoader workers with the spawn start method do."""
    import multiprocessing as mp

    with warpstore.open(files["two"], "float32", (ROWS, D), **OPTS) as a:
        with mp.get_context("spawn").Pool(1) as pool:
            got = pool.apply(_sum_rows, (a, [0, 7, -1]))
    assert got == pytest.approx(float(files["two_data"][[0, 7, -1]].sum()), rel=1e-6)


def _sum_rows(a, idx):
    with a:
        return float(a[idx].sum())
