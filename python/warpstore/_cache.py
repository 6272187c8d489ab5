"""warpstore.Cache: one cache that several arrays share."""
import os
import weakref

from . import settings as _settings
from ._backend import backend as _backend
from ._backend import check_cuda_process as _check_cuda_process


class Cache:
    """Cache memory (on the GPU, or in host memory on the CPU target) that
    several arrays share, so a process with many arrays sizes one cache
    instead of one per array::

        c = warpstore.Cache("4GiB")
        x = warpstore.open("features.f32", "float32", (-1, 128), cache=c)
        y = warpstore.open("labels.i64", "int64", cache=c)

    size: bytes or a string like "4GiB" (rounded down to whole sets).
    line_size: the line every array on the cache reads (default:
        ``warpstore.settings`` / WARPSTORE_LINE_SIZE, 4 KiB); ``open`` with
        another line_size raises ValueError.
    ways: lines per set (16).
    backend: "cpu", "cuda" or "auto", as for ``open``; the arrays must use
        the same target, and (CUDA) the device current here.

    ``clear()`` drops every line: it waits for the gathers in flight of
    every array on the cache, and ``Array.clear_cache()`` of such an array
    does the same. ``stats()`` counts the accesses of all of them. An array
    that closes takes its lines out of the cache; the memory is freed once
    the Cache and every array on it are gone. Pickled, a Cache travels as its
    size, line size and ways: arrays unpickled together share a new one.
    A Cache does not cross ``fork()``: in a forked child, using it (or
    opening an array on it) raises RuntimeError; make a new one there.
    """

    def __init__(self, size, *, line_size=None, ways=16, backend=None):
        if isinstance(ways, bool) or not isinstance(ways, int) or not 1 <= ways <= 2**31:
            raise ValueError(f"ways must be a positive integer, got {ways!r}")
        self._backend_name = backend
        self._backend = _backend(backend)
        _check_cuda_process(self._backend)
        size = _settings._normalize("cache", size)
        line = _settings._normalize("line_size", line_size) if line_size is not None \
            else _settings.get("line_size")
        self._ways = ways
        self._pid = os.getpid()
        self._impl = self._backend.Cache(size, line, ways)
        _live.add(self)

    def _check_process(self):
        """Its lines, locks and arrays are the parent's after fork(): a call
        in the child could wait for a parent thread's gather that is not
        there (forever), or free the parent's memory."""
        if os.getpid() != self._pid:
            raise RuntimeError(_FORK_MESSAGE)

    def __reduce__(self):
        return (_rebuild, (self.size, self.line_size, self._ways, self._backend_name))

    @property
    def size(self):
        """Bytes of cache lines (the size asked for, rounded down to whole sets)."""
        return self._impl.bytes

    @property
    def line_size(self):
        return self._impl.line_size

    @property
    def ways(self):
        return self._ways

    @property
    def device(self):
        d = self._impl.device
        return "cpu" if d < 0 else f"cuda:{d}"

    @property
    def arrays(self):
        """How many open arrays use the cache."""
        self._check_process()
        return self._impl.arrays

    def stats(self):
        """hits, misses, evictions, bytes, retries, read_around, errors and hit_rate of every array on it."""
        self._check_process()
        return dict(self._impl.stats())

    def reset_stats(self):
        self._check_process()
        self._impl.reset_stats()

    def clear(self):
        """Drops every line (waits for the gathers in flight of every array on it)."""
        self._check_process()
        self._impl.clear()

    def __repr__(self):
        arrays = (f"{self.arrays} arrays" if os.getpid() == self._pid else
                  "the parent's: unusable after fork()")
        return (f"warpstore.Cache({self.size} bytes, line_size={self.line_size}, ways={self._ways}, "
                f"{self.device}, {arrays})")


# Every Cache, so a forked child can disown them (_array._after_fork).
_live = weakref.WeakSet()

_FORK_MESSAGE = ("a warpstore.Cache cannot cross fork(): make a new Cache in the child "
                 "(DataLoader workers: in worker_init_fn)")


def _rebuild(size, line_size, ways, backend):
    return Cache(size, line_size=line_size, ways=ways, backend=backend)
