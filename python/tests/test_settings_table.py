"""The settings table is the one description: Python and C++ agree on every
entry, every variable is read, and out-of-range values name the variable."""
import pytest

from warpstore import backend, settings


def _valid_other(t):
    if t["type"] == "choice":
        return next(c for c in t["choices"] if c != t["default"])
    return t["min"] if t["default"] != t["min"] else t["max"]


def test_the_table_is_the_extensions():
    assert [t["name"] for t in settings.TABLE] == [t["name"] for t in backend().settings_table()]
    assert settings.ENVIRONMENT == {t["python"]: t["env"] for t in settings.TABLE if t["python"]}
    assert set(settings.ENVIRONMENT) == {"cache", "line_size", "controller", "threads",
                                         "deadline", "direct"}
    tuning = {t["name"] for t in settings.TABLE if t["group"] == "tuning"}
    assert tuning == {"combine_writes", "eager_write_back", "overlapped_eviction", "deliver",
                      "write_behind_bytes", "combine_reads", "queue_spread", "gather_sm_share",
                      "gather_sort_rows", "gather_sort_bytes", "gather_miss_admit",
                      "fetch_priority", "read_ahead", "read_ahead_cache", "bulk_chunk",
                      "memory_fill_together"}


@pytest.mark.parametrize("t", backend().settings_table(),
                         ids=lambda t: t["env"])
def test_every_variable_reaches_cpp_and_python(monkeypatch, t):
    value = _valid_other(t)
    monkeypatch.setenv(t["env"], str(value))
    assert backend().environment_settings()[t["name"]] == value
    if t["python"]:
        expected = value / 1000 if t["type"] == "milliseconds" else value
        assert settings.get(t["python"]) == expected


@pytest.mark.parametrize("t", [t for t in backend().settings_table()
                               if t["type"] != "choice" and t["max"] < 2**64 - 1],
                         ids=lambda t: t["env"])
def test_out_of_range_names_the_variable(monkeypatch, t):
    monkeypatch.setenv(t["env"], str(t["max"] + 1))
    with pytest.raises(ValueError, match=f"{t['env']}={t['max'] + 1}"):
        backend().environment_settings()


@pytest.mark.parametrize("name", ["cache", "line_size", "threads", "controller", "direct"])
def test_python_checks_use_the_tables_range(name):
    t = next(t for t in settings.TABLE if t["python"] == name)
    bad = "sideways" if t["type"] == "choice" else t["max"] + 1
    with pytest.raises(ValueError, match=name):
        settings.set(name, bad)
