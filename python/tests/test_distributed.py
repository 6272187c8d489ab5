"""warpstore.distributed.PeerArray: ranks that own cache lines and serve each
other's rows. On the CPU backend the ranks are processes exchanging through
gloo (every CI run); on a machine with two GPUs or more, through NCCL with
the CUDA backend."""
import multiprocessing as mp
import os
import socket
import traceback

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(world, body, *args, cuda=False, timeout=120):
    """Runs body(rank, world, *args) in `world` spawned processes joined in
    one process group; fails with the first rank's traceback."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    errors = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, cuda, errors, body, args))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
            pytest.fail(f"rank {procs.index(p)} did not finish in {timeout} s (a hang)")
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, "\n".join(failures)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


def _rank_main(rank, world, port, cuda, errors, body, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WARPSTORE_BACKEND=(
        "cuda" if cuda else "cpu"))
    try:
        if cuda:
            torch.cuda.set_device(rank)
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
        try:
            body(rank, world, *args)
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 (reported to the parent)
        errors.put(f"rank {rank}:\n{traceback.format_exc()}")


def _file(tmp_path, rows, dim, seed=3):
    data = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    path = str(tmp_path / f"x-{rows}x{dim}.f32")
    data.tofile(path)
    return path, data


def _device(rank):
    return torch.device("cuda", rank) if torch.cuda.is_available() and \
        os.environ.get("WARPSTORE_BACKEND") == "cuda" else torch.device("cpu")


def _gathers_right_rows(rank, world, path, rows, dim):
    import warpstore
    from warpstore.distributed import PeerArray

    ref = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, dim))
    dev = _device(rank)
    with warpstore.open(path, "float32", (rows, dim), cache="256KiB", threads=1) as a:
        p = PeerArray(a)
        assert (p.world, p.rank) == (world, rank)
        g = np.random.default_rng(100 + rank)
        for k in range(12):
            gather = p.gather if k % 3 else (lambda i: p.gather_async(i).wait())
            n = 0 if (k == 3 and rank == 1) else int(g.integers(1, 3000))  # one rank asks nothing
            ids = g.integers(-rows, rows, n)  # repeats and negative ids
            idx = torch.from_numpy(ids).to(dev)
            if k % 2:
                idx = idx.reshape(-1, 1) if n else idx  # any shape: [n, 1] -> [n, 1, dim]
            out = gather(idx)
            assert tuple(out.shape) == tuple(idx.shape) + (dim,)
            np.testing.assert_array_equal(out.reshape(-1, dim).cpu().numpy(), ref[ids])
        s = p.stats()
        assert s["rows_asked"] > 0 and s["rows_served"] > 0 and s["rows_sent"] > 0


@pytest.mark.parametrize("world,dim", [(2, 128), (3, 100)])
def test_every_rank_gets_its_rows(tmp_path, world, dim):
    path, _ = _file(tmp_path, 20000, dim)
    _run(world, _gathers_right_rows, path, 20000, dim)


def _one_fetch_per_line(rank, world, path, rows, dim, out_dir):
    """With caches that hold the file, shared ownership reads each line
    once for the whole group; private caches once per rank that wants it."""
    import warpstore
    from warpstore.distributed import PeerArray

    dev = _device(rank)
    g = np.random.default_rng(7 + rank)
    batches = [g.integers(0, rows, 2000) for _ in range(6)]
    result = {}
    for mode in ("private", "shared"):
        # The host controller: every line is a miss once. (Over the memory
        # controller, which auto picks for this cached file, a warp may read
        # a busy line around the cache, and a line read only that way is
        # never counted a miss.)
        with warpstore.open(path, "float32", (rows, dim), cache="16MiB", threads=1,
                            controller="host") as a:
            p = PeerArray(a) if mode == "shared" else a
            for ids in batches:
                p.gather(torch.from_numpy(ids).to(dev))
            result[mode] = a.stats()["misses"]
    everyone = [None] * world
    dist.all_gather_object(everyone, (result, [b.tolist() for b in batches]))
    if rank == 0:
        lines = [set(x for b in bs for x in b) for _, bs in everyone]  # 512 B rows: a row a line
        private = sum(r["private"] for r, _ in everyone)
        shared = sum(r["shared"] for r, _ in everyone)
        assert private == sum(len(s) for s in lines), (private, [len(s) for s in lines])
        assert shared == len(set().union(*lines)), (shared, len(set().union(*lines)))
        assert shared < private


def test_shared_ownership_reads_each_line_once(tmp_path):
    path, _ = _file(tmp_path, 8000, 128)  # 512 B rows, 4 MiB: each cache holds it all
    _run(2, _one_fetch_per_line, path, 8000, 128, str(tmp_path))


def _bad_ids_raise_everywhere(rank, world, path, rows, dim):
    import warpstore
    from warpstore.distributed import PeerArray

    ref = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, dim))
    dev = _device(rank)
    with warpstore.open(path, "float32", (rows, dim), cache="256KiB", threads=1) as a:
        p = PeerArray(a)
        ids = torch.tensor([1, 2, rows + 5 if rank == 1 else 3], device=dev)
        with pytest.raises(IndexError if rank == 1 else RuntimeError,
                           match=str(rows + 5)):
            p.gather(ids)
        # Nothing was left half-exchanged: the next gather works on every rank.
        ok = torch.tensor([5, rows - 1, 0], device=dev)
        np.testing.assert_array_equal(p.gather(ok).cpu().numpy(), ref[[5, rows - 1, 0]])
        with pytest.raises(TypeError):
            p.gather(torch.tensor([0.5], device=dev))


def test_an_id_out_of_range_on_one_rank_raises_on_all(tmp_path):
    path, _ = _file(tmp_path, 5000, 64)
    _run(2, _bad_ids_raise_everywhere, path, 5000, 64)


def _failed_reads_raise_everywhere(rank, world, path, rows, dim):
    import warpstore
    from warpstore.distributed import PeerArray

    ref = np.array(np.memmap(path, dtype=np.float32, mode="r", shape=(rows, dim)))
    dev = _device(rank)
    # The host controller reports reads past a truncated end (the memory
    # controller, which auto picks for this small cached file, keeps the
    # bytes it had).
    with warpstore.open(path, "float32", (rows, dim), cache="256KiB", threads=1,
                        controller="host") as a:
        p = PeerArray(a)
        dist.barrier()
        if rank == 0:
            os.truncate(path, rows // 2 * dim * 4)  # the second half of the rows is gone
        dist.barrier()
        for use_async in (False, True):
            ids = torch.tensor([rows - 1 - rank, rows - 50, 1], device=dev)
            # The owner of each lost row fails to read it; every rank raises,
            # none waits in the exchange, none gets the rows.
            with pytest.raises((OSError, RuntimeError)):
                if use_async:
                    p.gather_async(ids).wait()
                else:
                    p.gather(ids)
        ok = torch.tensor([5, rows // 2 - 1, 0], device=dev)
        np.testing.assert_array_equal(p.gather(ok).cpu().numpy(), ref[[5, rows // 2 - 1, 0]])
        np.testing.assert_array_equal(p.gather_async(ok).wait().cpu().numpy(),
                                      ref[[5, rows // 2 - 1, 0]])


def test_a_failed_read_on_one_owner_raises_on_all(tmp_path):
    path, _ = _file(tmp_path, 8000, 128)
    _run(2, _failed_reads_raise_everywhere, path, 8000, 128)


def _different_files_refused(rank, world, path, rows, dim):
    import warpstore
    from warpstore.distributed import PeerArray

    shape = (rows, dim) if rank == 0 else (rows // 2, dim)
    with warpstore.open(path, "float32", shape, cache="256KiB", threads=1) as a:
        with pytest.raises(ValueError, match="same file"):
            PeerArray(a)


def test_ranks_holding_different_arrays_are_refused(tmp_path):
    path, _ = _file(tmp_path, 4000, 32)
    _run(2, _different_files_refused, path, 4000, 32)


def test_owners_spread_lines_evenly():
    from warpstore.distributed import owner_of_lines

    lines = torch.arange(1 << 16)
    for world in (2, 3, 4, 8):
        counts = torch.bincount(owner_of_lines(lines, world), minlength=world)
        assert int(counts.min()) > 0.9 * (1 << 16) / world, (world, counts.tolist())
        # A stride of the world size does not pile onto one rank.
        strided = torch.bincount(owner_of_lines(lines[::world], world), minlength=world)
        assert int(strided.max()) < 1.5 * strided.sum().item() / world, (world, strided.tolist())
    assert owner_of_lines(lines, 1).eq(0).all()


def two_gpus():
    return torch.cuda.is_available() and torch.cuda.device_count() >= 2 and \
        dist.is_nccl_available()


@pytest.mark.skipif(not two_gpus(), reason="needs two GPUs and NCCL")
def test_every_rank_gets_its_rows_over_nccl(tmp_path):
    path, _ = _file(tmp_path, 20000, 128)
    _run(2, _gathers_right_rows, path, 20000, 128, cuda=True)


@pytest.mark.skipif(not two_gpus(), reason="needs two GPUs and NCCL")
def test_shared_ownership_reads_each_line_once_over_nccl(tmp_path):
    path, _ = _file(tmp_path, 8000, 128)
    _run(2, _one_fetch_per_line, path, 8000, 128, str(tmp_path), cuda=True)


@pytest.mark.skipif(not two_gpus(), reason="needs two GPUs and NCCL")
def test_a_failed_read_on_one_owner_raises_on_all_over_nccl(tmp_path):
    path, _ = _file(tmp_path, 8000, 128)
    _run(2, _failed_reads_raise_everywhere, path, 8000, 128, cuda=True)


def test_the_module_is_reached_from_the_package():
    import warpstore

    assert warpstore.distributed.PeerArray.__name__ == "PeerArray"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        warpstore.nothing  # noqa: B018
