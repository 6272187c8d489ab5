"""PyTorch Geometric over warpstore: a FeatureStore whose node features are
warpstore arrays, a small in-memory GraphStore, and a neighbor sampler that
runs on the GPU (the extension's sampler kernels, or plain PyTorch) or, for
installations without pyg-lib or torch-sparse, on the CPU.

    fs = WarpstoreFeatureStore(device="cuda")
    fs.put_tensor(warpstore.open("x.f32", "float32", (-1, 128)), group_name=None, attr_name="x",
                  index=None)
    fs.put_tensor(labels, group_name=None, attr_name="y", index=None)   # small: in memory
    loader = NeighborLoader((fs, gs), num_neighbors=[10, 5], input_nodes=train, batch_size=1024,
                            neighbor_sampler=neighbor_sampler((fs, gs), [10, 5]))
"""
import collections
import threading
import time

import torch
import torch_geometric.typing
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.sampler import NeighborSampler, SamplerOutput

from ._array import Array
from ._backend import backend


def _whole(index):
    return index is None or (isinstance(index, slice) and index == slice(None))


class WarpstoreFeatureStore(FeatureStore):
    """Feature tensors by (group_name, attr_name): warpstore arrays, read row
    by row through their cache, or small in-memory tensors (labels, masks).

    device: where fetched rows go. The sampler hands out node ids (on the
    GPU with neighbor_sampler(..., device="cuda")); with device="cuda"
    warpstore gathers the rows straight into GPU memory.

    Iterate a loader through ``fetch_ahead(loader)`` to fetch the features
    of the next batch while this one trains: the gathers of warpstore
    arrays run asynchronously on a stream of their own.

    fetch_seconds adds up the time spent fetching on the caller's thread;
    exposed_fetch_seconds the time fetch_ahead waited for rows that were
    not in yet: the fetch time a training step sees.

    fetch_priority: whether fetch_ahead's gathers run on a CUDA stream of the
    highest priority, so that their blocks get the next free
    multiprocessors before queued training blocks do. None takes the
    fetch_priority setting (WARPSTORE_FETCH_PRIORITY, off by default).
    """

    def __init__(self, device=None, fetch_priority=None):
        super().__init__()
        if fetch_priority is None:
            fetch_priority = bool(backend().environment_settings()["fetch_priority"])
        self.fetch_priority = bool(fetch_priority)
        self._store = {}
        self.device = torch.device(device) if device is not None else None
        self.fetch_seconds = 0.0
        self.exposed_fetch_seconds = 0.0
        self.launch_seconds = 0.0  # of fetch_seconds, inside gather_async calls (fetch_ahead)
        self._ahead = False   # inside fetch_ahead: warpstore gathers start, nobody waits
        self._pending = []    # the gathers started for the batch being collated
        self._stream = None   # the stream they run on

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

    def _cuda(self):
        return self.device is not None and self.device.type == "cuda"

    def _get_tensor(self, attr):
        key = self._key(attr)
        if key not in self._store:
            raise KeyError(f"no tensor for {attr}")
        t = self._store[key]
        index = attr.index
        if self._ahead and hasattr(t, "gather_async") and self._cuda():
            return self._start_fetch(t, index)
        # Timed on the caller's stream only: a device-wide synchronize would
        # also wait for fetches running ahead on the store's own stream.
        sync = (lambda: torch.cuda.current_stream(self.device).synchronize()) if self._cuda() \
            else (lambda: None)
        sync()
        t0 = time.perf_counter()
        if not isinstance(t, torch.Tensor):  # a warpstore.Array (or alike): rows by index
            if _whole(index):
                index = torch.arange(len(t))
            out = t.gather(index.to(self.device) if self.device is not None else index)
        else:
            out = t if _whole(index) else t[index.to(t.device)]
            if self.device is not None:
                out = out.to(self.device)
        sync()
        self.fetch_seconds += time.perf_counter() - t0
        return out

    def _start_fetch(self, t, index):
        """Starts gathering rows `index` of warpstore array t on the store's
        stream and returns their tensor at once (fetch_ahead waits)."""
        t0 = time.perf_counter()
        dev = self.device
        idx = torch.arange(len(t), device=dev) if _whole(index) else index.to(dev)
        if self._stream is None:
            # The highest priority is the most negative (torch clamps it).
            self._stream = torch.cuda.Stream(dev, priority=-8 if self.fetch_priority else 0)
        self._stream.wait_stream(torch.cuda.current_stream(dev))  # the ids come from there
        t1 = time.perf_counter()
        with torch.cuda.stream(self._stream):
            pending = t.gather_async(idx)
        self.launch_seconds += time.perf_counter() - t1
        idx.record_stream(self._stream)
        self._pending.append(pending)
        self.fetch_seconds += time.perf_counter() - t0
        return pending.tensor

    def fetch_ahead(self, loader, depth=1):
        """Yields the batches of `loader` (a NeighborLoader over this store)
        with the features of the next `depth` batches already on their way:
        batch k+1 is sampled and its rows start arriving before batch k is
        handed out, so they come in while k trains. Each batch's gathers are
        waited for (and their errors raised) before it is handed out; the
        wait adds to exposed_fetch_seconds. Without a GPU, or for sources
        without gather_async (tensors), rows are fetched as the batch is made.
        """
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        ahead = collections.deque()
        it = iter(loader)

        def pull():
            self._pending = []
            try:
                batch = next(it)
            except StopIteration:
                return False
            finally:
                pending, self._pending = self._pending, []
            ahead.append((batch, pending))
            return True

        self._ahead = True
        try:
            for _ in range(depth):
                if not pull():
                    break
            while ahead:
                batch, pending = ahead.popleft()
                t0 = time.perf_counter()
                for p in pending:
                    p.wait()
                self.exposed_fetch_seconds += time.perf_counter() - t0
                if pending:
                    current = torch.cuda.current_stream(self.device)
                    for p in pending:  # made on the store's stream, used on the caller's
                        if p.tensor.is_cuda:
                            p.tensor.record_stream(current)
                pull()
                yield batch
        finally:
            self._ahead = False
            for _, pending in ahead:  # a loop left early: nothing stays in flight
                for p in pending:
                    try:
                        p.wait()
                    except Exception:  # noqa: BLE001 (the batch is dropped with its error)
                        pass

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
        """Closes the store's arrays (warpstore.Array, and wrappers of them
        with a close(): warpstore.distributed.PeerArray)."""
        for t in self._store.values():
            if isinstance(t, Array) or (not isinstance(t, torch.Tensor) and hasattr(t, "close")):
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
    """NeighborSampler in plain PyTorch for homogeneous graphs, on the GPU
    where the graph fits there (so the feature fetch, not the sampler,
    decides the epoch), else on the CPU: there PyG's own sampler serves
    where pyg-lib or torch-sparse is installed, this one otherwise. It takes
    every neighbor of a node with at most `fanout` of them and `fanout`
    uniform draws with replacement otherwise.

    device: where to sample ("cuda", "cpu"; None: the CPU). On a GPU the
    graph's CSC arrays are copied there once, if they take at most half of
    the free GPU memory; the sampled ids then stay on the GPU. There every
    hop of a batch runs in the extension's sampler kernels (a few a hop,
    one wait a batch) where the fanouts are positive; `fused=False`, a
    fanout of -1 (every neighbour) or a build without CUDA take the plain
    PyTorch path (about 20 operations and two waits a hop). Both draw the
    same way; they number a batch's new nodes differently (PyTorch in id
    order, the kernels in the order of their first sampled edge).
    """

    sample_seconds = 0.0  # time spent sampling, summed (the epoch's profile)

    def __init__(self, data, num_neighbors, device=None, fused=True, **kwargs):
        super().__init__(data, num_neighbors, **kwargs)
        self.device = self._fitting_device(device)
        self._graph = None
        self._local = None
        # Draws from a generator of its own, seeded here from torch's: the
        # samples depend on torch.manual_seed before this, not on other
        # draws (dropout) between batches nor on the thread that samples.
        self._seed = int(torch.randint(0, 2**62, (1,)))
        self._generator = None
        self._batches = 0  # the fused path's draws: a key per batch
        self._fused = fused
        self._plans = {}  # (seeds, fanouts): the fused path's capacities and workspace bytes
        self._process_state()

    def _process_state(self):
        """What is not pickled (DataLoader workers started by spawn): the
        extension, the pinned sizes, and the lock that runs one batch at a
        time (every batch uses the graph's `local` table, and the fused path
        the pinned sizes, leaving them clean when it is done)."""
        self._kernels = (self._sampler_kernels() if self._fused and self.device.type == "cuda"
                         else None)
        self._sizes = None  # pinned: the fused path's sizes of a batch
        self._lock = threading.Lock()

    def __getstate__(self):
        state = self.__dict__.copy()
        for k in ("_kernels", "_sizes", "_lock"):
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._process_state()

    @staticmethod
    def _sampler_kernels():
        """The CUDA extension when it has the sampler's kernels, else None."""
        try:
            ext = backend("cuda")
        except (RuntimeError, ImportError):
            return None
        return ext if hasattr(ext, "sample_hops") else None

    def _fitting_device(self, device):
        device = torch.device(device) if device is not None else torch.device("cpu")
        if device.type != "cuda":
            return device
        need = (self.colptr.numel() + self.row.numel()) * 8 + (self.colptr.numel() - 1) * 8
        free, _ = torch.cuda.mem_get_info(device)
        return device if need <= free // 2 else torch.device("cpu")

    def _sample(self, seed, seed_time=None, **kwargs):
        t0 = time.perf_counter()
        try:
            with self._lock:
                return self._sample_timed(seed, seed_time, **kwargs)
        finally:
            self.sample_seconds += time.perf_counter() - t0

    def _sample_timed(self, seed, seed_time=None, **kwargs):
        dev = self.device
        if dev.type == "cpu" and (torch_geometric.typing.WITH_PYG_LIB or
                                  torch_geometric.typing.WITH_TORCH_SPARSE) or \
                isinstance(seed, dict):
            return super()._sample(seed, seed_time, **kwargs)
        if self._graph is None:
            self._graph = (self.colptr.to(dev, torch.int64), self.row.to(dev, torch.int64))
            self._local = torch.full((self.colptr.numel() - 1,), -1, dtype=torch.int64, device=dev)
            self._generator = torch.Generator(dev).manual_seed(self._seed)
            if isinstance(getattr(self, "perm", None), torch.Tensor):
                self.perm = self.perm.to(dev)  # edge ids map back on the sampler's device
        colptr, row = self._graph
        local = self._local
        seed = seed.to(dev, torch.int64)
        fanouts = self.num_neighbors.get_mapped_values()
        if self._kernels is not None and seed.numel() and all(f > 0 for f in fanouts):
            return self._sample_fused(seed.contiguous(), [int(f) for f in fanouts])
        local[seed] = torch.arange(seed.numel(), device=dev)
        nodes, rows, cols, edges = [seed], [], [], []
        sampled_nodes, sampled_edges = [seed.numel()], []
        frontier, count = seed, seed.numel()
        for fanout in fanouts:
            start = colptr[frontier]
            deg = colptr[frontier + 1] - start
            take = deg if fanout < 0 else deg.clamp(max=fanout)
            total = int(take.sum())
            owner = torch.repeat_interleave(torch.arange(frontier.numel(), device=dev), take,
                                            output_size=total)
            first = torch.repeat_interleave(torch.cumsum(take, 0) - take, take, output_size=total)
            position = torch.arange(total, device=dev) - first
            draw = (torch.rand(total, device=dev, generator=self._generator) *
                    deg[owner]).to(torch.int64)
            e = start[owner] + torch.where(deg[owner] == take[owner], position, draw)
            nbr = row[e]
            # The nodes not seen yet, once each, in order: one unique over
            # every neighbor, those seen replaced by `none` (appended once, so
            # it is always the last), waits for the GPU once where a mask
            # and a unique waited twice.
            none = local.new_full((1,), local.numel())
            new = torch.unique(torch.cat([torch.where(local[nbr] < 0, nbr, none), none]))[:-1]
            local[new] = torch.arange(count, count + new.numel(), device=dev)
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

    def _sample_fused(self, seed, fanouts):
        """Every hop in the extension's kernels on the current stream; one
        wait, for the sizes, at the end."""
        ext, dev = self._kernels, self.device
        colptr, row = self._graph
        nodes, seeds = colptr.numel() - 1, seed.numel()
        plan = self._plans.get((seeds, tuple(fanouts)))
        if plan is None:  # a batch size seen first (most batches have one size)
            plan = self._plans[(seeds, tuple(fanouts))] = (
                *ext.sample_capacity(seeds, nodes, fanouts),
                ext.sample_workspace_bytes(seeds, nodes, fanouts))
        node_cap, offsets, work_bytes = plan
        edge_cap = offsets[-1]
        out = torch.empty(node_cap + 3 * edge_cap, dtype=torch.int64, device=dev)
        node_out = out[:node_cap]
        edge_out, src_out, dst_out = out[node_cap:].view(3, edge_cap).unbind(0)
        work = torch.empty(work_bytes, dtype=torch.uint8, device=dev)
        hops = len(fanouts)
        if self._sizes is None or self._sizes.numel() != 2 * hops + 2:
            self._sizes = torch.zeros(2 * hops + 2, dtype=torch.int64, pin_memory=True)
        stream = torch.cuda.current_stream(dev)
        key = (self._seed * 0x9E3779B97F4A7C15 + self._batches) & (2**64 - 1)
        self._batches += 1
        with torch.cuda.device(dev):
            ext.sample_hops(colptr.data_ptr(), row.data_ptr(), nodes, row.numel(),
                            self._local.data_ptr(), seed.data_ptr(), seeds, fanouts, key,
                            node_out.data_ptr(), edge_out.data_ptr(), src_out.data_ptr(),
                            dst_out.data_ptr(), work.data_ptr(), work.numel(),
                            self._sizes.data_ptr(), stream.cuda_stream)
        stream.synchronize()
        sizes = self._sizes.tolist()
        problem = sizes[2 * hops + 1]
        if problem:
            why = {1: "a seed is not a node of the graph",
                   2: "the graph's colptr puts a node's edges outside its row array",
                   3: "an edge's source is not a node of the graph"}.get(problem, str(problem))
            raise ValueError(f"neighbor sampling failed: {why}")
        new, edges = sizes[:hops + 1], sizes[hops + 1:2 * hops + 1]
        parts = [(offsets[h], offsets[h] + edges[h]) for h in range(hops)]
        return SamplerOutput(
            node=node_out[:sum(new)],
            row=torch.cat([src_out[a:b] for a, b in parts]),
            col=torch.cat([dst_out[a:b] for a, b in parts]),
            edge=torch.cat([edge_out[a:b] for a, b in parts]),
            batch=None, num_sampled_nodes=new, num_sampled_edges=edges)


def neighbor_sampler(data, num_neighbors, device=None, **kwargs):
    """The sampler NeighborLoader should use: on `device` (a GPU where the
    graph fits there), else PyG's own on the CPU where pyg-lib or
    torch-sparse is installed, else the plain-PyTorch one on the CPU."""
    return TorchNeighborSampler(data, num_neighbors, device=device, **kwargs)
