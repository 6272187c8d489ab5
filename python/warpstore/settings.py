"""Runtime settings: each has an environment variable and a getter/setter here.

The defaults live in one place, include/warpstore/settings.h; the extension
reads them with the WARPSTORE_* variables applied (src/settings.cpp). A value
set here overrides the environment for arrays opened afterwards in this
process; ``reset()`` drops the overrides.

==========  ======================  ==========================================
setting     environment variable    meaning
==========  ======================  ==========================================
cache       WARPSTORE_CACHE_BYTES   bytes of GPU (or host) memory for the cache
line_size   WARPSTORE_LINE_SIZE     cache line, a power of two, 512 B to 64 KiB
controller  WARPSTORE_CONTROLLER    ``host`` (io_uring threads) or ``memory``
threads     WARPSTORE_THREADS       host controller service threads
deadline    WARPSTORE_TIMEOUT_MS    longest any wait may take (seconds here)
==========  ======================  ==========================================
"""
from ._backend import backend

ENVIRONMENT = {
    "cache": "WARPSTORE_CACHE_BYTES",
    "line_size": "WARPSTORE_LINE_SIZE",
    "controller": "WARPSTORE_CONTROLLER",
    "threads": "WARPSTORE_THREADS",
    "deadline": "WARPSTORE_TIMEOUT_MS",
}

_overrides = {}


def _size(v):
    if isinstance(v, str):
        return backend().parse_size(v)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"expected a positive size in bytes or a string like '2GiB', got {v!r}")
    return v


def _normalize(name, value):
    if name in ("cache", "line_size"):
        return _size(value)
    if name == "controller":
        if value not in ("host", "memory"):
            raise ValueError(f"controller must be 'host' or 'memory', got {value!r}")
        return value
    if name == "threads":
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"threads must be a positive integer, got {value!r}")
        return value
    if name == "deadline":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"deadline must be a positive number of seconds, got {value!r}")
        return float(value)
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


def as_dict():
    """Every setting's current value."""
    env = _environment()
    return {k: _overrides.get(k, env[k]) for k in ENVIRONMENT}


def check(s):
    """Raises ValueError naming the first bad setting of the dict `s`."""
    backend().validate_settings(s["cache"], s["line_size"], s["controller"], s["threads"],
                                max(1, int(round(s["deadline"] * 1000))))


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
