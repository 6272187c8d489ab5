"""warpstore load: a file's bytes copied into a file through the library's
write path (the CPU form of the kernels here), flushed, read back from the
device and compared. The destination's other bytes stay as they were; bad
input is refused in one line before anything is written."""
import hashlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ADDRESS = "0000:65:00.0"

# A cache far smaller than the source, so the writes evict and write back
# before the flush; two service threads for a 2-core machine.
ENV = dict(os.environ, WARPSTORE_CACHE_BYTES="1MiB", WARPSTORE_THREADS="2")


def run(*args):
    return subprocess.run([sys.executable, "-m", "warpstore", "load", *args], capture_output=True,
                          text=True, timeout=600, env=ENV)


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def files(tmp_path):
    """A source of 1,000,003 random bytes (no whole number of lines or
    blocks) and a 4 MiB destination of other random bytes."""
    rng = np.random.default_rng(11)
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(rng.integers(0, 256, 1_000_003, dtype=np.uint8).tobytes())
    dst.write_bytes(rng.integers(0, 256, 4 << 20, dtype=np.uint8).tobytes())
    return src, dst


@pytest.mark.parametrize("controller", ["nvme-model", "host", "memory"])
@pytest.mark.parametrize("offset", [0, 8704, 3 << 20])
def test_load_copies_the_source_and_nothing_else(files, controller, offset):
    src, dst = files
    before = dst.read_bytes()
    # 64 KiB chunks: sixteen of them, the last one partial.
    r = run(str(src), str(dst), "--offset", str(offset), "--controller", controller,
            "--chunk", "64KiB")
    assert r.returncode == 0, r.stderr
    assert "verified" in r.stdout and "GB/s" in r.stdout and "1000003 bytes" in r.stdout
    data, after = src.read_bytes(), dst.read_bytes()
    assert len(after) == len(before)
    assert after[offset:offset + len(data)] == data
    assert after[:offset] == before[:offset]
    assert after[offset + len(data):] == before[offset + len(data):]


def test_load_fills_the_destination_exactly(tmp_path):
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    subprocess.run([sys.executable, "-m", "warpstore", "gen", "pattern", str(src), "--size",
                    "2MiB"], check=True, capture_output=True, env=ENV)
    dst.write_bytes(b"\0" * (2 << 20))
    r = run(str(src), str(dst), "--controller", "nvme-model")
    assert r.returncode == 0, r.stderr
    assert dst.read_bytes() == src.read_bytes()


def fails(*args):
    r = run(*args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_bad_input_is_refused_in_one_line_and_writes_nothing(files, tmp_path):
    src, dst = files
    before = digest(dst)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    cases = [
        ((str(tmp_path / "missing.bin"), str(dst)), ["missing.bin", "does not exist"]),
        ((str(empty), str(dst)), ["empty.bin", "empty"]),
        ((str(src), str(dst), "--offset", "100"), ["--offset 100", "multiple of the 512"]),
        ((str(src), str(dst), "--offset", "3584KiB"),
         ["1000003 bytes", "at offset 3670016", "needs 4670019 bytes", "holds 4194304"]),
        ((str(src), str(tmp_path / "nowhere.bin")), ["nowhere.bin", "does not exist"]),
        ((str(src), str(dst), "--controller", "bogus"), ["--controller", "bogus"]),
        ((str(src), str(dst), "--offset", "-512"), ["--offset", "-512"]),
    ]
    for args, words in cases:
        line = fails(*args)
        assert all(w in line for w in words), (args, line)
    assert digest(dst) == before


def test_a_source_larger_than_the_destination(tmp_path):
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(b"\x11" * 5000)
    dst.write_bytes(b"\x22" * 4096)
    line = fails(str(src), str(dst))
    assert "needs 5000 bytes" in line and "holds 4096" in line
    assert dst.read_bytes() == b"\x22" * 4096


def test_the_library_checks_too(files):
    """load_file itself refuses what the CLI checks first: a source that does
    not fit, an offset off the block size, a missing source; the destination
    keeps every byte."""
    from warpstore._backend import backend

    src, dst = files
    before = digest(dst)
    ext = backend("cpu")
    with pytest.raises(ValueError, match="do not fit: the destination holds 4194304 bytes"):
        ext.load_file(os.fsencode(src), os.fsencode(dst), 4 << 20, "nvme-model")
    with pytest.raises(ValueError, match="not a multiple of the 512-byte block size"):
        ext.load_file(os.fsencode(src), os.fsencode(dst), 1000, "host")
    with pytest.raises(FileNotFoundError):
        ext.load_file(os.fsencode(str(src) + ".gone"), os.fsencode(dst), 0, "host")
    assert digest(dst) == before
    r = ext.load_file(os.fsencode(src), os.fsencode(dst), 512, "nvme-model", 1 << 18)
    assert r["bytes"] == 1_000_003 and r["first_mismatch"] is None
    assert open(dst, "rb").read()[512:512 + 1_000_003] == src.read_bytes()


@pytest.mark.skipif(os.path.exists(f"/sys/bus/pci/devices/{ADDRESS}"),
                    reason=f"this machine has a PCI function at {ADDRESS}")
def test_a_device_that_cannot_be_opened(files):
    src, _ = files
    line = fails(str(src), f"nvme://{ADDRESS}")
    assert f"{ADDRESS}: no such PCI device" in line, line


def _untouched(f, mib):
    """Whether the first 4 KiB of each of the file's first 64 MiB are zero."""
    return all(os.pread(f.fileno(), 4096, m << 20) == b"\0" * 4096 for m in range(min(mib, 64)))


# `python -m warpstore` with SIGINT raising KeyboardInterrupt even where this
# process was started with SIGINT ignored (a background job of a shell
# without job control, as a CI script may be): an ignored SIGINT stays
# ignored across exec, Python then installs no handler, and the copy ran to
# its end (bench/python_stress.py's child does the same).
_CLI_TAKING_SIGINT = ("import runpy, signal; "
                      "signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "runpy.run_module('warpstore', run_name='__main__', alter_sys=True)")


def test_ctrl_c_stops_the_copy_between_chunks(tmp_path):
    """SIGINT once the first bytes reached the destination: the copy stops
    at the next chunk (the extension raises KeyboardInterrupt; the CLI says
    so in one line, status 130), long before the end of DST is written.
    A copy that ends before the signal lands (a fast machine) is tried again
    four times as large, up to twice."""
    for mib in (64, 256, 1024):
        src, dst = tmp_path / f"src{mib}.bin", tmp_path / f"dst{mib}.bin"
        src.write_bytes(b"\x77" * (mib << 20))
        dst.write_bytes(b"\0" * (mib << 20))
        p = subprocess.Popen([sys.executable, "-c", _CLI_TAKING_SIGINT, "load", str(src),
                              str(dst), "--controller", "nvme-model", "--chunk", "64KiB"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        deadline = time.monotonic() + 120
        # The first bytes to reach DST are the lines the 1 MiB cache evicts
        # first, anywhere in its first megabytes (line 0 may stay cached to
        # the final flush): a 4 KiB block of every MiB is watched.
        with open(dst, "rb") as f:
            while _untouched(f, mib) and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.001)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        if p.returncode == 0 and "verified" in out and mib < 1024:
            src.unlink()
            dst.unlink()
            continue  # done before the signal: again, larger
        break
    assert p.returncode == 130, (mib, p.returncode, out, err)
    assert err.strip() == f"warpstore: load: interrupted; {dst} may hold part of {src}"
    with open(dst, "rb") as f:
        f.seek((mib << 20) - 4096)
        assert f.read() == b"\0" * 4096
