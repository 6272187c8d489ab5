"""Storage-backed arrays for Python: ``warpstore.open`` and ``Array``."""
import errno
import math
import operator
import os
import sys
import weakref

import numpy as np

from . import _errors, _files
from . import settings as _settings
from ._backend import backend as _backend
from ._backend import check_cuda_process as _check_cuda_process
from ._cache import Cache

# dtype name -> bytes per element (bfloat16 exists in PyTorch only)
_ITEMSIZE = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "complex64": 8, "complex128": 16,
}


def _dtype_name(dtype):
    """'float32' for np.float32, 'float32', torch.float32, np.dtype('f4');
    also the byte order the file holds: '<', '>' or '|' (no order)."""
    if type(dtype).__module__ == "torch" or str(dtype).startswith("torch."):
        return _checked_name(str(dtype).split(".", 1)[1]), "="
    if isinstance(dtype, str) and dtype == "bfloat16":
        return dtype, "="
    if dtype is None:  # np.dtype(None) is float64: a missing dtype is no choice
        raise TypeError(f"not a dtype: None; supported: {', '.join(_ITEMSIZE)}")
    try:
        d = np.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"not a dtype: {dtype!r}") from None
    if d.fields is not None or d.subdtype is not None:
        raise TypeError(f"unsupported dtype {d} (structured or sub-array); supported: "
                        f"{', '.join(_ITEMSIZE)}")
    return _checked_name(d.name), d.byteorder


def _checked_name(name):
    if name not in _ITEMSIZE:
        raise TypeError(f"unsupported dtype {name}; supported: {', '.join(_ITEMSIZE)}")
    return name


def _swapped(byteorder):
    """Whether values stored in `byteorder` must be byte-swapped to native."""
    return byteorder not in ("=", "|") and byteorder != ("<" if sys.byteorder == "little" else ">")


def _swap_unit(name):
    """Bytes per swapped unit: a complex number swaps each of its two parts."""
    return _ITEMSIZE[name] // 2 if name.startswith("complex") else _ITEMSIZE[name]


def _word_bytes(row_bytes):
    """The widest word (a power of two up to 16 bytes) a row divides into."""
    w = 16
    while row_bytes % w:
        w //= 2
    return w


def _framework(idx):
    mod = type(idx).__module__.split(".")[0]
    if mod == "torch":
        return "torch"
    if mod == "cupy":
        return "cupy"
    return "numpy"


# Every open Array, so a forked child can disown them (see _after_fork).
_live = weakref.WeakSet()

_FORK_MESSAGE = ("warpstore arrays cannot cross fork(): open the file again in the child "
                 "(DataLoader workers: open in worker_init_fn)")


def _after_fork():
    """In a forked child: the parent's arrays hold threads and memory the
    child does not have, so their C++ objects must never run or be freed
    here. Each gets a reference that is never dropped; calls raise. So
    does each Cache (its memory and its gate are the parent's too)."""
    from . import _cache

    if not _live and not _cache._live:
        return
    import ctypes

    for a in list(_live) + list(_cache._live):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(a._impl))
    for a in list(_live):
        try:
            a._backend.quiet_leaks()
        except AttributeError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _reopen(path, dtype, shape, offset, settings, backend):
    """Unpickling: the same file, dtype, shape, offset and settings, opened anew."""
    return open(path, dtype, shape, offset=offset, backend=backend, **settings)


class Array:
    """A file-backed array read through a warpstore cache.

    Made by :func:`warpstore.open`. ``gather(idx)`` (or ``arr[idx]``) reads
    elements of a 1-D array or rows of an ``[N, ...]`` array; results land on
    the index tensor's device (and, for CUDA tensors, its current stream).
    Integers and slices return NumPy arrays (a contiguous slice is one bulk
    read). ``read(start, stop)`` reads a row range in bulk, past the cache,
    onto the array's device. Close it (or use ``with``) to
    free the cache and stop the controller's threads.

    An array does not cross ``fork()``: in a forked child every call raises
    RuntimeError (open the file again there). It pickles as what to open
    (path, dtype, shape, offset, settings), so spawned processes get an
    array of their own.
    """

    def __init__(self, path, dtype, shape, *, cache, line_size, controller, threads, deadline,
                 direct, offset, backend):
        self._pid = os.getpid()
        self._user_closed = False  # close() was called (not a reopen that failed)
        self._path = path
        self._offset = offset
        self._backend_name = backend
        self._settings = dict(cache=cache, line_size=line_size, controller=controller,
                              threads=threads, deadline=deadline, direct=direct)
        self._dtype_name, byteorder = _dtype_name(dtype)
        # Values stored big-endian (or little-endian on a big-endian host) are
        # byte-swapped after the gather: results are always native.
        self._swap = _swapped(byteorder)
        self._dtype = dtype
        self._shape = tuple(shape)
        self._row_shape = self._shape[1:]
        self._torch_dtype = None  # the torch dtype, looked up at the first torch gather
        self._row_bytes = _ITEMSIZE[self._dtype_name] * math.prod(self._row_shape)
        self._backend = _backend(backend)
        _check_cuda_process(self._backend)
        shared = None
        if isinstance(cache, Cache):
            cache._check_process()
            if cache._backend is not self._backend:
                raise ValueError(f"{path}: the cache is on the {cache._backend.__name__} target, "
                                 f"the array on {self._backend.__name__}")
            shared, cache = cache._impl, cache.size
        self._impl = self._backend.Array(
            os.fsencode(path), self._shape[0], self._row_bytes, _word_bytes(self._row_bytes), offset, cache,
            line_size, controller, threads, int(round(deadline * 1000)), direct, shared)
        _live.add(self)

    def _check_process(self):
        if os.getpid() != self._pid:
            raise RuntimeError(_FORK_MESSAGE)

    def __reduce__(self):
        """Pickles as what to open: path, dtype, shape, offset and settings
        (the cache's contents stay behind). Unpickling opens the file again,
        so arrays travel to spawned processes (DataLoader workers)."""
        if self.closed:
            raise ValueError(f"{self._path}: the array is closed; a closed array cannot be pickled")
        return (_reopen, (self._path, self._dtype, self._shape, self._offset, dict(self._settings),
                          self._backend_name))

    def _failed(self, error, bulk=False):
        """After a call raised `error`: where the file shrank, says so (a
        failed read, or a reopen after a deadline that found the file too
        short and closed the array)."""
        if isinstance(error, OSError) or (self._impl.closed and not self._user_closed):
            self._raise_if_shrunk(error, bulk)

    def _raise_if_shrunk(self, error, bulk=False):
        """After a failed read: names the row that failed, and if the file is
        now shorter than the array, says so (the controller only sees a read
        past the end). A bulk read's error knows its byte offset, not an
        element."""
        from ._files import file_size

        offset = getattr(error, "offset", None)
        if bulk:
            row = None if offset is None else max(0, offset - self._offset) // self._row_bytes
            _errors.with_fields(error, row=min(row, len(self) - 1) if row is not None else None)
        else:
            _errors.read_error_fields(error, self._row_bytes, _word_bytes(self._row_bytes))
        need = self._offset + self._shape[0] * self._row_bytes
        try:
            size = file_size(self._path)
        except (OSError, ValueError):
            return
        if size < need:
            shrunk = OSError(errno.EIO, f"{self._path} is now {size} bytes, the array needs {need} "
                             f"(the file shrank after open)", self._path)
            fields = {name: getattr(error, name, None) for name in _errors.FIELDS}
            fields.update(kind="io", path=self._path)
            raise _errors.with_fields(shrunk, **fields) from error

    # -- what it is ------------------------------------------------------
    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        """The dtype as given to open() (a NumPy dtype unless a torch dtype was given)."""
        if type(self._dtype).__module__ == "torch":
            return self._dtype
        return np.dtype(self._dtype_name) if self._dtype_name != "bfloat16" else "bfloat16"

    @property
    def path(self):
        return self._path

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def device(self):
        """Where the cache lives: 'cuda:N' or 'cpu' (the CPU target)."""
        d = self._impl.device
        return "cpu" if d < 0 else f"cuda:{d}"

    @property
    def closed(self):
        return self._impl.closed

    def __len__(self):
        return self._shape[0]

    def __repr__(self):
        state = "closed" if self.closed else self.device
        return f"warpstore.Array({self._path!r}, {self._dtype_name}, shape={self._shape}, {state})"

    # -- reading ---------------------------------------------------------
    def gather(self, idx):
        """Rows (or elements) ``idx`` of the array, on idx's device.

        idx: a PyTorch/CuPy/NumPy integer tensor of any shape (or a list); the
        result has shape ``idx.shape + shape[1:]``. Negative indices count
        from the end. Raises IndexError naming the first index out of range,
        OSError (with the path and byte offset) when a read fails, TypeError
        for non-integer indices.

        On the GPU over the memory controller, a gather of 16 K positions or
        more from an array over 1 GiB reads its rows in file order while the
        array's large gathers miss (``WARPSTORE_GATHER_SORT_ROWS`` and
        ``WARPSTORE_GATHER_SORT_BYTES``; ``stats()["sorted_gathers"]`` counts them):
        random rows of host memory spread that wide read 1.6 to 2.8 times
        slower as they come.
        """
        self._check_process()
        if type(idx) is _TORCH_TENSOR[0]:
            out = self._gather_torch_fast(idx)
            if out is not None:
                return out
        kind = _framework(idx)
        if kind == "torch":
            return self._gather_torch(idx)
        if kind == "cupy":
            return self._gather_cupy(idx)
        return self._gather_numpy(idx)

    def read(self, start=None, stop=None, out=None):
        """Rows ``[start, stop)`` in one bulk read that bypasses the cache:
        the byte range is read in large chunks by several threads at once
        (through pinned buffers and the copy engines into GPU memory).

        For a tensor, a column, a shard: a contiguous range read whole, at
        the file's speed, where ``gather`` would move it line by line.
        start, stop: row numbers as in ``arr[start:stop]`` (None: the ends;
        negative: from the end). A bound outside ``[-len, len]`` raises
        IndexError, start after stop ValueError, a non-integer TypeError.
        Returns a torch tensor on the array's CUDA device on the GPU target,
        a NumPy array on the CPU target (a CPU torch tensor for bfloat16),
        of shape ``(stop - start,) + shape[1:]``. out: a C-contiguous NumPy
        array or torch tensor of that shape and dtype (on the array's device,
        or on the CPU) to read into; it is returned. Byte-swapped dtypes come
        back native, as from ``gather``. Ctrl-C stops a long read. A failed
        read raises OSError with the path, byte ``offset`` and ``row``.
        """
        self._check_process()
        start, stop = self._row_range(start, stop)
        shape = (stop - start,) + self._row_shape
        out = self._new_output(shape) if out is None else self._checked_out(out, shape)
        self._read_into(start, stop - start, out)
        return out

    def _row_range(self, start, stop):
        n = len(self)
        bounds = []
        for name, v, default in (("start", start, 0), ("stop", stop, n)):
            if v is None:
                bounds.append(default)
                continue
            if isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{name} must be an integer row, got {v!r}")
            try:
                v = operator.index(v)
            except TypeError:
                raise TypeError(f"{name} must be an integer row, got {type(v).__name__} "
                                f"{v!r}") from None
            if not -n <= v <= n:
                raise _errors.index_error(self._path, v, n)
            bounds.append(v + n if v < 0 else v)
        if bounds[0] > bounds[1]:
            raise ValueError(f"{self._path}: start row {bounds[0]} is after stop row {bounds[1]}"
                             f" (start={start!r}, stop={stop!r})")
        return bounds[0], bounds[1]

    def _new_output(self, shape):
        """An empty result: on the array's CUDA device (torch), or NumPy on the CPU target."""
        d = self._impl.device
        if d >= 0 or self._dtype_name == "bfloat16":
            import torch

            return torch.empty(shape, dtype=getattr(torch, self._dtype_name),
                               device=f"cuda:{d}" if d >= 0 else "cpu")
        return np.empty(shape, dtype=self._dtype_name)

    def _checked_out(self, out, shape):
        """out as given, if a bulk read can fill it whole; else TypeError or ValueError."""
        kind = _framework(out)
        if kind == "torch":
            import torch

            want = getattr(torch, self._dtype_name)
            dev = out.device
            d = self._impl.device
            on_array = dev.type == "cuda" and d >= 0 and dev.index == d
            if not on_array and dev.type != "cpu":
                allowed = "the CPU (this is the CPU target)" if d < 0 else f"cuda:{d} or the CPU"
                raise ValueError(f"out is on {dev}; it must be on {allowed}")
            if out.requires_grad:
                raise ValueError("out requires grad: pass a tensor that does not")
            contiguous = out.is_contiguous()
        elif isinstance(out, np.ndarray):
            want = np.dtype(self._dtype_name) if self._dtype_name != "bfloat16" else None
            if want is None:
                raise TypeError("bfloat16 rows need a torch tensor as out")
            if not out.flags.writeable:
                raise ValueError("out is read-only")
            if out.dtype != want and out.dtype.name == want.name:
                raise TypeError(f"out has dtype {out.dtype} (not native byte order); results "
                                f"are native {want}")
            contiguous = out.flags.c_contiguous
        else:
            raise TypeError(f"out must be a NumPy array or a torch tensor, got "
                            f"{type(out).__name__}")
        if out.dtype != want:
            raise TypeError(f"out has dtype {out.dtype}, the array {self._dtype_name}")
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"out has shape {tuple(out.shape)}, rows [{shape[0]} of them] need "
                             f"{tuple(shape)}")
        if not contiguous:
            raise ValueError("out must be C-contiguous")
        return out

    def _read_into(self, start, n, out):
        """Bulk-reads rows [start, start + n) into out (checked), then swaps bytes if needed."""
        first = start * self._row_bytes  # n == 0 still asks the extension: a closed array raises
        if _framework(out) == "torch":
            import torch

            view = out.reshape(-1).view(torch.uint8)
            if out.is_cuda:
                with torch.cuda.device(out.device):
                    self._bulk(first, view, torch.cuda.current_stream(out.device).cuda_stream)
                    if self._swap:
                        u = view.view(-1, _swap_unit(self._dtype_name))
                        u.copy_(u.flip(-1))
                return
            self._bulk(first, view, 0)
            if self._swap:
                u = view.view(-1, _swap_unit(self._dtype_name))
                u.copy_(u.flip(-1))
            return
        self._bulk(first, out.reshape(-1).view(np.uint8), 0)
        if self._swap:
            out.byteswap(inplace=True)

    def _bulk(self, first_byte, view, stream):
        try:
            self._impl.read(first_byte, view, stream)
        except (OSError, ValueError) as e:
            self._failed(e, bulk=True)
            raise

    def gather_async(self, idx):
        """Starts gathering rows ``idx`` and returns a :class:`Pending` at once.

        With a CUDA index tensor the gather is queued on the current CUDA
        stream and nothing on the host waits for it: work queued later on
        that stream sees the rows (``pending.tensor``), and the I/O runs
        while the caller goes on (samples the next batch, trains on the last
        one). ``pending.wait()`` returns the rows and raises what ``gather``
        would (IndexError, OSError); a handle dropped unwaited raises its
        error at the array's next call. Other index types (NumPy, CPU
        tensors, the CPU target) gather at once and return a finished handle.
        """
        self._check_process()
        import torch

        if (_framework(idx) != "torch" or not idx.is_cuda or self._impl.device < 0):
            return Pending.ready(self.gather(idx))
        flat, out, view, stream = self._torch_call(idx)
        try:
            impl = self._impl.gather_async(flat.detach(), view, stream)
        except (OSError, ValueError) as e:
            self._failed(e)
            raise
        return Pending(self, impl, flat, out, view, tuple(idx.shape), torch.cuda.current_stream(flat.device))

    def prefetch(self, idx):
        """Brings rows ``idx`` into the cache without returning them: a
        :meth:`gather_async` whose rows are dropped. Returns the Pending
        (``wait()`` raises what a gather would)."""
        return self.gather_async(idx)

    def __getitem__(self, key):
        self._check_process()
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return self._gather_numpy(np.arange(start, stop, step, dtype=np.int64))
            # A contiguous run of rows: one bulk read into host memory.
            if self._dtype_name == "bfloat16":
                raise TypeError("bfloat16 results need PyTorch index tensors")
            out = np.empty((max(0, stop - start),) + self._row_shape, dtype=self._dtype_name)
            self._read_into(start, out.shape[0], out)
            return out
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            k = int(key)
            if not -len(self) <= k < len(self):
                raise _errors.index_error(self._path, k, len(self))
            return self._gather_numpy(np.array([k], dtype=np.int64))[0]
        if isinstance(key, tuple):
            raise TypeError("index with one tensor, slice or integer (row gathers take whole rows)")
        return self.gather(key)

    def stats(self):
        """Cache and controller counters: hits, misses, evictions, bytes (read from storage),
        ..., sorted_gathers (GPU gathers that read their rows in file order) and
        admitting_gathers (GPU gathers that cached one missed line in
        ``WARPSTORE_GATHER_MISS_ADMIT`` and read the other misses around the cache)."""
        self._check_process()
        return dict(self._impl.stats())

    def reset_stats(self):
        self._check_process()
        self._impl.reset_stats()

    def clear_cache(self):
        """Drops every cached line, and the host controller's read-ahead
        extents: the next gather starts cold and reads the file as it is now
        (a file changed behind the array's back). The memory controller's
        pinned copy of a file it could not map is the exception: it stays the
        file as it was at open."""
        self._check_process()
        self._impl.clear_cache()

    def close(self):
        """Frees the cache and stops the controller; later reads raise ValueError.
        In a forked child it does nothing: the array is the parent's."""
        if os.getpid() != self._pid:
            return
        self._user_closed = True
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- per framework ---------------------------------------------------
    def _run(self, call, lookup):
        """Runs `call` (one of the extension's gathers), which returns the
        first position of an out-of-range index or -1; lookup(pos) is the
        index there."""
        try:
            pos = call()
        except (OSError, ValueError) as e:
            self._failed(e)
            raise
        if pos >= 0:
            raise _errors.index_error(self._path, lookup(pos), len(self), pos)

    def _gather_numpy(self, idx):
        a = np.asarray(idx)
        if a.dtype == object:
            a = self._object_indices(a)
        if a.size == 0 and a.dtype.kind == "f" and not isinstance(idx, np.ndarray):
            a = a.astype(np.int64)  # x[[]]: an empty list is an empty index, as in NumPy
        if a.dtype.kind == "u":
            if a.size and a.max() > np.iinfo(np.int64).max:
                # Past int64 (which the extension reads): the first index
                # out of range, as the extension would name it.
                pos = int(np.flatnonzero(a.reshape(-1) >= len(self))[0])
                raise _errors.index_error(self._path, int(a.reshape(-1)[pos]), len(self), pos)
            a = a.astype(np.int64)
        elif a.dtype.kind != "i":
            raise TypeError(f"indices must be integers, got {a.dtype}")
        if a.dtype.itemsize not in (4, 8) or not a.dtype.isnative:
            a = a.astype(np.int64)  # native int64: the extension reads the words as they are
        flat = np.ascontiguousarray(a.reshape(-1))
        if self._dtype_name == "bfloat16":
            raise TypeError("bfloat16 results need PyTorch index tensors")
        out = np.empty((flat.size,) + self._row_shape, dtype=self._dtype_name)
        view = out.reshape(-1).view(np.uint8) if out.size else out
        self._run(lambda: self._impl.gather(flat, view, 0), lambda p: int(flat[p]))
        if self._swap:
            out.byteswap(inplace=True)
        return out.reshape(a.shape + self._row_shape)

    def _object_indices(self, a):
        """Lists NumPy holds as objects: Python ints past int64 (out of
        range: IndexError) or anything else (TypeError)."""
        flat = a.reshape(-1)
        for pos, v in enumerate(flat):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"indices must be integers, got {type(v).__name__} {v!r} at "
                                f"position {pos}")
        if any(not -2**63 <= v < 2**63 for v in flat):
            n = len(self)  # the first index out of range, as the extension would name it
            pos = next(p for p, v in enumerate(flat) if not -n <= v < n)
            raise _errors.index_error(self._path, int(flat[pos]), n, pos)
        return a.astype(np.int64)

    def _gather_torch_fast(self, idx):
        """The common case in the fewest steps (a 1 K-row gather is tens of
        microseconds all told): a 1-D contiguous int64 or int32 tensor on the
        CPU or a CUDA device, a dtype stored native. None for anything else
        (the general path then checks and converts it)."""
        if (not idx.is_contiguous() or idx.dim() != 1 or self._swap or
                self._torch_dtype is None or idx.dtype not in _TORCH_INDEX_DTYPES):
            return None
        n = idx.shape[0]
        if idx.is_cuda:
            where = idx.get_device()
            out = _TORCH_EMPTY((n,) + self._row_shape, dtype=self._torch_dtype, device=idx.device)
            stream = _raw_stream(where)
        elif idx.device.type == "cpu":
            where, stream = -1, 0
            out = _TORCH_EMPTY((n,) + self._row_shape, dtype=self._torch_dtype)
        else:
            return None
        try:  # self._run, inline
            pos = self._impl.gather_raw(idx.data_ptr(), idx.element_size(), n, where,
                                        out.data_ptr(), out.nbytes, stream)
        except (OSError, ValueError) as e:
            self._failed(e)
            raise
        if pos >= 0:
            raise _errors.index_error(self._path, int(idx[pos]), len(self), pos)
        return out

    def _gather_torch(self, idx):
        flat, out, view, stream = self._torch_call(idx, byte_view=False)
        dev = flat.device
        if dev.type in ("cpu", "cuda"):
            # Tensors this wrapper checked (flat) and made (out): their
            # addresses go straight in, no DLPack capsules (a small gather
            # is tens of microseconds all told).
            where = -1 if dev.type == "cpu" else dev.index
            self._run(lambda: self._impl.gather_raw(
                flat.data_ptr(), flat.element_size(), flat.numel(), where, out.data_ptr(),
                out.numel() * out.element_size(), stream), lambda p: int(flat[p]))
        else:
            view = _torch_bytes(out)
            self._run(lambda: self._impl.gather(flat.detach(), view, stream),
                      lambda p: int(flat[p]))
        return self._torch_result(out, view, tuple(idx.shape))

    def _torch_result(self, out, view, shape):
        if self._swap and out.numel():
            u = (view if view is not None else _torch_bytes(out)).view(
                -1, _swap_unit(self._dtype_name))
            u.copy_(u.flip(-1))
        return out.reshape(shape + self._row_shape)

    def _torch_call(self, idx, byte_view=True):
        """Checks a torch index tensor; returns the flat int32/int64 indices,
        the output, its byte view (None unless byte_view) and the CUDA stream
        (0 on the CPU). int64 and int32 indices, the usual case, take the
        shortest way: a small gather's time is mostly calls like these."""
        import torch

        dt = idx.dtype
        if dt is not torch.int64 and dt is not torch.int32:
            if dt is torch.bool or idx.is_floating_point() or idx.is_complex():
                raise TypeError(f"indices must be integers, got {dt}")
            if dt is torch.uint64 and idx.device.type != "meta" and idx.numel():
                # Values of 2**63 and above read as negative int64: out of
                # range, never counted from the end.
                signed = idx.reshape(-1).view(torch.int64)
                if bool((signed < 0).any()):
                    # The first index out of range (as an unsigned value: at
                    # or past the rows, or past int64), as the extension
                    # would name it.
                    pos = int(((signed < 0) | (signed >= len(self))).nonzero()[0])
                    value = int(signed[pos]) % 2**64
                    raise _errors.index_error(self._path, value, len(self), pos)
            idx = idx.to(torch.int64)
        dev = idx.device
        if dev.type == "meta":
            raise ValueError("indices are on the 'meta' device, which holds no values: "
                             "pass a CPU or CUDA tensor")
        flat = idx if idx.dim() == 1 and idx.is_contiguous() else idx.reshape(-1).contiguous()
        if self._torch_dtype is None:
            self._torch_dtype = getattr(torch, self._dtype_name)
            _torch_fast_path(torch)
        out = torch.empty((flat.shape[0],) + self._row_shape, dtype=self._torch_dtype, device=dev)
        stream = _current_stream(torch, dev) if dev.type == "cuda" else 0
        return flat, out, _torch_bytes(out) if byte_view else None, stream

    def _gather_cupy(self, idx):
        import cupy

        if idx.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers, got {idx.dtype}")
        if idx.dtype.kind == "u" and idx.size and int(idx.max()) > np.iinfo(np.int64).max:
            pos = int(cupy.flatnonzero(idx.reshape(-1) >= len(self))[0])
            raise _errors.index_error(self._path, int(idx.reshape(-1)[pos]), len(self), pos)
        if idx.dtype not in (cupy.int32, cupy.int64):
            idx = idx.astype(cupy.int64)
        flat = cupy.ascontiguousarray(idx.reshape(-1))
        out = cupy.empty((flat.size,) + self._row_shape, dtype=self._dtype_name)
        view = out.reshape(-1).view(cupy.uint8) if out.size else out
        stream = cupy.cuda.get_current_stream().ptr
        self._run(lambda: self._impl.gather(flat, view, stream), lambda p: int(flat[p]))
        if self._swap and out.size:
            u = view.reshape(-1, _swap_unit(self._dtype_name))
            u[...] = u[:, ::-1].copy()
        return out.reshape(idx.shape + self._row_shape)


# Set at the first torch gather (warpstore does not import torch itself):
# what Array.gather's fast path compares and calls.
_TORCH_TENSOR = [None]
_TORCH_INDEX_DTYPES = ()
_TORCH_EMPTY = None
_raw_stream = None


def _torch_fast_path(torch):
    global _TORCH_INDEX_DTYPES, _TORCH_EMPTY, _raw_stream
    if _TORCH_TENSOR[0] is not None:
        return
    # The raw current stream of a device index: torch's own accessor where it
    # has one, a fraction of a microsecond against several for
    # torch.cuda.current_stream().
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _raw_stream = raw if raw is not None else (
        lambda index: torch.cuda.current_stream(index).cuda_stream)
    _TORCH_INDEX_DTYPES = (torch.int64, torch.int32)
    _TORCH_EMPTY = torch.empty
    _TORCH_TENSOR[0] = torch.Tensor


def _torch_bytes(out):
    """A tensor's bytes as a flat uint8 view (an empty tensor as it is)."""
    import torch

    return out.reshape(-1).view(torch.uint8) if out.numel() else out


def _current_stream(torch, device):
    """The raw cudaStream_t current on `device` (a torch.device of type
    cuda), through the accessor _torch_fast_path picked."""
    _torch_fast_path(torch)
    return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())


class Pending:
    """A gather in flight, from :meth:`Array.gather_async`.

    ``tensor`` is the output, filled in the order of the CUDA stream that was
    current at the call (byte-swapped dtypes are swapped by ``wait``);
    ``done()`` asks without blocking; ``wait()`` blocks until the rows are
    in (Ctrl-C cancels) and returns them, or raises the gather's error.
    """

    def __init__(self, array, impl, flat, out, view, shape, stream):
        self._array, self._impl, self._flat = array, impl, flat
        self._out, self._view, self._shape, self._stream = out, view, shape, stream
        self._result = None

    @classmethod
    def ready(cls, result):
        p = cls.__new__(cls)
        p._impl, p._result = None, result
        return p

    @property
    def tensor(self):
        if self._result is not None:
            return self._result
        return self._out.reshape(self._shape + self._array._row_shape)

    def done(self):
        return self._impl is None or self._impl.done()

    def wait(self):
        if self._impl is None:
            return self._result
        a = self._array
        try:
            pos = self._impl.wait()
        except (OSError, ValueError) as e:
            a._failed(e)
            raise
        if pos >= 0:  # raised again by a later wait(), as a read error is
            raise _errors.index_error(a._path, int(self._flat[pos]), len(a), pos)
        self._impl = None  # the array's resources are back; the rows stay
        import torch

        with torch.cuda.stream(self._stream):
            self._result = a._torch_result(self._out, self._view, self._shape)
        self._flat = self._out = self._view = None
        return self._result


def _row_line(row_bytes):
    """The line for random rows of `row_bytes`: the row rounded up to a power
    of two, 512 B to 64 KiB (measured: 512 B rows through 512 B lines gather
    1.9x faster than through 4 KiB lines, which move 8x the bytes)."""
    line = 512
    while line < row_bytes and line < 65536:
        line *= 2
    return line


def _dimension(s, shape):
    """An integer size (int, NumPy integer, anything with __index__), never
    a bool, float or string: int(10.7) would silently drop the .7."""
    if isinstance(s, (bool, np.bool_)):
        raise TypeError(f"shape must hold integer sizes, got {shape!r} (a bool is not a size)")
    try:
        return operator.index(s)
    except TypeError:
        raise TypeError(f"shape must hold integer sizes, got {shape!r} ({type(s).__name__} "
                        f"{s!r} is not an integer)") from None


def _shape_tuple(shape):
    if shape is None:
        return (-1,)
    if isinstance(shape, (str, bytes)):
        raise TypeError(f"shape must be an integer or a tuple of integers, got {shape!r}")
    if not hasattr(shape, "__iter__") or (hasattr(shape, "ndim") and shape.ndim == 0):
        return (_dimension(shape, shape),)
    return tuple(_dimension(s, shape) for s in shape)


def _resolve_shape(path, dtype_name, shape, offset):
    itemsize = _ITEMSIZE[dtype_name]
    from ._files import file_size

    size = file_size(path)
    if size < offset:
        raise ValueError(f"{path}: offset {offset} is past the end of the file ({size} bytes)")
    shape = _shape_tuple(shape)
    if not shape or any(s == 0 or s < -1 for s in shape) or -1 in shape[1:]:
        raise ValueError(f"shape must be positive sizes (the first may be -1: as many rows as "
                         f"fit), got {shape}")
    row_bytes = itemsize * math.prod(shape[1:])
    if shape[0] == -1:
        shape = ((size - offset) // row_bytes,) + shape[1:]
        if shape[0] == 0:
            raise ValueError(f"{path}: not one row of {row_bytes} bytes fits after offset {offset}")
    need = offset + shape[0] * row_bytes
    if need > size:
        raise ValueError(f"{path}: shape {shape} of {dtype_name} at offset {offset} needs {need} "
                         f"bytes, the file has {size}")
    return shape


def _device_shape(path, shape):
    """The shape of an array over an NVMe device (an nvme:// path): given in
    full, since the namespace's size is read only when the device is open
    (the controller checks the rows against it)."""
    shape = _shape_tuple(shape)
    if not shape or any(s <= 0 for s in shape):
        raise ValueError(f"{path}: an array over an NVMe device needs its shape with the row count "
                         f"(N or (N, D, ...), no -1): the namespace's size is known only once the "
                         f"device is open; got {shape}")
    return shape


def open(path, dtype, shape=None, *, cache=None, line_size=None, controller=None, threads=None,
         deadline=None, direct=None, offset=0, mode="r", backend=None):  # noqa: A001 (mirrors builtins.open)
    """Opens `path` as an array of `dtype` and `shape` read through a cache.

    path: a file (or block device); its bytes from `offset` are the array in
        C order. `offset` must be a multiple of 512.
    dtype: NumPy or PyTorch dtype, or its name ('float32').
    shape: N (1-D), or (N, D, ...) for row gathers; N may be -1 (as many rows
        as the file holds); None: 1-D over the whole file.
    cache: a size (bytes or "2GiB": a cache of the array's own), or a
        ``warpstore.Cache`` that other arrays share (its line size is the
        array's: a different line_size raises ValueError).
    line_size, controller, threads, deadline, direct (and a cache size): override
        ``warpstore.settings`` (whose defaults come from the WARPSTORE_*
        environment variables and include/warpstore/settings.h). Unless
        line_size is set (here, by settings.set_line_size or
        WARPSTORE_LINE_SIZE), an [N, D, ...] array reads lines the size of
        its rows (rounded up to a power of two, 512 B to 64 KiB), so a miss
        moves one row, not 4 KiB; 1-D arrays keep 4 KiB lines. cache and
        line_size take bytes or strings like "2GiB"; controller is "auto"
        (the default: "memory" for a read-only file of at most an eighth of
        host memory with 90 % of its pages in the page cache at open, those
        pages mapped and pinned, no copy; "host" otherwise), "host" (io_uring
        service threads reading the file), "memory" (the file in pinned
        host memory, read by the GPU; stats() says "controller" and
        "mapped"), "nvme-model" (GPU threads drive the software NVMe
        device over the file: its queues, doorbells and PRPs, no CPU
        thread of warpstore's on the path) or "nvme" (GPU threads drive a
        real NVMe device through VFIO: `path` is "nvme://<PCI address>",
        namespace 1, or "nvme://<PCI address>/ns<N>"; "auto" picks "nvme"
        for such a path and no other controller takes one; the array is
        the namespace's raw blocks from LBA 0, and `shape` must give the
        row count, since the device's size is known only once it is open;
        docs/NVME.md); deadline is in seconds; direct
        is "auto" (through the page cache when at least half of a sample of
        the file's pages is cached there at open, else O_DIRECT where the
        file allows it; stats() says which: "direct", "resident_share"),
        "on" or "off" (buffered: reads come from the page cache when the
        file is there).
    mode: "r" only (arrays are read-only for now).
    backend: "cpu", "cuda" or "auto" (WARPSTORE_BACKEND; auto: CUDA where a
        GPU is visible).
    """
    if mode != "r":
        raise ValueError(f"mode {mode!r} is not supported: warpstore arrays are read-only "
                         "for now (mode='r')")
    path = os.fsdecode(os.fspath(path))  # bytes paths too; undecodable bytes round-trip
    if "\0" in path:
        raise ValueError(f"path holds a NUL character: {path!r}")
    device = _files.names_device(path)  # a device the nvme controller opens, not a file
    if not device:
        os.stat(path)  # FileNotFoundError, PermissionError, ... naming the path
    name, _ = _dtype_name(dtype)
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
        raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
    shape = _device_shape(path, shape) if device else _resolve_shape(path, name, shape, int(offset))
    s = _settings.as_dict()
    shared = cache if isinstance(cache, Cache) else None
    given = {"cache": None if shared else cache, "line_size": line_size, "controller": controller,
             "threads": threads, "deadline": deadline, "direct": direct}
    for k, v in given.items():
        if v is not None:
            s[k] = _settings._normalize(k, v)
    if shared is not None:
        if line_size is not None and s["line_size"] != shared.line_size:
            raise ValueError(f"{path}: line_size {s['line_size']} differs from the shared cache's "
                             f"{shared.line_size}")
        s["cache"], s["line_size"] = shared, shared.line_size
    elif line_size is None and len(shape) > 1 and not _settings.is_set("line_size"):
        line = _row_line(_ITEMSIZE[name] * math.prod(shape[1:]))
        try:  # a cache holds one set of lines at least (WARPSTORE_CACHE_WAYS, 16 by default)
            ways = int(os.environ.get("WARPSTORE_CACHE_WAYS", 16))
        except ValueError:
            ways = 16  # the extension names the bad value
        while line > 512 and s["cache"] < line * ways:
            line //= 2
        s["line_size"] = line
    return Array(path, dtype, shape, offset=int(offset), backend=backend, **s)
