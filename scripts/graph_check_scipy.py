#!/usr/bin/env python3
"""Checks the graph study's C++ CPU references against SciPy (every GPU run
is compared with those references, so this closes the loop independently).

    warpstore-graph GRAPH --dump DIR ...        # writes DIR/{source.txt,bfs.u32,cc.u32,pagerank.f64,sssp.f32}
    python3 scripts/graph_check_scipy.py GRAPH DIR [--iterations 5]

BFS levels: scipy.sparse.csgraph.shortest_path (unweighted); components:
connected_components, labelled by their smallest vertex; SSSP: dijkstra;
PageRank: the same pull iteration in NumPy sparse algebra. Exit 0 when
everything present matches, 1 on a mismatch, 2 when SciPy is missing.
"""
import argparse
import os
import struct
import sys

try:
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse import csgraph
except ImportError as e:
    print(f"graph_check_scipy: SciPy/NumPy not available ({e}); the C++ references stand alone")
    sys.exit(2)

HEADER = struct.Struct("<8sII6Q")  # magic, version, flags, vertices, edges, offsets_at, neighbours_at, weights_at, file_bytes


def read_csr(path):
    with open(path, "rb") as f:
        magic, version, flags, n, m, off_at, nb_at, w_at, size = HEADER.unpack(f.read(HEADER.size))
    if magic != b"WSCSR01\0" or version != 1:
        sys.exit(f"graph_check_scipy: {path} is not a warpstore CSR file")
    offsets = np.fromfile(path, dtype="<u8", count=n + 1, offset=off_at)
    neighbours = np.fromfile(path, dtype="<u4", count=m, offset=nb_at)
    weights = np.fromfile(path, dtype="<f4", count=m, offset=w_at) if flags & 1 else np.ones(m, np.float32)
    return sp.csr_matrix((weights.astype(np.float64), neighbours.astype(np.int64), offsets.astype(np.int64)),
                         shape=(n, n))


def report(name, bad, total):
    print(f"{name:9s} {'ok' if bad == 0 else 'MISMATCH'}: {bad} of {total} vertices differ from SciPy")
    return bad == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("graph")
    ap.add_argument("dir")
    ap.add_argument("--iterations", type=int, default=5)
    args = ap.parse_args()
    a = read_csr(args.graph)
    n = a.shape[0]
    source = int(open(os.path.join(args.dir, "source.txt")).read())
    ok = True
    p = os.path.join(args.dir, "bfs.u32")
    if os.path.exists(p):
        got = np.fromfile(p, dtype="<u4")
        d = csgraph.shortest_path(a, directed=True, unweighted=True, indices=source)
        want = np.where(np.isinf(d), 0xFFFFFFFF, d).astype(np.uint64)
        ok &= report("bfs", int(np.count_nonzero(got.astype(np.uint64) != want)), n)
    p = os.path.join(args.dir, "cc.u32")
    if os.path.exists(p):
        got = np.fromfile(p, dtype="<u4")
        _, labels = csgraph.connected_components(a, directed=False)
        smallest = np.full(labels.max() + 1, n, dtype=np.int64)
        np.minimum.at(smallest, labels, np.arange(n))
        ok &= report("cc", int(np.count_nonzero(got != smallest[labels])), n)
    p = os.path.join(args.dir, "sssp.f32")
    if os.path.exists(p):
        got = np.fromfile(p, dtype="<f4")
        d = csgraph.dijkstra(a, directed=True, indices=source)
        want = np.where(np.isinf(d), -1.0, d)
        ok &= report("sssp", int(np.count_nonzero(got.astype(np.float64) != want)), n)
    p = os.path.join(args.dir, "pagerank.f64")
    if os.path.exists(p):
        got = np.fromfile(p, dtype="<f8")
        deg = np.diff(a.indptr).astype(np.float64)
        pattern = sp.csr_matrix((np.ones(a.nnz), a.indices, a.indptr), shape=a.shape)
        r = np.full(n, 1.0 / n)
        for _ in range(args.iterations):
            contrib = np.divide(r, deg, out=np.zeros(n), where=deg > 0)
            r = 0.15 / n + 0.85 * (pattern @ contrib)
        ok &= report("pagerank", int(np.count_nonzero(~np.isclose(got, r, rtol=1e-9, atol=1e-15))), n)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
