"""The PyG FeatureStore over warpstore arrays feeds NeighborLoader the file's rows."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

import warpstore  # noqa: E402
from conftest import write  # noqa: E402
from torch_geometric.loader import NeighborLoader  # noqa: E402
from warpstore.feature_store import (InMemoryGraphStore, WarpstoreFeatureStore,  # noqa: E402
                                     neighbor_sampler)


def test_get_tensor_reads_rows(features):
    path, data = features
    fs = WarpstoreFeatureStore()
    fs.put_tensor(warpstore.open(path, "float32", (-1, 100), cache="1MiB", threads=2),
                  group_name=None, attr_name="x", index=None)
    fs.put_tensor(torch.arange(20000), group_name=None, attr_name="y", index=None)
    idx = torch.tensor([5, 0, 19999])
    assert torch.equal(fs.get_tensor(group_name=None, attr_name="x", index=idx),
                       torch.from_numpy(data[[5, 0, 19999]]))
    assert torch.equal(fs.get_tensor(group_name=None, attr_name="y", index=idx), idx)
    assert fs.get_tensor_size(group_name=None, attr_name="x") == (20000, 100)
    assert {a.attr_name for a in fs.get_all_tensor_attrs()} == {"x", "y"}
    with pytest.raises(IndexError):
        fs.get_tensor(group_name=None, attr_name="x", index=torch.tensor([20000]))
    with pytest.raises(KeyError):
        fs.get_tensor(group_name=None, attr_name="z", index=idx)
    assert fs.fetch_seconds > 0
    fs.close()


def test_neighbor_loader_batches_hold_the_files_rows(features):
    path, data = features
    n = len(data)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, n, (100000,), generator=g)
    dst = torch.randint(0, n, (100000,), generator=g)
    fs, gs = WarpstoreFeatureStore(), InMemoryGraphStore()
    fs.put_tensor(warpstore.open(path, "float32", (-1, 100), cache="1MiB", threads=2),
                  group_name=None, attr_name="x", index=None)
    fs.put_tensor(torch.arange(n) % 7, group_name=None, attr_name="y", index=None)
    gs.put_edge_index(torch.stack([src, dst]), edge_type=None, layout="coo", size=(n, n))
    loader = NeighborLoader((fs, gs), num_neighbors=[5, 3], input_nodes=torch.arange(0, 2000),
                            batch_size=500, neighbor_sampler=neighbor_sampler((fs, gs), [5, 3]))
    batches = 0
    for batch in loader:
        batches += 1
        ids = batch.n_id
        assert torch.equal(ids[:batch.batch_size], torch.arange(500) + 500 * (batches - 1))
        assert torch.equal(batch.x, torch.from_numpy(data[ids.numpy()]))
        assert torch.equal(batch.y, ids % 7)
        # every sampled edge is an edge of the graph: target <- source
        s, d = ids[batch.edge_index[0]], ids[batch.edge_index[1]]
        edges = set(zip(src.tolist(), dst.tolist()))
        assert all((a, b) in edges for a, b in zip(s.tolist()[:200], d.tolist()[:200]))
    assert batches == 4
    fs.close()


@pytest.mark.parametrize("device", ["cpu", pytest.param(
    "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"))])
def test_sampler_draws_depend_on_the_seed_alone(features, device):
    """The plain-PyTorch sampler draws from a generator of its own, seeded
    from torch's when it is made: other draws between batches (dropout, a
    user's) leave its batches as they were, and every batch has each node
    once, the seeds first."""
    import torch_geometric.typing as pyg

    if device == "cpu" and (pyg.WITH_PYG_LIB or pyg.WITH_TORCH_SPARSE):
        pytest.skip("PyG's own sampler serves on the CPU here")
    path, data = features
    n = len(data)
    g = torch.Generator().manual_seed(2)
    edge_index = torch.randint(0, n, (2, 200000), generator=g)  # degrees above the fanout
    runs = []
    for other_draws in (False, True):
        fs, gs = WarpstoreFeatureStore(), InMemoryGraphStore()
        fs.put_tensor(torch.arange(n) % 7, group_name=None, attr_name="y", index=None)
        gs.put_edge_index(edge_index, edge_type=None, layout="coo", size=(n, n))
        torch.manual_seed(3)
        sampler = neighbor_sampler((fs, gs), [6, 4], device=device)
        if sampler.device.type != device:
            pytest.skip(f"the graph does not fit on {device}")
        loader = NeighborLoader((fs, gs), num_neighbors=[6, 4], input_nodes=torch.arange(3000),
                                batch_size=1000, neighbor_sampler=sampler)
        ids = []
        for batch in loader:
            n_id = batch.n_id.cpu()
            assert n_id.unique().numel() == n_id.numel()
            assert torch.equal(n_id[:batch.batch_size], torch.arange(1000) + 1000 * len(ids))
            ids.append(n_id)
            if other_draws:
                torch.rand(100)
                if device == "cuda":
                    torch.rand(100, device="cuda")
        runs.append(ids)
    assert len(runs[0]) == 3
    for a, b in zip(*runs):
        assert torch.equal(a, b)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def _graph_sampler(edge_index, n, fanouts, **kwargs):
    fs, gs = WarpstoreFeatureStore(), InMemoryGraphStore()
    fs.put_tensor(torch.arange(n), group_name=None, attr_name="y", index=None)
    gs.put_edge_index(edge_index, edge_type=None, layout="coo", size=(n, n))
    torch.manual_seed(5)
    sampler = neighbor_sampler((fs, gs), fanouts, device="cuda", **kwargs)
    if sampler.device.type != "cuda":
        pytest.skip("the graph does not fit on the GPU")
    return sampler


def _check_sample(sampler, seed, out, fanouts):
    """Every sampled edge is an edge of the graph into a node of the hop
    before; each node of a hop has min(degree, fanout) edges, all of its
    edges where it has at most fanout; the nodes are each there once, the
    seeds first, each hop's new nodes after the ones before."""
    colptr, row = sampler.colptr.long(), sampler.row.long()
    node = out.node.cpu()
    src, dst, edge = out.row.cpu(), out.col.cpu(), out.edge.cpu()
    assert torch.equal(node[:seed.numel()], seed)
    assert node.unique().numel() == node.numel()
    assert sum(out.num_sampled_nodes) == node.numel()
    assert sum(out.num_sampled_edges) == edge.numel() == src.numel() == dst.numel()
    # Sources are the CSC rows of the edges; each edge sits in its target's range.
    assert torch.equal(node[src], row[edge])
    tgt = node[dst]
    assert bool(((colptr[tgt] <= edge) & (edge < colptr[tgt + 1])).all())
    lo, at = 0, 0
    for h, f in enumerate(fanouts):
        size = out.num_sampled_nodes[h]
        frontier = node[lo:lo + size]
        e = out.num_sampled_edges[h]
        hop_dst, hop_edge = dst[at:at + e], edge[at:at + e]
        assert bool(((hop_dst >= lo) & (hop_dst < lo + size)).all())
        deg = colptr[frontier + 1] - colptr[frontier]
        got = torch.bincount(hop_dst - lo, minlength=size)
        assert torch.equal(got, deg.clamp(max=f))
        small = (deg <= f)[hop_dst - lo]
        # A node with few neighbours: each of its edges once.
        assert hop_edge[small].unique().numel() == int(small.sum())
        # The next hop's nodes: sources not seen before this hop, once each.
        nxt = node[lo + size:lo + size + out.num_sampled_nodes[h + 1]]
        seen_before = set(node[:lo + size].tolist())
        assert set(nxt.tolist()) == set(node[src[at:at + e]].tolist()) - seen_before
        lo, at = lo + size, at + e


@needs_cuda
@pytest.mark.parametrize("fused", [True, False])
def test_gpu_sampler_draws_edges_of_the_graph(fused):
    """Both GPU paths: every sampled edge checked against the graph, hop by
    hop, on a graph with nodes above and below the fanout, self loops and
    repeated edges."""
    n = 5000
    g = torch.Generator().manual_seed(11)
    dst = torch.cat([torch.randint(0, n, (40000,), generator=g), torch.arange(0, n, 7)])
    src = torch.cat([torch.randint(0, n, (40000,), generator=g), torch.arange(0, n, 7)])
    edge_index = torch.stack([torch.cat([src, src[:500]]), torch.cat([dst, dst[:500]])])
    fanouts = [6, 4, 3]
    sampler = _graph_sampler(edge_index, n, fanouts, fused=fused)
    if fused and sampler._kernels is None:
        pytest.skip("this build has no sampler kernels")
    for b in range(4):
        seed = torch.randperm(n, generator=g)[:300]
        out = sampler._sample(seed)
        _check_sample(sampler, seed, out, fanouts)
    # local is clean again: the same seeds with every neighbour taken give
    # the same sample on both paths (no draws: fanout above every degree).
    assert bool((sampler._local == -1).all())


@needs_cuda
def test_fused_sampler_takes_the_nodes_the_pytorch_path_takes():
    """Fanouts above every degree (no draws): both paths take the same
    nodes per hop and the same edges."""
    n = 3000
    g = torch.Generator().manual_seed(12)
    edge_index = torch.randint(0, n, (2, 6000), generator=g)  # degrees 0 to about 9
    fanouts = [50, 50]
    a = _graph_sampler(edge_index, n, fanouts, fused=True)
    if a._kernels is None:
        pytest.skip("this build has no sampler kernels")
    b = _graph_sampler(edge_index, n, fanouts, fused=False)
    seed = torch.randperm(n, generator=g)[:200]
    x, y = a._sample(seed), b._sample(seed)
    assert x.num_sampled_nodes == y.num_sampled_nodes
    assert x.num_sampled_edges == y.num_sampled_edges
    lo = 0
    for size in x.num_sampled_nodes:
        assert set(x.node[lo:lo + size].tolist()) == set(y.node[lo:lo + size].tolist())
        lo += size
    assert sorted(x.edge.tolist()) == sorted(y.edge.tolist())
    ex = set(zip(x.node[x.row].tolist(), x.node[x.col].tolist(), x.edge.tolist()))
    ey = set(zip(y.node[y.row].tolist(), y.node[y.col].tolist(), y.edge.tolist()))
    assert ex == ey


@needs_cuda
def test_fused_sampler_draws_uniformly():
    """A node with 100 in-neighbours and fanout 50 over 200 batches: 10 000
    draws with replacement, each neighbour drawn 100 times on average."""
    n = 101
    edge_index = torch.stack([torch.arange(1, n), torch.zeros(n - 1, dtype=torch.int64)])
    sampler = _graph_sampler(edge_index, n, [50])
    if sampler._kernels is None:
        pytest.skip("this build has no sampler kernels")
    counts = torch.zeros(n, dtype=torch.int64)
    repeats = 0
    for _ in range(200):
        out = sampler._sample(torch.tensor([0]))
        srcs = out.node[out.row].cpu()
        counts += torch.bincount(srcs, minlength=n)
        repeats += 50 - srcs.unique().numel()
    assert counts[0] == 0 and int(counts.sum()) == 10000
    assert 55 <= int(counts[1:].min()) and int(counts[1:].max()) <= 150
    assert repeats > 0  # with replacement
    # Two batches differ (a key a batch), two samplers from one seed agree.
    again = _graph_sampler(edge_index, n, [50])
    first, second = again._sample(torch.tensor([0])), again._sample(torch.tensor([0]))
    assert not torch.equal(first.edge, second.edge)
    replay = _graph_sampler(edge_index, n, [50])
    assert torch.equal(replay._sample(torch.tensor([0])).edge, first.edge)


@needs_cuda
def test_fused_sampler_rejects_bad_seeds_and_stays_usable():
    n = 1000
    g = torch.Generator().manual_seed(13)
    edge_index = torch.randint(0, n, (2, 8000), generator=g)
    sampler = _graph_sampler(edge_index, n, [5, 5])
    if sampler._kernels is None:
        pytest.skip("this build has no sampler kernels")
    with pytest.raises(ValueError, match="seed is not a node"):
        sampler._sample(torch.tensor([3, n, 4]))
    with pytest.raises(ValueError, match="seed is not a node"):
        sampler._sample(torch.tensor([-1]))
    assert bool((sampler._local == -1).all())
    seed = torch.tensor([3, 4, 5])
    _check_sample(sampler, seed, sampler._sample(seed), [5, 5])
    # A strided view of seeds, and no seeds at all.
    wide = torch.tensor([[7, 0], [8, 0], [9, 0]], device="cuda")[:, 0]
    _check_sample(sampler, wide.cpu(), sampler._sample(wide), [5, 5])
    empty = sampler._sample(torch.tensor([], dtype=torch.int64))
    assert empty.node.numel() == 0 and empty.edge.numel() == 0
