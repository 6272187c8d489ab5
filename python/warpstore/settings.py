"""Runtime settings: each has an environment variable and a getter/setter here.

Every setting is described once, in the library's settings table
(include/warpstore/settings.h, src/settings.cpp): its name, environment
variable, type, default, range and doc line. ``TABLE`` is that table (a dict
a setting); those with a Python name (``cache``, ``line_size``,
``controller``, ``threads``, ``deadline``, ``direct``) are the ones this
module gets and sets, and ``ENVIRONMENT`` maps them to their variables.
README.md's settings table is generated from the same table.

A value set here overrides the environment for arrays opened afterwards in
this process; ``reset()`` drops the overrides. ``deadline`` is in seconds here
(``WARPSTORE_TIMEOUT_MS`` is in milliseconds).
"""
import importlib
import math
import os

from ._backend import backend

_overrides = {}
_loaded = {}


def _table():
    # Every target compiles the same table: read it from the CPU one where
    # there is one, so that reading it chooses no backend (and no CUDA).
    if "table" not in _loaded:
        try:
            module = importlib.import_module("warpstore._warpstore_cpu")
        except ImportError:
            module = backend()
        table = tuple(dict(t) for t in module.settings_table())
        _loaded["by_python"] = {t["python"]: t for t in table if t["python"]}
        _loaded["environment"] = {p: t["env"] for p, t in _loaded["by_python"].items()}
        _loaded["table"] = table
    return _loaded


def __getattr__(name):
    if name == "TABLE":
        return _table()["table"]
    if name == "ENVIRONMENT":
        return dict(_table()["environment"])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _describe(name):
    by_python = _table()["by_python"]
    if name not in by_python:
        raise KeyError(f"no setting {name!r}; settings: {', '.join(by_python)}")
    return by_python[name]


def _integer(name, t, v):
    if v < t["min"] or (t["power_of_two"] and v & (v - 1)):
        raise ValueError(f"{name} must be {t['range']}, got {v}")
    if v > t["max"]:
        raise ValueError(f"{name} of {v} is too large: {name} must be {t['range']} "
                         f"(at most {t['max']})")
    return v


def _seconds(name, t, value):
    # The variable counts milliseconds; here the value is in seconds.
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (isinstance(value, float) and not math.isfinite(value)) or value <= 0):
        raise ValueError(f"{name} must be a finite positive number of seconds (at least "
                         f"{t['min'] / 1000}, a millisecond), got {value!r}")
    if value < t["min"] / 1000:
        raise ValueError(f"{name} of {value!r} s is under a millisecond, the smallest "
                         f"{name} ({t['min'] / 1000} s)")
    if round(value * 1000) > t["max"]:
        raise ValueError(f"{name} of {value!r} s is too long: at most {t['max'] / 1000:.3f} s")
    return float(value)


def _words(choices):
    quoted = [f"'{c}'" for c in choices]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _normalize(name, value):
    t = _describe(name)
    kind = t["type"]
    if kind == "choice":
        if not isinstance(value, str) or value not in t["choices"]:
            raise ValueError(f"{name} must be {_words(t['choices'])}, got {value!r}")
        return value
    if kind == "milliseconds":
        return _seconds(name, t, value)
    if kind == "size" and isinstance(value, str):
        value = backend().parse_size(value)
    elif kind == "size":
        if isinstance(value, bool) or not isinstance(value, int) or value < max(t["min"], 1):
            raise ValueError(f"{name}: expected a positive size in bytes or a string like "
                             f"'2GiB', got {value!r}")
    elif kind == "flag" and isinstance(value, bool):
        value = int(value)
    elif isinstance(value, bool) or not isinstance(value, int) or value < t["min"]:
        what = "a positive integer" if t["min"] >= 1 else "a non-negative integer"
        raise ValueError(f"{name} must be {what} ({t['range']}), got {value!r}")
    return _integer(name, t, value)


def _environment():
    env = backend().environment_settings()
    out = {}
    for python, t in _table()["by_python"].items():
        v = env[t["name"]]
        out[python] = v / 1000.0 if t["type"] == "milliseconds" else v
    return out


def get(name):
    """The value arrays opened now would get for `name`."""
    _describe(name)
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
    return name in _overrides or bool(os.environ.get(_describe(name)["env"]))


def as_dict():
    """Every setting's current value."""
    env = _environment()
    return {k: _overrides.get(k, env[k]) for k in _table()["by_python"]}


def check(s):
    """Raises ValueError naming the first bad setting of the dict `s`."""
    backend().validate_settings(s["cache"], s["line_size"], s["controller"], s["threads"],
                                int(round(s["deadline"] * 1000)), s["direct"])


def _accessors(name):
    def getter():
        return get(name)

    def setter(value):
        set(name, value)

    getter.__doc__ = f"The {name} setting (see TABLE for its variable, range and meaning)."
    setter.__doc__ = f"Overrides the {name} setting for arrays opened from now on."
    return getter, setter


cache_size, set_cache_size = _accessors("cache")
line_size, set_line_size = _accessors("line_size")
controller, set_controller = _accessors("controller")
threads, set_threads = _accessors("threads")
deadline, set_deadline = _accessors("deadline")
direct, set_direct = _accessors("direct")
