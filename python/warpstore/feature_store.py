"""PyTorch Geometric over warpstore: a FeatureStore whose node features are
warpstore arrays, a small in-memory GraphStore, and a neighbor sampler in
plain PyTorch for installations without pyg-lib or torch-sparse.

    fs = WarpstoreFeatureStore(device="cuda")
    fs.put_tensor(warpstore.open("x.f32", "float32", (-1, 128)), group_name=None, attr_name="x",
                  index=None)
    fs.put_tensor(labels, group_name=None, attr_name="y", index=None)   # small: in memory
    loader = NeighborLoader((fs, gs), num_neighbors=[10, 5], input_nodes=train, batch_size=1024,
                            neighbor_sampler=neighbor_sampler((fs, gs), [10, 5]))
"""
import time

import torch
import torch_geometric.typing
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.sampler import NeighborSampler, SamplerOutput

from ._array import Array


def _whole(index):
    return index is None or (isinstance(index, slice) and index == slice(None))


class WarpstoreFeatureStore(FeatureStore):
    """Feature tensors by (group_name, attr_name): warpstore arrays, read row
    by row through their cache, or small in-memory tensors (labels, masks).

    device: where fetched rows go. The sampler hands out node ids on the CPU;
    with device="cuda" they move to the GPU first and warpstore gathers the
    rows straight into GPU memory. fetch_seconds adds up the time spent
    fetching (synchronized), for the share of an epoch it takes.
    """

    def __init__(self, device=None):
        super().__init__()
        self._store = {}
        self.device = torch.device(device) if device is not None else None
        self.fetch_seconds = 0.0

    @staticmethod
    def _key(attr):
        return (attr.group_name, attr.attr_name)

    def _put_tensor(self, tensor, attr):
        if not _whole(attr.index):
            raise ValueError("WarpstoreFeatureStore: put whole tensors (index=None); warpstore "
                             "arrays are read-only")
        if not isinstance(tensor, torch.Tensor) and not hasattr(tensor, "gather"):
            raise TypeError(f"expected a warpstore.Array (or an object with gather(idx) and "
                            f"shape) or a torch.Tensor, got {type(tensor)}")
        self._store[self._key(attr)] = tensor
        return True

    def _get_tensor(self, attr):
        key = self._key(attr)
        if key not in self._store:
            raise KeyError(f"no tensor for {attr}")
        t = self._store[key]
        index = attr.index
        sync = self.device is not None and self.device.type == "cuda"
        if sync:
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        if not isinstance(t, torch.Tensor):  # a warpstore.Array (or alike): rows by index
            if _whole(index):
                index = torch.arange(len(t))
            out = t.gather(index.to(self.device) if self.device is not None else index)
        else:
            out = t if _whole(index) else t[index.to(t.device)]
            if self.device is not None:
                out = out.to(self.device)
        if sync:
            torch.cuda.synchronize(self.device)
        self.fetch_seconds += time.perf_counter() - t0
        return out

    def _remove_tensor(self, attr):
        return self._store.pop(self._key(attr), None) is not None

    def _get_tensor_size(self, attr):
        t = self._store.get(self._key(attr))
        if t is None:
            return None
        return tuple(t.shape)

    def get_all_tensor_attrs(self):
        return [TensorAttr(group_name=g, attr_name=a) for g, a in self._store]

    def close(self):
        for t in self._store.values():
            if isinstance(t, Array):
                t.close()


class InMemoryGraphStore(GraphStore):
    """Edge indices held in memory (PyG converts them to CSC for sampling)."""

    def __init__(self):
        super().__init__()
        self._store = {}

    @staticmethod
    def _key(attr):
        return (attr.edge_type, attr.layout.value, attr.is_sorted, attr.size)

    def _put_edge_index(self, edge_index, edge_attr):
        self._store[self._key(edge_attr)] = edge_index
        return True

    def _get_edge_index(self, edge_attr):
        return self._store.get(self._key(edge_attr))

    def _remove_edge_index(self, edge_attr):
        return self._store.pop(self._key(edge_attr), None) is not None

    def get_all_edge_attrs(self):
        return [EdgeAttr(*k) for k in self._store]


class TorchNeighborSampler(NeighborSampler):
    """NeighborSampler that falls back to plain PyTorch for homogeneous
    graphs when neither pyg-lib nor torch-sparse is installed. The fallback
    takes every neighbor of a node with at most `fanout` of them and
    `fanout` uniform draws with replacement otherwise."""

    sample_seconds = 0.0  # time spent sampling, summed (the epoch's profile)

    def _sample(self, seed, seed_time=None, **kwargs):
        t0 = time.perf_counter()
        try:
            return self._sample_timed(seed, seed_time, **kwargs)
        finally:
            self.sample_seconds += time.perf_counter() - t0

    def _sample_timed(self, seed, seed_time=None, **kwargs):
        if (torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE or
                isinstance(seed, dict)):
            return super()._sample(seed, seed_time, **kwargs)
        colptr, row = self.colptr, self.row
        if getattr(self, "_local", None) is None or self._local.numel() != colptr.numel() - 1:
            self._local = torch.full((colptr.numel() - 1,), -1, dtype=torch.int64)
        local = self._local
        seed = seed.to(torch.int64)
        local[seed] = torch.arange(seed.numel())
        nodes, rows, cols, edges = [seed], [], [], []
        sampled_nodes, sampled_edges = [seed.numel()], []
        frontier, count = seed, seed.numel()
        for fanout in self.num_neighbors.get_mapped_values():
            start = colptr[frontier]
            deg = colptr[frontier + 1] - start
            take = deg if fanout < 0 else deg.clamp(max=fanout)
            owner = torch.repeat_interleave(torch.arange(frontier.numel()), take)
            first = torch.repeat_interleave(torch.cumsum(take, 0) - take, take)
            position = torch.arange(owner.numel()) - first
            draw = (torch.rand(owner.numel()) * deg[owner]).to(torch.int64)
            e = start[owner] + torch.where(deg[owner] == take[owner], position, draw)
            nbr = row[e].to(torch.int64)
            new = torch.unique(nbr[local[nbr] < 0])
            local[new] = torch.arange(count, count + new.numel())
            count += new.numel()
            rows.append(local[nbr])
            cols.append(local[frontier[owner]])
            edges.append(e)
            nodes.append(new)
            sampled_nodes.append(new.numel())
            sampled_edges.append(e.numel())
            frontier = new
        node = torch.cat(nodes)
        local[node] = -1
        return SamplerOutput(node=node, row=torch.cat(rows), col=torch.cat(cols),
                             edge=torch.cat(edges), batch=None, num_sampled_nodes=sampled_nodes,
                             num_sampled_edges=sampled_edges)


def neighbor_sampler(data, num_neighbors, **kwargs):
    """The sampler NeighborLoader should use: PyG's own where pyg-lib or
    torch-sparse is installed, the plain-PyTorch fallback otherwise."""
    return TorchNeighborSampler(data, num_neighbors, **kwargs)
