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
