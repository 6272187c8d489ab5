"""Which compiled target serves arrays: the CUDA one where a GPU is visible,
the CPU one (std::thread lanes, host memory) otherwise. WARPSTORE_BACKEND
(auto | cpu | cuda) overrides the choice."""
import importlib
import os

_chosen = {}


def _load(name):
    try:
        return importlib.import_module(f"warpstore.{name}")
    except ImportError:
        return None


def backend(name=None):
    """The extension module for `name` (auto, cpu or cuda; None: WARPSTORE_BACKEND or auto)."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"backend must be a string (auto, cpu or cuda), got {name!r}")
    name = (name or os.environ.get("WARPSTORE_BACKEND") or "auto").lower()
    if name in _chosen:
        return _chosen[name]
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"backend must be auto, cpu or cuda, got {name!r}")
    module = None
    if name in ("auto", "cuda"):
        cuda = _load("_warpstore_cuda")
        if cuda is not None and cuda.available():
            module = cuda
        elif name == "cuda":
            why = "it was not built (no nvcc at build time)" if cuda is None else "no GPU is visible"
            raise RuntimeError(f"warpstore: the CUDA backend is unavailable: {why}")
    if module is None:
        module = _load("_warpstore_cpu")
        if module is None:
            raise ImportError("warpstore: the extension is not built (pip install . from the repository)")
    _chosen[name] = module
    return module
