import os

import numpy as np
import pytest

import warpstore


def write(path, array, offset=0):
    with open(path, "wb") as f:
        f.write(b"\xee" * offset)
        f.write(np.ascontiguousarray(array).tobytes())
    return str(path)


@pytest.fixture
def features(tmp_path):
    """A [20000, 100] float32 file (7.6 MiB) and its reference."""
    data = np.random.default_rng(7).standard_normal((20000, 100)).astype(np.float32)
    return write(tmp_path / "features.f32", data), data


# Small caches and few threads: CI machines have 2 cores, and a cache far
# smaller than the file makes the tests evict.
SMALL = dict(cache="1MiB", threads=2)


# Every controller: the software NVMe device too (GPU threads, or CPU lanes
# on the CPU backend, drive its queues and doorbells themselves).
@pytest.fixture(params=["host", "memory", "nvme-model"])
def controller(request):
    return request.param


def cuda_available():
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available():
        return False
    try:
        return warpstore.backend().gpu_build()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device, PyTorch with CUDA and the CUDA backend")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch):
    for var in warpstore.settings.ENVIRONMENT.values():
        if var in os.environ and not os.environ.get("WARPSTORE_KEEP_ENV"):
            monkeypatch.delenv(var)
    warpstore.settings.reset()
    yield
    warpstore.settings.reset()
