"""Which compiled target serves arrays: the CUDA one where a GPU is visible,
the CPU one (lanes of a process-wide thread pool, host memory) otherwise.
WARPSTORE_BACKEND (auto | cpu | cuda) overrides the choice."""
import importlib
import os

_chosen = {}
# The process that first chose the CUDA target: CUDA does not survive fork(),
# so a child forked after it cannot open CUDA arrays (see check_cuda_process).
_cuda_pid = None
_cuda_module = None

CUDA_FORK_MESSAGE = (
    "warpstore: CUDA cannot be used in a process forked after its parent used CUDA; start "
    "workers with the 'spawn' method (DataLoader(multiprocessing_context='spawn'), "
    "multiprocessing.set_start_method('spawn')), or open with backend='cpu'")


def check_cuda_process(module):
    """Raises RuntimeError in a forked child when `module` is the CUDA target
    and the parent had already chosen it (the child's CUDA calls would fail
    with an initialization error)."""
    if _cuda_pid is not None and _cuda_pid != os.getpid() and module is _cuda_module:
        raise RuntimeError(CUDA_FORK_MESSAGE)


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
            global _cuda_pid, _cuda_module
            if _cuda_pid is None:
                _cuda_pid, _cuda_module = os.getpid(), cuda
        elif name == "cuda":
            why = "it was not built (no nvcc at build time)" if cuda is None else "no GPU is visible"
            raise RuntimeError(f"warpstore: the CUDA backend is unavailable: {why}")
    if module is None:
        module = _load("_warpstore_cpu")
        if module is None:
            raise ImportError("warpstore: the extension is not built (pip install . from the repository)")
    _chosen[name] = module
    return module
