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
