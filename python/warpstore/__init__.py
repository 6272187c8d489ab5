"""warpstore: gather rows of files far larger than GPU memory into tensors.

    import torch, warpstore
    with warpstore.open("features.f32", "float32", (-1, 128), cache="4GiB") as x:
        rows = x[torch.tensor([3, 1, 4], device="cuda")]   # [3, 128] on cuda

See README.md (Python) for the API, ``warpstore.settings`` for settings.
"""
import pkgutil

# A CMake build leaves the extension in <build>/python/warpstore: with that
# directory and python/ on PYTHONPATH both halves make one package.
__path__ = pkgutil.extend_path(__path__, __name__)

from . import settings  # noqa: E402
from ._array import Array, Pending, open  # noqa: E402
from ._backend import backend  # noqa: E402
from ._cache import Cache  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Array", "Cache", "Pending", "open", "settings", "backend", "info"]


def info():
    """What this installation can do: backends, device, settings."""
    b = backend()
    return {
        "version": __version__,
        "backend": "cuda" if b.gpu_build() else "cpu",
        "device": b.device_name(),
        "controllers": ["host", "memory", "nvme-model", "nvme"],
        "settings": settings.as_dict(),
    }


def __getattr__(name):
    """``warpstore.distributed`` (and ``warpstore.feature_store``) on first
    use: they import PyTorch, which ``import warpstore`` alone does not."""
    if name in ("distributed", "feature_store"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'warpstore' has no attribute {name!r}")
