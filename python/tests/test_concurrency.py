"""Arrays shared by threads, interrupted by Ctrl-C, read with unusual indices
and byte orders: every call gets its own rows and its own errors, or a clear
exception; nothing returns wrong data.

Each test here failed on the package before per-call error state, the call
gate (close and clear_cache wait for calls in flight), interruptible waits
and the CPU target's process-wide lane pool (the fork test guards that
pool's fork handling: it hung with a child reusing the parent's pool)."""
import os
import pathlib
import signal
import sys
import threading
import time
import traceback

import numpy as np
import pytest

import warpstore
from conftest import write

ROWS, DIM = 4096, 64
ROUNDS = int(os.environ.get("WARPSTORE_STRESS_ROUNDS", "150"))


@pytest.fixture
def F(tmp_path):
    """F: a 4096x64 float32 file whose rows all differ."""
    data = np.arange(ROWS * DIM, dtype=np.float32).reshape(ROWS, DIM)
    return write(tmp_path / "F.f32", data), data


def run_threads(*targets):
    """Runs each target in its own thread; re-raises the first failure."""
    failures = []

    def wrap(fn):
        def body():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 (reported below)
                failures.append(e)
        return body

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread hung"
    if failures:
        raise failures[0]


def test_errors_belong_to_the_call_that_made_them(F):
    path, data = F
    rng = np.random.default_rng(1)
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1) as a:
        def bad():
            for _ in range(ROUNDS):
                idx = rng.integers(0, ROWS, 3000)
                idx[1500] = ROWS  # one index out of range
                with pytest.raises(IndexError, match=rf"index {ROWS} \(at position 1500\)"):
                    a[idx]

        def good():
            local = np.random.default_rng(2)
            for _ in range(ROUNDS):
                idx = local.integers(0, ROWS, 3000)
                np.testing.assert_array_equal(a[idx], data[idx])

        run_threads(bad, good, good)


def test_clear_cache_during_gathers_returns_right_rows(F):
    path, data = F
    stop = threading.Event()
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1) as a:
        def clearer():
            while not stop.is_set():
                a.clear_cache()

        def reader(seed):
            def body():
                local = np.random.default_rng(seed)
                try:
                    for _ in range(ROUNDS):
                        idx = local.integers(0, ROWS, 3000)
                        np.testing.assert_array_equal(a[idx], data[idx])
                finally:
                    stop.set()
            return body

        run_threads(clearer, reader(3), reader(4))


def test_close_waits_for_gathers_in_flight(F):
    path, data = F
    for trial in range(20):
        a = warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1)
        started = threading.Barrier(3)
        outcomes = []

        def reader(seed):
            def body():
                local = np.random.default_rng(seed)
                started.wait()
                while True:
                    idx = local.integers(0, ROWS, 2000)
                    try:
                        rows = a[idx]
                    except ValueError as e:
                        assert "closed" in str(e)
                        outcomes.append("closed")
                        return
                    np.testing.assert_array_equal(rows, data[idx])
            return body

        def closer():
            started.wait()
            time.sleep(0.002 * trial)
            a.close()
            assert a.closed

        run_threads(reader(10 + trial), reader(50 + trial), closer)
        assert outcomes == ["closed", "closed"]
        with pytest.raises(ValueError, match="closed"):
            a[[0]]


def test_torch_uint64_indices_do_not_wrap(F):
    torch = pytest.importorskip("torch")
    path, data = F
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1) as a:
        with pytest.raises(IndexError, match=r"index 18446744073709551615 \(at position 1\)"):
            a[torch.tensor([3, 2**64 - 1], dtype=torch.uint64)]
        with pytest.raises(IndexError, match=r"index 9223372036854775808 \(at position 0\)"):
            a[torch.tensor([2**63], dtype=torch.uint64)]
        with pytest.raises(IndexError, match=r"index 4096 \(at position 0\)"):
            a[torch.tensor([ROWS], dtype=torch.uint64)]
        idx = torch.tensor([0, 7, ROWS - 1], dtype=torch.uint64)
        np.testing.assert_array_equal(a[idx].numpy(), data[[0, 7, ROWS - 1]])


def test_python_ints_past_int64_are_index_errors(F):
    path, _ = F
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1) as a:
        for k in (2**63, 2**64, -(2**63) - 1, ROWS, -ROWS - 1):
            with pytest.raises(IndexError, match="out of range"):
                a[k]
        with pytest.raises(IndexError, match="out of range"):
            a[np.array([2**64 - 1], dtype=np.uint64)]


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">u2", ">f8", ">c8", "<f4"])
def test_byte_order_is_honoured(tmp_path, dtype):
    rng = np.random.default_rng(5)
    ref = (rng.standard_normal(4096) * 1000).astype(dtype) if dtype[1] in "fc" else \
        rng.integers(0, 60000, 4096).astype(dtype)
    path = write(tmp_path / "be.bin", ref)
    idx = rng.integers(0, 4096, 1000)
    with warpstore.open(path, dtype, cache="1MiB", threads=1) as a:
        got = a[idx]
        assert got.dtype.isnative
        np.testing.assert_array_equal(got, ref[idx])
        np.testing.assert_array_equal(a[5], ref[5])
    with warpstore.open(path, dtype, (-1, 16), cache="1MiB", threads=1) as a:
        rows = idx % 256
        np.testing.assert_array_equal(a[rows], ref.reshape(-1, 16)[rows])


def test_byte_order_torch(tmp_path):
    torch = pytest.importorskip("torch")
    ref = np.arange(2048, dtype=">f4")
    path = write(tmp_path / "be.bin", ref)
    with warpstore.open(path, ">f4", (-1, 8), cache="1MiB", threads=1) as a:
        got = a[torch.tensor([0, 5, 255])]
        np.testing.assert_array_equal(got.numpy(), ref.reshape(-1, 8)[[0, 5, 255]])


def test_read_only_and_memmapped_indices(F, tmp_path):
    path, data = F
    idx = np.array([5, 1, 4095, 0])
    idx.setflags(write=False)
    np.save(tmp_path / "idx.npy", idx)
    mm = np.load(tmp_path / "idx.npy", mmap_mode="r")
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1) as a:
        np.testing.assert_array_equal(a[idx], data[idx])
        np.testing.assert_array_equal(a[mm], data[idx])
        np.testing.assert_array_equal(a[np.array([3, 2], dtype=">i8")], data[[3, 2]])
        assert a[[]].shape == (0, DIM)


def test_meta_tensor_indices_are_refused(F):
    torch = pytest.importorskip("torch")
    path, _ = F
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1) as a:
        with pytest.raises(ValueError, match="meta"):
            a[torch.empty(3, dtype=torch.int64, device="meta")]


def interrupt_latency(path, n, delay):
    """Seconds from SIGINT to KeyboardInterrupt in a child gathering from
    `path` (the child checks the array afterwards): bench/python_stress.py's."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
    try:
        import python_stress
    finally:
        sys.path.pop(0)
    return python_stress.interrupt_once(path, n, delay)[0]


@pytest.fixture
def big(tmp_path):
    n = 16 << 20  # 64 MiB of float32
    data = np.random.default_rng(9).standard_normal(n).astype(np.float32)
    return write(tmp_path / "big.f32", data), n


def test_ctrl_c_interrupts_a_long_gather(big):
    path, n = big
    worst = max(interrupt_latency(path, n, delay) for delay in (0.5, 1.3))
    assert worst < 1.0, f"KeyboardInterrupt came {worst:.2f} s after SIGINT"


def tasks():
    """The process's threads, by id."""
    return set(os.listdir("/proc/self/task"))


def test_gathers_share_one_bounded_lane_pool(F):
    """CPU gathers share one process-wide pool of lanes: however many threads
    call at once, the process never holds more lanes than the cap, and a
    second round starts no thread at all. Per-call lanes failed both: each
    call started and joined lane_count(n) threads of its own."""
    path, data = F
    cap = min(64, 8 * len(os.sched_getaffinity(0)))
    sizes = [1, 7, 40, 300, 1000, 4096, 8192]  # one lane to the cap (n / 16)
    callers = 6
    seen, peak, lock, stop = set(), [0], threading.Lock(), threading.Event()

    def sampler():
        while not stop.is_set():
            now = tasks()
            with lock:
                seen.update(now)
                peak[0] = max(peak[0], len(now))
            time.sleep(0.0002)

    def sample_from_here():
        with lock:
            seen.clear()
            peak[0] = 0

    start = threading.Barrier(callers + 1, timeout=60)  # a failed caller breaks it
    # The host controller: its lanes wait on reads, so a gather takes up to
    # the cap (the memory controller's, copies, take at most a core each).
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1, controller="host",
                        backend="cpu") as a:
        a[[0, 1]]  # the array's own threads, if any, before counting

        def caller(seed):
            def body():
                local = np.random.default_rng(seed)
                for _ in range(2):  # two rounds, each after the barrier
                    start.wait()
                    for _ in range(6):
                        for n in sizes:
                            idx = local.integers(0, ROWS, n)
                            np.testing.assert_array_equal(a[idx], data[idx])
                    start.wait()
            return body

        watcher = threading.Thread(target=sampler)
        watcher.start()
        try:
            def rounds():
                before = tasks()
                start.wait()  # round 1: the pool grows (or is there from earlier tests)
                start.wait()
                after_first, first_peak = tasks(), peak[0]
                sample_from_here()
                start.wait()  # round 2: the same gathers
                start.wait()
                started = seen - after_first
                assert first_peak <= len(before) + cap + 2, \
                    f"{first_peak} threads at once, from {len(before)}: at most {cap} lanes"
                assert not started, f"the second round started {len(started)} threads"

            run_threads(*(caller(s) for s in range(callers)), rounds)
        finally:
            stop.set()
            watcher.join()


def lane_threads():
    """The pool's threads now (named warpstore-lane)."""
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += f.read().strip() == "warpstore-lane"
        except OSError:  # the thread ended meanwhile
            pass
    return n


@pytest.mark.parametrize("controller", ["memory", "host"])
def test_idle_lanes_leave(F, controller):
    """A process that gathered keeps no lanes once it stops: each pool thread
    leaves after 10 s without work. A memory-controller gather (copies, no
    waits) takes at most a lane a core."""
    path, data = F
    cores = len(os.sched_getaffinity(0))

    def gone_within(seconds):
        deadline = time.monotonic() + seconds
        while lane_threads() and time.monotonic() < deadline:
            time.sleep(0.5)
        return lane_threads() == 0

    assert gone_within(30), "earlier tests' lanes did not leave"
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1,
                        controller=controller, backend="cpu") as a:
        idx = np.random.default_rng(5).integers(0, ROWS, 8192)
        np.testing.assert_array_equal(a[idx], data[idx])
        busy = lane_threads()
        if controller == "host" or cores > 1:
            assert busy >= 1, "an 8 K-row gather ran on the caller alone"
        if controller == "memory":  # the caller and a lane a core besides
            assert busy <= cores - 1, f"{busy} lanes for {cores} cores"
        assert gone_within(30), f"{lane_threads()} lanes still there 30 s after the gather"
        np.testing.assert_array_equal(a[idx], data[idx])  # and a new burst starts them again


def test_fork_child_gathers_with_lanes_of_its_own(F):
    """A child forked while the parent's lanes are busy (their lock may be
    held at fork()) gathers with a pool of its own: right rows, no hang."""
    path, data = F
    stop, failures = threading.Event(), []
    with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1,
                        backend="cpu") as a:
        def busy():
            local = np.random.default_rng(7)
            try:
                while not stop.is_set():
                    idx = local.integers(0, ROWS, 4096)
                    np.testing.assert_array_equal(a[idx], data[idx])
            except BaseException as e:  # noqa: BLE001 (reported below)
                failures.append(e)

        parent = threading.Thread(target=busy)
        parent.start()
        try:
            for trial in range(10):
                time.sleep(0.01)
                pid = os.fork()
                if pid == 0:  # the child: never return into pytest
                    status = 1
                    try:
                        with warpstore.open(path, "float32", (-1, DIM), cache="1MiB", threads=1,
                                            backend="cpu") as b:
                            local = np.random.default_rng(trial)
                            for n in (4096, 20, 8192):
                                idx = local.integers(0, ROWS, n)
                                np.testing.assert_array_equal(b[idx], data[idx])
                        status = 0
                    except BaseException:  # noqa: BLE001 (the status says it)
                        traceback.print_exc()
                    finally:
                        os._exit(status)
                deadline = time.monotonic() + 30
                while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
                    if time.monotonic() > deadline:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                        pytest.fail("the forked child hung")
                    time.sleep(0.01)
                assert os.waitstatus_to_exitcode(done[1]) == 0
        finally:
            stop.set()
            parent.join()
        if failures:
            raise failures[0]
