"""An open array is a good citizen of the process: its service threads sleep
when nothing is asked of them, so they take no core from the user's own
threads (PyTorch's, a DataLoader's): an idle array costs a few thousandths
of a core, and a busy one stops polling as soon as its gather returns."""
import resource
import time

import numpy as np

import warpstore


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_share(seconds):
    c0, w0 = cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds() - c0) / (time.perf_counter() - w0)


def test_an_idle_array_gives_its_cores_back(features):
    path, data = features
    with warpstore.open(path, "float32", (-1, 100), cache="1MiB", threads=4) as a:
        idx = np.random.default_rng(0).integers(0, len(data), 2000)
        np.testing.assert_array_equal(a[idx], data[idx])
        time.sleep(0.1)  # the threads sleep within a few ms of the last command
        share = cpu_share(2.0)
        assert share < 0.03, f"an idle array took {share:.3f} of a core"
        # Asleep, they still serve the next gather at once.
        np.testing.assert_array_equal(a[idx[::-1]], data[idx[::-1]])


def test_many_idle_arrays_cost_little(features):
    path, data = features
    arrays = [warpstore.open(path, "float32", (-1, 100), cache="1MiB", threads=2)
              for _ in range(20)]
    try:
        for a in arrays:
            np.testing.assert_array_equal(a[[5, 7]], data[[5, 7]])
        time.sleep(0.1)
        share = cpu_share(2.0)
        assert share < 0.10, f"20 idle arrays took {share:.3f} of a core"
        t0 = time.perf_counter()
        for a in arrays:
            np.testing.assert_array_equal(a[[9]], data[[9]])
        assert time.perf_counter() - t0 < 2.0
    finally:
        for a in arrays:
            a.close()


def test_direct_auto_reads_a_cached_file_through_the_page_cache(features):
    path, data = features
    with open(path, "rb") as f:  # the file is in the page cache now
        f.read()
    with warpstore.open(path, "float32", (-1, 100), cache="1MiB", threads=1, direct="auto") as a:
        s = a.stats()
        assert s["direct"] is False, s
        assert s["resident_share"] == -1 or s["resident_share"] >= 0.5
        np.testing.assert_array_equal(a[[3, 9]], data[[3, 9]])
    with warpstore.open(path, "float32", (-1, 100), cache="1MiB", threads=1, direct="off") as a:
        assert a.stats()["direct"] is False
