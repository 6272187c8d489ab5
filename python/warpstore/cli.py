"""The warpstore command line: gen (test files, feature matrices, graphs),
load (a file's bytes into a file or an nvme:// device through the library's
write path, read back to verify), bench (from a checkout: the gather benchmark, bench/python_gather.py; the
regime map, bench/python_matrix.py; the core benchmarks through
warpstore-bench), info (device, controllers, settings), nvme doctor (what
this machine lacks for the bare-metal nvme controller: IOMMU, vfio-pci, the
device, its group, BAR0, memlock)."""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

from . import _files, _tools, nvme_doctor


class _Parser(argparse.ArgumentParser):
    """Errors as one line on stderr and status 2, with no usage dump (the
    subcommand parsers are of this class too)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _fail(message):
    """A CLI error: one line on stderr, status 2."""
    sys.stderr.write(f"warpstore: error: {message}\n")
    sys.exit(2)


_UINT64 = 2**64


def _integer(text):
    try:
        return int(text, 10)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _positive(text):
    v = _integer(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return v


def _seed(text):
    v = _integer(text)
    if not 0 <= v < _UINT64:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to {_UINT64 - 1}, got {text}")
    return v


def _size(text):
    """A size like 4096, 64K or 8GiB, in bytes (positive)."""
    try:
        v = _tools.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive size, got {text!r}")
    return v


def _size_text(text):
    """A size checked like _size, kept as written (results record it so)."""
    _size(text)
    return text


def _offset(text):
    """A byte offset like 0, 4096 or 1MiB (zero or more)."""
    if text.strip() == "0":
        return 0
    return _size(text)


def _zipf(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(v) and v > 1):
        raise argparse.ArgumentTypeError(f"must be a finite number above 1, got {text}")
    return v


def _list(choices):
    def parse(text):
        items = [t.strip() for t in text.split(",")]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{', '.join(map(repr, bad)) or 'nothing'}: expected a comma-separated list of "
                f"{', '.join(choices)}")
        return items

    return parse


def _check_output(path, need, what):
    """Refuses `path` before anything is written: its directory must exist and
    hold `need` more bytes (the file, if any, is replaced, so its bytes count
    as free)."""
    if os.path.isdir(path):
        _fail(f"{path} is a directory; give the path of the {what} to write")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        _fail(f"{path}: directory {directory} does not exist")
    free = shutil.disk_usage(directory).free
    if os.path.isfile(path):
        free += os.path.getsize(path)
    if need > free:
        _fail(f"{path}: the {what} needs {_tools.human_bytes(need)} ({need} bytes), "
              f"{directory} has {_tools.human_bytes(free)} free")


def _gen(args):
    if args.kind == "pattern":
        if args.size is None:
            _fail("gen pattern: --size is required (e.g. --size 1GiB)")
        if args.size % 8:
            _fail(f"gen pattern: --size must be a multiple of 8 bytes (the pattern is 64-bit "
                  f"words), got {args.size}")
        _check_output(args.path, args.size, "pattern file")
        _tools.write_pattern_file(args.path, args.size, seed=args.seed)
        print(f"{args.path}: {_tools.human_bytes(args.size)} of the pattern "
              f"(word w = w * 0x9E3779B97F4A7C15 + {args.seed})")
    elif args.kind == "features":
        _check_output(args.path, args.nodes * args.dim * 4, "feature matrix")
        _tools.write_features(args.path, args.nodes, args.dim, seed=args.seed)
        print(f"{args.path}: float32 [{args.nodes}, {args.dim}] "
              f"({_tools.human_bytes(args.nodes * args.dim * 4)})")
    else:  # graph: a random edge list as int64 [2, E] (source row, destination row)
        import numpy as np

        edges = args.nodes * args.degree
        _check_output(args.path, 2 * edges * 8, "edge list")
        rng = np.random.default_rng(args.seed)
        bar = _tools.Progress(edges, f"writing {args.path}")
        with open(args.path, "wb") as f:
            step = 1 << 22
            for row in range(2):
                for s in range(0, edges, step):
                    n = min(step, edges - s)
                    rng.integers(0, args.nodes, n, dtype=np.int64).tofile(f)
                    bar.update(n // 2)
        bar.close()
        print(f"{args.path}: int64 [2, {edges}] edges over {args.nodes} nodes")


def _load(args):
    """Copies SRC into DST from --offset through the extension (load_file:
    run_warps bodies writing through array_ref::write_span, a flush, a read
    back from the device). The checks here refuse what the library would
    refuse too, before anything opens DST writable."""
    from ._backend import backend

    src, dst, offset = args.src, args.dst, args.offset
    if not os.path.exists(src):
        _fail(f"load: {src} does not exist")
    if not os.path.isfile(src):
        _fail(f"load: {src} is not a regular file")
    size = os.path.getsize(src)
    if size == 0:
        _fail(f"load: {src} is empty: nothing to load")
    if offset % 512:
        _fail(f"load: --offset {offset} is not a multiple of the 512-byte block size")
    if not _files.names_device(dst):
        if not os.path.exists(dst):
            _fail(f"load: {dst} does not exist (it is written in place: create it at its full "
                  f"size first, e.g. truncate -s SIZE {dst})")
        if os.path.isdir(dst):
            _fail(f"load: {dst} is a directory")
        # A block device's size is the library's to check (getsize says 0).
        if os.path.isfile(dst) and offset + size > os.path.getsize(dst):
            _fail(f"load: {src} ({size} bytes) at offset {offset} needs {offset + size} bytes, "
                  f"{dst} holds {os.path.getsize(dst)}")
    try:
        r = backend().load_file(os.fsencode(src), os.fsencode(dst), offset,
                                args.controller or "", args.chunk)
    except RuntimeError as e:
        # A device that cannot be opened (no such PCI function, no VFIO), a
        # failed write: the library's message names the missing piece.
        _fail("load: " + " ".join(str(e).split()))
    except KeyboardInterrupt:
        # The extension stopped between chunks: one line, as for errors.
        sys.stderr.write(f"warpstore: load: interrupted; {dst} may hold part of {src}\n")
        return 130
    seconds = r["write_seconds"]
    rate = size / seconds / 1e9 if seconds > 0 else float("inf")
    where = f"{dst} at byte {offset}" if offset else dst
    if r["first_mismatch"] is not None:
        bad = r["first_mismatch"]
        print(f"{src} -> {where}: {size} bytes written in {seconds:.3f} s ({rate:.3g} GB/s); "
              f"read back: MISMATCH at byte {offset + bad} of {dst} (byte {bad} of {src})")
        return 1
    print(f"{src} -> {where}: {size} bytes ({_tools.human_bytes(size)}) in {seconds:.3f} s "
          f"({rate:.3g} GB/s), read back in {r['verify_seconds']:.3f} s: verified")
    return 0


def _checkout_file(relative):
    """`relative` in the warpstore checkout this package runs from (PYTHONPATH=python),
    or in the current directory or one above it; None if there is none."""
    here = os.path.dirname(os.path.abspath(__file__))
    roots = [os.path.dirname(os.path.dirname(here))]
    d = os.getcwd()
    while True:
        roots.append(d)
        if os.path.dirname(d) == d:
            break
        d = os.path.dirname(d)
    return next((p for p in (os.path.join(r, relative) for r in roots) if os.path.isfile(p)), None)


def _bench(args):
    """The benchmarks live in the checkout, not in the package: gather is
    bench/python_gather.py, matrix is bench/python_matrix.py, core is
    warpstore-bench; each gets every argument."""
    scripts = {"gather": "python_gather.py", "matrix": "python_matrix.py"}
    if args.which in scripts:
        script = _checkout_file(os.path.join("bench", scripts[args.which]))
        if script is None:
            _fail(f"bench {args.which}: bench/{scripts[args.which]} not found (run from a "
                  f"warpstore checkout)")
        env = dict(os.environ)
        env.setdefault("WARPSTORE_BENCH_COMMAND",
                       f"warpstore bench {args.which} " + " ".join(args.rest))
        return subprocess.call([sys.executable, script] + args.rest, env=env)
    exe = shutil.which("warpstore-bench") or next(
        (p for p in (os.path.join(d, "bench", "warpstore-bench") for d in ("build-gpu", "build"))
         if os.path.exists(p)), None)
    if exe is None:
        _fail("bench core: warpstore-bench not found (build the GPU target: "
              "cmake --build build --target warpstore-bench, or put it on PATH)")
    return subprocess.call([exe] + args.rest)


def _info(args):
    from . import info

    i = info()
    if args.json:
        print(json.dumps(i, indent=2))
    else:
        for k, v in i.items():
            print(f"{k:<12} {v}")
    return 0


def _nvme(args):
    """nvme doctor: checks read from sysfs, /dev and /proc (nvme_doctor.py);
    1 when something is MISSING. A bad TARGET is a ValueError: status 2."""
    return nvme_doctor.run(args)


def main(argv=None):
    p = _Parser(prog="warpstore", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("gen", help="write test files, feature matrices, graphs")
    g.add_argument("kind", choices=["pattern", "features", "graph"])
    g.add_argument("path")
    g.add_argument("--size", type=_size, help="pattern: bytes, a multiple of 8 (e.g. 8GiB)")
    g.add_argument("--nodes", type=_positive, default=1_000_000)
    g.add_argument("--dim", type=_positive, default=128)
    g.add_argument("--degree", type=_positive, default=10)
    g.add_argument("--seed", type=_seed, default=0)

    ld = sub.add_parser("load", help="copy a file into a file or an nvme:// device through the "
                        "library's write path, flush, read back to verify (docs/NVME.md)")
    ld.add_argument("src", help="the file whose bytes are loaded")
    ld.add_argument("dst", help="a file (written in place, not grown) or nvme://<PCI address>"
                    "[/ns<N>]")
    ld.add_argument("--offset", type=_offset, default=0,
                    help="the byte of DST the copy starts at, a multiple of 512 (default 0)")
    ld.add_argument("--controller", choices=["auto", "host", "memory", "nvme-model", "nvme"],
                    help="the controller for DST (default: WARPSTORE_CONTROLLER, else auto)")
    ld.add_argument("--chunk", type=_size, default=64 << 20,
                    help="bytes copied at a time (default 64MiB)")

    b = sub.add_parser("bench", help="gather benchmark (bench/python_gather.py); regime map "
                       "(bench/python_matrix.py); core benchmarks (warpstore-bench)")
    b.add_argument("which", choices=["gather", "matrix", "core"])
    b.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own arguments")

    i = sub.add_parser("info", help="device, controllers, settings")
    i.add_argument("--json", action="store_true")

    n = sub.add_parser("nvme", help="the bare-metal nvme controller (VFIO): doctor")
    nsub = n.add_subparsers(dest="nvme_command", required=True)
    d = nsub.add_parser("doctor", help="what this machine lacks for the nvme controller: IOMMU, "
                        "vfio-pci, the device and its group, BAR0, memlock (docs/NVME.md)")
    nvme_doctor.add_arguments(d)

    args = p.parse_args(argv)
    try:
        return {"gen": _gen, "load": _load, "bench": _bench, "info": _info,
                "nvme": _nvme}[args.command](args) or 0
    except (ValueError, OSError) as e:
        # Bad settings (WARPSTORE_* variables included), files that cannot be
        # written: one line, as for bad arguments.
        _fail(" ".join(str(e).split()))


if __name__ == "__main__":
    sys.exit(main())
