"""warpstore._files.file_size, and arrays over block devices."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import warpstore
from warpstore._files import file_size


def test_regular_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 12345)
    assert file_size(p) == 12345
    assert file_size(str(p)) == 12345


def test_directory_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError):
        file_size(tmp_path)
    with pytest.raises(IsADirectoryError):
        warpstore.open(str(tmp_path), "uint8")


def test_character_device_is_refused():
    with pytest.raises(ValueError, match="only regular files and block devices are supported"):
        file_size("/dev/null")
    with pytest.raises(ValueError, match="only regular files and block devices"):
        warpstore.open("/dev/null", "uint8")


def test_fifo_is_refused_without_blocking(tmp_path):
    p = tmp_path / "pipe"
    os.mkfifo(p)
    with pytest.raises(ValueError, match="FIFO"):
        file_size(p)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        file_size("/nonexistent/warpstore/file")


@pytest.fixture
def loop_device(tmp_path):
    """A loop device over a 4 MiB file of known float32 rows, detached after."""
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    if shutil.which("losetup") is None:
        pytest.skip("no losetup")
    data = np.random.default_rng(3).standard_normal((4 << 20) // 400 // 4 * 4, dtype=np.float32)
    data = data[: data.size // 100 * 100].reshape(-1, 100)
    backing = tmp_path / "backing.img"
    raw = data.tobytes()
    backing.write_bytes(raw + b"\0" * (-len(raw) % 4096))
    r = subprocess.run(["losetup", "-f", "--show", str(backing)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"losetup -f --show failed: {r.stderr.strip()}")
    dev = r.stdout.strip()
    try:
        yield dev, data, os.path.getsize(backing)
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def test_block_device_size(loop_device):
    dev, _, size = loop_device
    assert os.path.getsize(dev) == 0  # what the old code used
    assert file_size(dev) == size


def test_array_over_a_block_device(loop_device, controller):
    dev, data, size = loop_device
    with warpstore.open(dev, "float32", (len(data), 100), cache="1MiB", threads=2,
                        controller=controller) as a:
        idx = np.random.default_rng(5).integers(0, len(data), 3000)
        np.testing.assert_array_equal(a[idx], data[idx])
    with warpstore.open(dev, "uint8", cache="1MiB", threads=2, controller=controller) as a:
        assert a.shape == (size,)
