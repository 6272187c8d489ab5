"""The warpstore command line: gen (test files, feature matrices, graphs),
bench (the gather benchmark; the core benchmarks through warpstore-bench),
info (device, controllers, settings)."""
import argparse
import json
import os
import shutil
import subprocess
import sys

from . import _tools


def _gen(args):
    size = _tools.parse_size(args.size) if args.size else None
    if args.kind == "pattern":
        if size is None:
            sys.exit("warpstore gen pattern: --size is required")
        _tools.write_pattern_file(args.path, size // 8 * 8, seed=args.seed)
        print(f"{args.path}: {_tools.human_bytes(size // 8 * 8)} of the pattern "
              f"(word w = w * 0x9E3779B97F4A7C15 + {args.seed})")
    elif args.kind == "features":
        _tools.write_features(args.path, args.nodes, args.dim, seed=args.seed)
        print(f"{args.path}: float32 [{args.nodes}, {args.dim}] "
              f"({_tools.human_bytes(args.nodes * args.dim * 4)})")
    else:  # graph: a random edge list as int64 [2, E] (source row, destination row)
        import numpy as np

        rng = np.random.default_rng(args.seed)
        edges = args.nodes * args.degree
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


def _bench(args):
    if args.which == "gather":
        from . import bench_gather

        results = bench_gather.run(
            path=args.file, size=args.size, batch=args.batch, cache=args.cache,
            threads=args.threads, rows=args.rows.split(","), streams=args.streams.split(","),
            controllers=args.controllers.split(","), seed=args.seed, zipf_a=args.zipf_a,
            json_path=args.json, plot=args.plot, command="warpstore " + " ".join(sys.argv[1:]))
        return 0 if all(r["mismatches"] == 0 for r in results) else 1
    exe = shutil.which("warpstore-bench") or next(
        (p for p in (os.path.join(d, "bench", "warpstore-bench") for d in ("build-gpu", "build"))
         if os.path.exists(p)), None)
    if exe is None:
        sys.exit("warpstore bench core: warpstore-bench not found (build the GPU target: "
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


def main(argv=None):
    p = argparse.ArgumentParser(prog="warpstore", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("gen", help="write test files, feature matrices, graphs")
    g.add_argument("kind", choices=["pattern", "features", "graph"])
    g.add_argument("path")
    g.add_argument("--size", help="pattern: bytes (e.g. 8GiB)")
    g.add_argument("--nodes", type=int, default=1_000_000)
    g.add_argument("--dim", type=int, default=128)
    g.add_argument("--degree", type=int, default=10)
    g.add_argument("--seed", type=int, default=0)

    b = sub.add_parser("bench", help="gather benchmark; core benchmarks (warpstore-bench)")
    b.add_argument("which", choices=["gather", "core"])
    b.add_argument("--file", default="/tmp/warpstore-gather.dat")
    b.add_argument("--size", default="8GiB")
    b.add_argument("--batch", default="512MiB", help="bytes of rows per gather")
    b.add_argument("--cache", default="2GiB")
    b.add_argument("--threads", type=int, default=8, help="host controller service threads")
    b.add_argument("--rows", default="4k,512")
    b.add_argument("--streams", default="random,zipf")
    b.add_argument("--controllers", default="host,memory")
    b.add_argument("--zipf-a", type=float, default=1.2)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--json", help="results file (docs/RESULTS.md format)")
    b.add_argument("--plot", help="PNG of the figures (needs matplotlib)")

    i = sub.add_parser("info", help="device, controllers, settings")
    i.add_argument("--json", action="store_true")

    # `warpstore bench core ...` hands everything it does not know to warpstore-bench.
    args, rest = p.parse_known_args(argv)
    if rest and not (args.command == "bench" and args.which == "core"):
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    return {"gen": _gen, "bench": _bench, "info": _info}[args.command](args) or 0


if __name__ == "__main__":
    sys.exit(main())
