"""Runtime settings: each has an environment variable and a getter/setter here.

The defaults live in one place, include/warpstore/settings.h; the extension
reads them with the WARPSTORE_* variables applied (src/settings.cpp). A value
set here overrides the environment for arrays opened afterwards in this
process; ``reset()`` drops the overrides.

==========  ======================  ==========================================
setting     environment variable    meaning
==========  ======================  ==========================================
cache       WARPSTORE_CACHE_BYTES   bytes of GPU (or host) memory for the cache,
                                    rounded down to whole sets (16 lines each)
line_size   WARPSTORE_LINE_SIZE     cache line, a power of two, 512 B to 64 KiB
controller  WARPSTORE_CONTROLLER    ``host`` (io_uring threads) or ``memory``
threads     WARPSTORE_THREADS       host controller service threads
deadline    WARPSTORE_TIMEOUT_MS    longest any wait may take (seconds here, at
                                    least 0.001)
direct      WARPSTORE_DIRECT        host controller I/O: ``auto`` (buffered when
                                    half the sampled pages are cached, else
                                    O_DIRECT where the file allows it),
                                    ``on``, ``off`` (buffered, through the
                                    page cache)
==========  ======================  ==========================================
"""
import math

import os

from ._backend import backend

ENVIRONMENT = {
    "cache": "WARPSTORE_CACHE_BYTES",
    "line_size": "WARPSTORE_LINE_SIZE",
    "controller": "WARPSTORE_CONTROLLER",
    "threads": "WARPSTORE_THREADS",
    "deadline": "WARPSTORE_TIMEOUT_MS",
    "direct": "WARPSTORE_DIRECT",
}

_overrides = {}


# The extension takes the cache size as a 64-bit and the line size and thread
# count as 32-bit unsigned integers, and the deadline in whole milliseconds
# whose nanoseconds must fit 64 bits.
_LIMITS = {"cache": 2**64 - 1, "line_size": 2**32 - 1, "threads": 2**32 - 1}
_MAX_DEADLINE_MS = (2**64 - 1) // 1_000_000


def _size(name, v):
    if isinstance(v, str):
        v = backend().parse_size(v)
    elif isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name}: expected a positive size in bytes or a string like '2GiB', "
                         f"got {v!r}")
    if name == "line_size" and v > _LIMITS[name]:
        raise ValueError(f"line_size must be a power of two from 512 to 65536, got {v}")
    if v > _LIMITS[name]:
        raise ValueError(f"{name} of {v} bytes is too large (at most {_LIMITS[name]})")
    return v


def _normalize(name, value):
    if name in ("cache", "line_size"):
        return _size(name, value)
    if name == "controller":
        if value not in ("host", "memory"):
            raise ValueError(f"controller must be 'host' or 'memory', got {value!r}")
        return value
    if name == "threads":
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"threads must be a positive integer, got {value!r}")
        if value > _LIMITS["threads"]:
            raise ValueError(f"threads must be from 1 to 256, got {value}")
        return value
    if name == "deadline":
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (isinstance(value, float) and not math.isfinite(value)) or value <= 0):
            raise ValueError(f"deadline must be a finite positive number of seconds (at least "
                             f"0.001, a millisecond), got {value!r}")
        if value < 0.001:
            raise ValueError(f"deadline of {value!r} s is under a millisecond, the smallest "
                             f"deadline (0.001 s)")
        if round(value * 1000) > _MAX_DEADLINE_MS:
            raise ValueError(f"deadline of {value!r} s is too long: at most "
                             f"{_MAX_DEADLINE_MS / 1000:.3f} s")
        return float(value)
    if name == "direct":
        if value not in ("auto", "on", "off"):
            raise ValueError(f"direct must be 'auto', 'on' or 'off', got {value!r}")
        return value
    raise KeyError(f"no setting {name!r}; settings: {', '.join(ENVIRONMENT)}")


def _environment():
    env = dict(backend().environment_settings())
    env["deadline"] = env.pop("timeout_ms") / 1000.0
    return env


def get(name):
    """The value arrays opened now would get for `name`."""
    if name not in ENVIRONMENT:
        raise KeyError(f"no setting {name!r}; settings: {', '.join(ENVIRONMENT)}")
    return _overrides[name] if name in _overrides else _environment()[name]


def set(name, value):  # noqa: A001 (the module's setter)
    """Overrides `name` for arrays opened from now on; raises ValueError for a bad value."""
    value = _normalize(name, value)
    merged = dict(as_dict(), **{name: value})
    check(merged)
    _overrides[name] = value


def reset(name=None):
    """Drops the override of `name` (or of every setting)."""
    if name is None:
        _overrides.clear()
    else:
        _overrides.pop(name, None)


def is_set(name):
    """Whether `name` was chosen by the user: overridden here or set in the environment."""
    return name in _overrides or bool(os.environ.get(ENVIRONMENT[name]))


def as_dict():
    """Every setting's current value."""
    env = _environment()
    return {k: _overrides.get(k, env[k]) for k in ENVIRONMENT}


def check(s):
    """Raises ValueError naming the first bad setting of the dict `s`."""
    backend().validate_settings(s["cache"], s["line_size"], s["controller"], s["threads"],
                                int(round(s["deadline"] * 1000)), s["direct"])


def _accessors(name):
    def getter():
        return get(name)

    def setter(value):
        set(name, value)

    getter.__doc__ = f"The {name} setting ({ENVIRONMENT[name]})."
    setter.__doc__ = f"Overrides the {name} setting for arrays opened from now on."
    return getter, setter


cache_size, set_cache_size = _accessors("cache")
line_size, set_line_size = _accessors("line_size")
controller, set_controller = _accessors("controller")
threads, set_threads = _accessors("threads")
deadline, set_deadline = _accessors("deadline")
direct, set_direct = _accessors("direct")
