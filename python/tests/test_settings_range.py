"""Settings out of range are refused with the setting, the value and the
range, never wrapped, rounded or passed on to the extension as a type error."""
import math

import numpy as np
import pytest

import warpstore
from warpstore import settings


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("nan")])
def test_deadline_must_be_finite(value):
    with pytest.raises(ValueError, match="deadline must be a finite positive number of seconds"):
        settings.set_deadline(value)


@pytest.mark.parametrize("value", [0.0004, 1e-9, 0.0009])
def test_deadline_under_a_millisecond_is_refused_not_rounded_up(value):
    with pytest.raises(ValueError, match="deadline"):
        settings.set_deadline(value)
    settings.set_deadline(0.001)
    assert settings.deadline() == 0.001


def test_deadline_whose_nanoseconds_overflow_is_refused():
    with pytest.raises(ValueError, match="deadline"):
        settings.set_deadline(1e20)
    with pytest.raises(ValueError, match="deadline"):
        settings.set_deadline(2**64)
    with pytest.raises(ValueError, match="deadline"):
        settings.set_deadline(10**400)  # no float holds it
    settings.set_deadline(18446744073.0)  # just fits
    assert settings.deadline() == 18446744073.0


def test_deadline_of_open_is_checked_too(features):
    path, _ = features
    with pytest.raises(ValueError, match="deadline must be a finite"):
        warpstore.open(path, "float32", (-1, 100), deadline=math.nan)
    with pytest.raises(ValueError, match="deadline"):
        warpstore.open(path, "float32", (-1, 100), deadline=0.0001)


@pytest.mark.parametrize("name,value", [("cache", 2**64), ("cache", 2**70), ("line_size", 2**32),
                                        ("line_size", 2**40), ("line_size", "8GiB"),
                                        ("threads", 2**32), ("threads", 2**64)])
def test_too_large_for_the_extension_is_a_value_error_naming_the_setting(name, value):
    with pytest.raises(ValueError, match=name):
        settings.set(name, value)


def test_too_large_in_open_is_a_value_error_not_a_type_error(features):
    path, _ = features
    for kw in ({"cache": 2**64}, {"line_size": 2**32}, {"threads": 2**32}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            warpstore.open(path, "float32", (-1, 100), **kw)


def test_cache_that_is_not_a_power_of_two_of_sets_is_honoured(features):
    # 3 MiB is 48 sets of 16 lines of 4 KiB; it used to become 32 sets (2 MiB).
    path, data = features
    with warpstore.open(path, "float32", (-1, 100), cache="3MiB", threads=2) as a:
        assert a.stats()["cache_bytes"] == 3 << 20
        idx = np.random.default_rng(1).integers(0, len(data), 5000)
        np.testing.assert_array_equal(a[idx], data[idx])


@pytest.mark.parametrize("value,words", [
    ("18446744073710", ["WARPSTORE_TIMEOUT_MS=18446744073710", "18446744073709"]),
    ("0", ["WARPSTORE_TIMEOUT_MS=0", "positive"]),
])
def test_environment_timeout_out_of_range(monkeypatch, value, words):
    monkeypatch.setenv("WARPSTORE_TIMEOUT_MS", value)
    with pytest.raises(ValueError) as e:
        settings.deadline()
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("var", ["WARPSTORE_THREADS", "WARPSTORE_LINE_SIZE", "WARPSTORE_QUEUES",
                                 "WARPSTORE_QUEUE_DEPTH", "WARPSTORE_URING_DEPTH",
                                 "WARPSTORE_CACHE_WAYS"])
def test_environment_counts_past_32_bits_are_refused(monkeypatch, var):
    monkeypatch.setenv(var, "4294967808")  # 2**32 + 512 wrapped to 512
    with pytest.raises(ValueError, match=f"{var}=4294967808 is out of range"):
        settings.as_dict()
