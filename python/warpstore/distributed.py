"""Several GPUs, one process each (torchrun): caches that serve each other.

Every rank opens the same file with a cache of its own. Wrapped in
:class:`PeerArray`, the ranks of a process group share the ownership of the
file's cache lines: each line belongs to one rank (a hash of the line), a
rank sends the row ids it wants to their owners, each owner gathers them
through its own cache (fetching a line from storage once, for everyone) and
the rows come back over the GPUs' links (NVLink where the GPUs have it)
through NCCL's all-to-all. The group's caches then hold one copy of each
line instead of one per GPU: the node caches the sum of its GPUs' caches,
and storage is read once per line, not once per GPU that wants it.

    torch.distributed.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    x = warpstore.open("features.f32", "float32", (-1, 128), cache="8GiB")
    feats = warpstore.distributed.PeerArray(x)
    rows = feats.gather(idx)       # a collective: every rank calls it, each with its own idx

A gather is a collective of the group: every rank must call it, the same
number of times, in the same order (as with any torch.distributed call);
the ranks' index tensors may differ in length, and may be empty.

Without torch.distributed initialized (or in a group of one) a PeerArray
gathers through its own array, unchanged.
"""
import time

import torch
import torch.distributed as dist

__all__ = ["PeerArray", "owner_of_lines"]

# Multiplicative hash (Knuth): neighbouring lines land on different ranks, and
# a stride that is a multiple of the world size does not pile onto one.
_GOLDEN = 0x9E3779B1


def owner_of_lines(lines, world):
    """The rank that owns each cache line in `lines` (an int64 tensor), among
    `world` ranks. The same on every rank and every device."""
    if world == 1:
        return torch.zeros_like(lines)
    h = (lines * _GOLDEN) & 0xFFFFFFFF  # wraps in int64 the same everywhere; kept to 32 bits
    return ((h >> 13) ^ h) % world


class PeerArray:
    """A warpstore.Array whose cache lines are owned across the ranks of a
    process group; see the module's text.

    array: this rank's warpstore.Array over the shared file (the same path,
        dtype, shape and line size on every rank; each with its own cache).
    group: the process group (default: the whole world). Its backend must
        move the index's tensors: NCCL for CUDA tensors (the rows then move
        GPU to GPU), gloo for CPU tensors (the CPU backend, as CI tests it).

    Counters (summed over this rank's gathers): rows_asked (rows this rank
    wanted, before removing repeats), rows_sent (ids sent to other ranks),
    rows_served (rows this rank gathered for others), and seconds spent in
    the exchange (exchange_seconds) and in this rank's own gathers
    (gather_seconds). stats() adds this rank's cache counters.
    """

    def __init__(self, array, group=None):
        self.array = array
        self.group = group
        on = dist.is_available() and dist.is_initialized()
        self.world = dist.get_world_size(group) if on else 1
        self.rank = dist.get_rank(group) if on else 0
        row_bytes = array._row_bytes
        line = array._settings["line_size"]
        # Owners by line, so the rows that share a line share an owner (and
        # a row larger than a line belongs to the owner of its first line).
        self._row_bytes, self._line = row_bytes, line
        self.rows_asked = self.rows_sent = self.rows_served = 0
        self.exchange_seconds = self.gather_seconds = 0.0
        if self.world > 1:
            self._check_alike()

    def _check_alike(self):
        """Every rank must hold the same file, shape, dtype and line size:
        a rank serving rows of another file would hand out wrong data."""
        me = (self.array.path, tuple(self.array.shape), str(self.array.dtype), self._line)
        everyone = [None] * self.world
        dist.all_gather_object(everyone, me, group=self.group)
        for r, other in enumerate(everyone):
            if other != me:
                raise ValueError(f"PeerArray: rank {r} holds {other}, rank {self.rank} holds {me}: "
                                 "every rank must open the same file with the same dtype, shape "
                                 "and line size")

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype

    def __len__(self):
        return len(self.array)

    def owners(self, idx):
        """The owning rank of each row id in idx (an int64 tensor)."""
        lines = (idx.to(torch.int64) * self._row_bytes) // self._line
        return owner_of_lines(lines, self.world)

    def gather(self, idx):
        """Rows `idx` (an int tensor on this rank's device, any shape;
        negative ids count from the end), each fetched through the cache of
        the rank that owns its line. A collective: every rank of the group
        calls it. An id out of range on any rank makes every rank raise
        (IndexError on that rank, RuntimeError naming it on the others)
        before any row moves; a read that fails on an owner makes every rank
        raise (the owner's OSError there) before rows go back. No rank is
        left waiting in the exchange, and none gets rows that were not read."""
        if self.world == 1:
            t0 = time.perf_counter()
            out = self.array.gather(idx)
            self.gather_seconds += time.perf_counter() - t0
            self.rows_asked += idx.numel()
            return out
        x = self._ask(idx)
        t1 = time.perf_counter()
        error = None
        try:
            served = self.array.gather(x.asked)  # through this rank's own cache
        except Exception as e:  # noqa: BLE001 (every rank learns of it, then it is raised)
            error, served = e, None
        t2 = time.perf_counter()
        self.gather_seconds += t2 - t1
        self._agree(error)
        out = self._answer(x, served)
        self.exchange_seconds += (t1 - x.t0) + (time.perf_counter() - t2)
        return out

    def gather_async(self, idx):
        """gather() with the rows' reads and their way back queued on the
        current CUDA stream: returns at once a handle whose ``tensor`` the
        stream's later work may use and whose ``wait()`` (a collective too:
        every rank waits for its handles in the same order) raises what
        gather() would. The ids' exchange still waits for the ids, as
        gather() does. Without CUDA, gathers at once."""
        if self.world == 1:
            return self.array.gather_async(idx)
        if not (isinstance(idx, torch.Tensor) and idx.is_cuda):
            return _PeerPending(self, None, self.gather(idx))
        x = self._ask(idx)
        pending = self.array.gather_async(x.asked)  # on the current stream: no wait here
        out = self._answer(x, pending.tensor)  # enqueued after the reads
        self.exchange_seconds += time.perf_counter() - x.t0
        return _PeerPending(self, pending, out)

    def _ask(self, idx):
        """Checks the ids everywhere, tells every rank what it serves whom,
        and sends each owner the ids it serves."""
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"PeerArray.gather takes a tensor of row ids, got {type(idx)}")
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise TypeError(f"row ids must be integers, got {idx.dtype}")
        x = _Exchange()
        x.t0 = time.perf_counter()
        x.shape = tuple(idx.shape)
        given = idx.reshape(-1).to(torch.int64)
        n = len(self.array)
        flat = torch.where(given < 0, given + n, given)
        bad = (flat < 0) | (flat >= n)
        # Each row once, grouped by owner.
        uniq, x.inverse = torch.unique(flat.clamp(0, n - 1), return_inverse=True)
        owner = self.owners(uniq)
        x.order = torch.argsort(owner, stable=True)
        want = uniq[x.order]
        # One collective tells every rank what each sends whom, and whether
        # any rank holds a bad id (then all raise, none waits).
        mine = torch.empty(self.world + 2, dtype=torch.int64, device=idx.device)
        mine[: self.world] = torch.bincount(owner, minlength=self.world)
        mine[self.world] = bad.any().to(torch.int64)
        mine[self.world + 1] = given[bad.to(torch.int64).argmax()] if given.numel() else 0
        table = torch.empty(self.world * (self.world + 2), dtype=torch.int64, device=idx.device)
        dist.all_gather_into_tensor(table, mine, group=self.group)
        table = table.cpu().view(self.world, self.world + 2)
        if bool(table[:, self.world].any()):
            r = int(table[:, self.world].nonzero()[0])
            row = int(table[r, self.world + 1])
            if r == self.rank:
                raise IndexError(f"{self.array.path}: row {row} is out of range for {n} rows")
            raise RuntimeError(f"PeerArray.gather: rank {r} asked for row {row}, out of range for "
                               f"{n} rows; nothing was exchanged")
        x.send = table[self.rank, : self.world].tolist()
        x.recv = table[:, self.rank].tolist()
        self.rows_asked += given.numel()
        x.wanted = want.numel()
        x.asked = torch.empty(sum(x.recv), dtype=torch.int64, device=idx.device)
        dist.all_to_all_single(x.asked, want, x.recv, x.send, group=self.group)
        return x

    def _answer(self, x, served):
        """Sends the served rows back to the ranks that asked and puts this
        rank's rows in the order of its ids."""
        row_shape = tuple(self.array.shape[1:])
        got = torch.empty((x.wanted,) + row_shape, dtype=served.dtype, device=served.device)
        dist.all_to_all_single(got, served, x.send, x.recv, group=self.group)
        rows = torch.empty_like(got)
        rows[x.order] = got  # back to the order of the unique ids
        self.rows_sent += x.wanted - x.send[self.rank]
        self.rows_served += x.asked.numel() - x.recv[self.rank]
        return rows[x.inverse].reshape(x.shape + row_shape)

    def _agree(self, error):
        """A collective: raises on every rank when any rank's read failed
        (its own error on that rank)."""
        flags = torch.zeros(self.world, dtype=torch.int64)
        failed = torch.tensor([1 if error is not None else 0], dtype=torch.int64)
        dev = torch.device("cuda", torch.cuda.current_device()) if \
            dist.get_backend(self.group) == "nccl" else torch.device("cpu")
        flags, failed = flags.to(dev), failed.to(dev)
        dist.all_gather_into_tensor(flags, failed, group=self.group)
        flags = flags.cpu()
        if error is not None:
            raise error
        if bool(flags.any()):
            r = int(flags.nonzero()[0])
            raise RuntimeError(f"PeerArray.gather: rank {r} could not read the rows it owns (its "
                               f"error is raised there); the rows of this gather are lost on every "
                               f"rank")

    __getitem__ = gather

    def stats(self):
        s = dict(self.array.stats())
        s.update(rows_asked=self.rows_asked, rows_sent=self.rows_sent,
                 rows_served=self.rows_served, exchange_seconds=self.exchange_seconds,
                 gather_seconds=self.gather_seconds, world=self.world, rank=self.rank)
        return s

    def close(self):
        self.array.close()


class _Exchange:
    """One gather's state between asking and answering."""

    __slots__ = ("t0", "shape", "inverse", "order", "send", "recv", "wanted", "asked")


class _PeerPending:
    """The handle of PeerArray.gather_async: ``tensor`` at once, ``wait()``
    (a collective) for the rows or every rank's error."""

    def __init__(self, peer, pending, out):
        self._peer, self._pending, self.tensor = peer, pending, out

    def done(self):
        return self._pending is None or self._pending.done()

    def wait(self):
        if self._pending is None:
            return self.tensor
        pending, self._pending = self._pending, None
        error = None
        try:
            pending.wait()
        except Exception as e:  # noqa: BLE001 (every rank learns of it, then it is raised)
            error = e
        self._peer._agree(error)
        return self.tensor
