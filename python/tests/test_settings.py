"""Settings: defaults from one place, environment variables, getters and setters."""
import numpy as np
import pytest

import warpstore
from warpstore import settings


def test_defaults_come_from_the_library():
    assert settings.line_size() == 4096
    assert settings.controller() == "auto"
    assert settings.cache_size() == 1 << 30
    assert settings.deadline() == 10.0
    assert settings.direct() == "auto"
    assert settings.threads() >= 1


def test_environment(monkeypatch):
    monkeypatch.setenv("WARPSTORE_CACHE_BYTES", "3MiB")
    monkeypatch.setenv("WARPSTORE_LINE_SIZE", "8K")
    monkeypatch.setenv("WARPSTORE_CONTROLLER", "memory")
    monkeypatch.setenv("WARPSTORE_THREADS", "3")
    monkeypatch.setenv("WARPSTORE_TIMEOUT_MS", "2500")
    monkeypatch.setenv("WARPSTORE_DIRECT", "off")
    assert settings.as_dict() == {"cache": 3 << 20, "line_size": 8192, "controller": "memory",
                                  "threads": 3, "deadline": 2.5, "direct": "off"}


def test_setters_override_the_environment_and_reset(monkeypatch):
    monkeypatch.setenv("WARPSTORE_THREADS", "3")
    settings.set_threads(2)
    settings.set_cache_size("2MiB")
    settings.set_line_size(512)
    settings.set_controller("memory")
    settings.set_deadline(1.5)
    settings.set_direct("on")
    assert settings.as_dict() == {"cache": 2 << 20, "line_size": 512, "controller": "memory",
                                  "threads": 2, "deadline": 1.5, "direct": "on"}
    settings.reset("threads")
    assert settings.threads() == 3
    settings.reset()
    assert settings.controller() == "auto"


@pytest.mark.parametrize("name,value", [("line_size", 1000), ("controller", "vfio"), ("threads", 0),
                                        ("cache", "lots"), ("deadline", -1), ("cache", 4096),
                                        ("direct", "maybe")])
def test_bad_values_are_value_errors(name, value):
    with pytest.raises(ValueError):
        settings.set(name, value)


def test_unknown_setting():
    with pytest.raises(KeyError):
        settings.get("colour")


def test_open_uses_the_settings(features):
    path, data = features
    settings.set_cache_size("2MiB")
    settings.set_line_size("8KiB")
    settings.set_threads(2)
    with warpstore.open(path, "float32", (-1, 100)) as a:
        s = a.stats()
        assert s["cache_bytes"] == 2 << 20 and s["line_size"] == 8192
        np.testing.assert_array_equal(a[[5]], data[[5]])
    with warpstore.open(path, "float32", (-1, 100), line_size=512, cache="1MiB") as a:
        assert a.stats()["line_size"] == 512
