"""Shared pieces of the CLI and the benchmarks: progress bars, sizes, test
files, results in the format of docs/RESULTS.md."""
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

# The file content every benchmark verifies against: word w of the file is
# (w * GOLDEN + seed) mod 2^64, cheap to write and to check anywhere.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def index_on(idx, device):
    """A NumPy index array on `device` ("cpu": itself; else a torch tensor there)."""
    if device == "cpu":
        return idx
    import torch
    return torch.from_numpy(idx).to(device)


def as_numpy(x):
    """A gather's result (torch tensor on any device, or NumPy) as NumPy."""
    return x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)


def parse_size(text):
    from ._backend import backend

    return int(text) if isinstance(text, int) else backend().parse_size(str(text))


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


class Progress:
    """A one-line progress bar on stderr (silent when stderr is not a terminal
    unless forced, so logs stay readable: then it prints every 10 %)."""

    def __init__(self, total, label, unit=""):
        self.total, self.label, self.unit = max(total, 1), label, unit
        self.done, self.tty, self.last = 0, sys.stderr.isatty(), -1
        self.t0 = time.perf_counter()

    def update(self, n):
        self.done += n
        frac = min(self.done / self.total, 1.0)
        if self.tty:
            bar = "#" * int(frac * 30)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {frac * 100:5.1f}%")
            sys.stderr.flush()
        elif int(frac * 10) != self.last:
            self.last = int(frac * 10)
            sys.stderr.write(f"{self.label}: {frac * 100:.0f}%\n")

    def close(self):
        if self.tty:
            sys.stderr.write(f"  {time.perf_counter() - self.t0:.1f} s\n")


def pattern_words(first_word, count, seed=0):
    w = np.arange(first_word, first_word + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return w * GOLDEN + np.uint64(seed)


def write_pattern_file(path, size, seed=0, chunk=64 << 20, progress=True):
    """A file of `size` bytes (a multiple of 8) holding pattern_words; kept if it exists."""
    if size % 8:
        raise ValueError(f"pattern file size {size} is not a multiple of 8")
    if os.path.exists(path) and os.path.getsize(path) == size:
        marker = np.fromfile(path, dtype=np.uint64, count=1)
        if marker.size and marker[0] == pattern_words(0, 1, seed)[0]:
            return path
    bar = Progress(size, f"writing {path}") if progress else None
    with open(path, "wb") as f:
        for start in range(0, size, chunk):
            n = min(chunk, size - start)
            pattern_words(start // 8, n // 8, seed).tofile(f)
            if bar:
                bar.update(n)
    if bar:
        bar.close()
    return path


def write_features(path, nodes, dim, seed=0, chunk_rows=1 << 16, progress=True):
    """A float32 [nodes, dim] feature matrix, deterministic in `seed`."""
    bar = Progress(nodes, f"writing {path}") if progress else None
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        for start in range(0, nodes, chunk_rows):
            n = min(chunk_rows, nodes - start)
            rng.standard_normal((n, dim), dtype=np.float32).tofile(f)
            if bar:
                bar.update(n)
    if bar:
        bar.close()
    return path


def git_commit(where=None):
    """The commit a results file names: WARPSTORE_COMMIT where set (scripts/gpu.sh
    exports it: a GPU machine's checkout may name an older commit than the tree
    it runs), else the HEAD of the checkout holding `where` (default: this
    package), with "+dirty" where tracked files differ from it (changes not
    committed, or a copy of a newer tree over a stale .git)."""
    if os.environ.get("WARPSTORE_COMMIT"):
        return os.environ["WARPSTORE_COMMIT"]
    here = where or os.path.dirname(os.path.abspath(__file__))

    def git(*args):
        return subprocess.run(["git", "-C", here, *args], capture_output=True, text=True,
                              timeout=10)

    try:
        head = git("rev-parse", "--short", "HEAD").stdout.strip()
        if not head:
            return "unknown"
        changed = git("status", "--porcelain", "--untracked-files=no")
        return head + ("+dirty" if changed.returncode == 0 and changed.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def import_kvikio(threads=None):
    """KvikIO set up as a competitor at its strongest here: (module, note).

    Its thread pool defaults to one thread, which makes it a weak competitor;
    this sets it to `threads` (default: every core) and checks that it took.
    `kvikio.defaults` is a submodule that `import kvikio` does not load.
    Raises ImportError where KvikIO is not installed, RuntimeError where its
    thread pool cannot be set.
    """
    import kvikio
    import kvikio.defaults as defaults

    want = threads or os.cpu_count() or 1
    if hasattr(defaults, "set"):  # KvikIO 25.04 and later
        defaults.set({"num_threads": want})
        got = defaults.get("num_threads")
        compat = getattr(defaults.get("compat_mode"), "name", "?")
        if hasattr(defaults, "is_compat_mode_preferred"):
            compat += ", POSIX" if defaults.is_compat_mode_preferred() else ", cuFile"
    else:
        defaults.num_threads_reset(want)
        got = defaults.get_num_threads()
        compat = defaults.compat_mode()
    if got != want:
        raise RuntimeError(f"kvikio's thread pool has {got} threads after asking for {want}")
    version = getattr(kvikio, "__version__", "?")
    return kvikio, f"kvikio {version}, {got} threads, compat_mode {compat}"


def timed_threads(target, count):
    """Runs target(0) .. target(count - 1) on threads of their own, all at
    once; returns the seconds from the first start to the last join."""
    import threading

    threads = [threading.Thread(target=target, args=(c,)) for c in range(count)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def bulk_breakdown(before, after):
    """Where bulk reads' time went between two calls of the extension's
    bulk_stats(): calls, lanes and helpers taken, chunks (those the calling
    threads read), and milliseconds summed over the reads' threads (call:
    wall; read: in pread; buffer_wait: for a pinned buffer's last copy;
    drain: for the last copies; wake: hand-out to a helper's first chunk)."""
    d = {k: after[k] - before[k] for k in after}
    out = {k: d[k] for k in ("calls", "lanes", "helpers", "chunks", "caller_chunks")}
    out.update({k[:-3] + "_ms": round(d[k] * 1e-6, 3)
                for k in ("call_ns", "read_ns", "buffer_wait_ns", "drain_ns", "wake_ns")})
    return out


def write_results(path, study, device, command, results):
    """Writes bench/results/<study>.json in the docs/RESULTS.md format."""
    doc = {
        "study": study,
        "device": device,
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "command": command,
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    return doc


def result(name, value, unit, ceiling, ceiling_name, verified, mismatches, **params):
    return {
        "name": name, "value": value, "unit": unit, "ceiling": ceiling,
        "ceiling_name": ceiling_name,
        "ratio": (value / ceiling) if ceiling else None,
        "verified": verified, "mismatches": mismatches, "params": params,
    }


def table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(headers), line("-" * w for w in widths)] + [line(r) for r in rows])
