"""gather_async, prefetch and the feature store's fetch-ahead: the rows that
arrive are the file's, errors surface at wait() or at the array's next call,
and close() never hangs on a gather nobody waited for."""
import numpy as np
import pytest

import warpstore
from conftest import SMALL, cuda_available, write

torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not cuda_available(), reason="needs a GPU and the CUDA target")


@pytest.fixture
def rows(tmp_path):
    data = np.random.default_rng(3).standard_normal((30000, 64)).astype(np.float32)
    return write(tmp_path / "rows.f32", data), data


def test_cpu_indices_give_a_finished_handle(rows):
    path, data = rows
    with warpstore.open(path, "float32", (-1, 64), **SMALL) as a:
        idx = torch.tensor([5, 29999, 0, -1])
        p = a.gather_async(idx)
        assert p.done()
        np.testing.assert_array_equal(p.wait().numpy(), data[[5, 29999, 0, -1]])
        np.testing.assert_array_equal(p.tensor.numpy(), data[[5, 29999, 0, -1]])
        np.testing.assert_array_equal(a.gather_async(np.array([7, 8])).wait(), data[[7, 8]])
        with pytest.raises(IndexError, match="30000"):
            a.gather_async(torch.tensor([1, 30000]))
        assert a.prefetch(torch.arange(100)).wait() is not None
        assert a.stats()["misses"] > 0


def test_fetch_priority_comes_from_the_setting_unless_given(monkeypatch):
    pytest.importorskip("torch_geometric")
    from warpstore.feature_store import WarpstoreFeatureStore

    monkeypatch.setenv("WARPSTORE_FETCH_PRIORITY", "1")
    assert WarpstoreFeatureStore().fetch_priority
    assert not WarpstoreFeatureStore(fetch_priority=False).fetch_priority
    monkeypatch.setenv("WARPSTORE_FETCH_PRIORITY", "0")
    assert not WarpstoreFeatureStore().fetch_priority


def test_fetch_ahead_on_the_cpu_yields_every_batch(rows):
    """Without a GPU fetch_ahead samples one batch ahead and fetches as
    the batch is made: the same batches, the file's rows."""
    pytest.importorskip("torch_geometric")
    from torch_geometric.loader import NeighborLoader
    from warpstore.feature_store import InMemoryGraphStore, WarpstoreFeatureStore, neighbor_sampler

    path, data = rows
    n = len(data)
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, n, (2, 60000), generator=g)
    fs, gs = WarpstoreFeatureStore(), InMemoryGraphStore()
    fs.put_tensor(warpstore.open(path, "float32", (-1, 64), **SMALL), group_name=None,
                  attr_name="x", index=None)
    gs.put_edge_index(edge_index, edge_type=None, layout="coo", size=(n, n))
    loader = NeighborLoader((fs, gs), num_neighbors=[4, 2], input_nodes=torch.arange(1000),
                            batch_size=300, neighbor_sampler=neighbor_sampler((fs, gs), [4, 2]))
    seen = []
    for batch in fs.fetch_ahead(loader, depth=2):
        np.testing.assert_array_equal(batch.x.numpy(), data[batch.n_id.numpy()])
        seen.append(batch.n_id[:batch.batch_size])
    assert torch.equal(torch.cat(seen), torch.arange(1000))
    with pytest.raises(ValueError, match="depth"):
        next(fs.fetch_ahead(loader, depth=0))
    fs.close()


@cuda
def test_gather_async_rows_arrive_in_stream_order(rows):
    path, data = rows
    with warpstore.open(path, "float32", (-1, 64), **SMALL) as a:
        g = torch.Generator("cuda").manual_seed(2)
        for _ in range(5):
            idx = torch.randint(-30000, 30000, (20000,), device="cuda", generator=g)
            p = a.gather_async(idx)
            # Work queued after it on the same stream sees the rows.
            total = p.tensor.sum(dim=1)
            got = p.wait()
            want = data[idx.cpu().numpy()]
            np.testing.assert_array_equal(got.cpu().numpy(), want)
            np.testing.assert_allclose(total.cpu().numpy(), want.sum(axis=1), rtol=1e-5, atol=1e-4)
            assert p.done()


@cuda
def test_gather_async_on_a_side_stream_overlaps_the_caller(rows):
    path, data = rows
    with warpstore.open(path, "float32", (-1, 64), **SMALL) as a:
        s = torch.cuda.Stream()
        idx = torch.arange(0, 30000, 3, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            pending = [a.gather_async(idx), a.gather_async(idx.flip(0))]
        x = torch.randn(512, 512, device="cuda") @ torch.randn(512, 512, device="cuda")
        got = [p.wait() for p in pending]
        np.testing.assert_array_equal(got[0].cpu().numpy(), data[0:30000:3])
        np.testing.assert_array_equal(got[1].cpu().numpy(), data[0:30000:3][::-1])
        assert torch.isfinite(x).all()


@cuda
def test_out_of_range_raises_at_wait_or_at_the_next_call(rows):
    path, data = rows
    with warpstore.open(path, "float32", (-1, 64), **SMALL) as a:
        idx = torch.tensor([1, 2, 30000, 4], device="cuda")
        with pytest.raises(IndexError, match=r"30000 \(at position 2\)"):
            a.gather_async(idx).wait()
        a.gather_async(idx)  # dropped unwaited
        torch.cuda.synchronize()
        with pytest.raises(IndexError, match="dropped unwaited"):
            a.gather(torch.tensor([0], device="cuda"))
        # Reported once: the array goes on.
        np.testing.assert_array_equal(a.gather(torch.tensor([3], device="cuda")).cpu().numpy(),
                                      data[[3]])


@cuda
def test_close_and_clear_cache_finish_unwaited_gathers(rows):
    path, data = rows
    a = warpstore.open(path, "float32", (-1, 64), **SMALL)
    idx = torch.arange(30000, device="cuda")
    p = a.gather_async(idx)
    a.clear_cache()  # waits for p, does not hang
    np.testing.assert_array_equal(p.wait().cpu().numpy(), data)
    q = a.gather_async(idx.flip(0))
    a.close()  # the same
    assert a.closed
    np.testing.assert_array_equal(q.wait().cpu().numpy(), data[::-1])
    with pytest.raises(ValueError, match="closed"):
        a.gather_async(idx)


@cuda
@pytest.mark.parametrize("priority", [False, True], ids=["default_priority", "high_priority"])
def test_fetch_ahead_with_the_gpu_sampler(rows, priority):
    pytest.importorskip("torch_geometric")
    from torch_geometric.loader import NeighborLoader
    from warpstore.feature_store import InMemoryGraphStore, WarpstoreFeatureStore, neighbor_sampler

    path, data = rows
    n = len(data)
    g = torch.Generator().manual_seed(1)
    src, dst = torch.randint(0, n, (2, 90000), generator=g)
    fs, gs = WarpstoreFeatureStore(device="cuda", fetch_priority=priority), InMemoryGraphStore()
    fs.put_tensor(warpstore.open(path, "float32", (-1, 64), **SMALL), group_name=None,
                  attr_name="x", index=None)
    fs.put_tensor(torch.arange(n) % 5, group_name=None, attr_name="y", index=None)
    gs.put_edge_index(torch.stack([src, dst]), edge_type=None, layout="coo", size=(n, n))
    sampler = neighbor_sampler((fs, gs), [5, 3], device="cuda")
    assert sampler.device.type == "cuda"
    loader = NeighborLoader((fs, gs), num_neighbors=[5, 3], input_nodes=torch.arange(3000),
                            batch_size=500, neighbor_sampler=sampler)
    edges = set(zip(src.tolist(), dst.tolist()))
    seeds = []
    for batch in fs.fetch_ahead(loader):
        ids = batch.n_id
        assert ids.is_cuda and batch.x.is_cuda
        assert ids.unique().numel() == ids.numel()
        np.testing.assert_array_equal(batch.x.cpu().numpy(), data[ids.cpu().numpy()])
        assert torch.equal(batch.y.cpu(), ids.cpu() % 5)
        s, d = ids[batch.edge_index[0]].tolist(), ids[batch.edge_index[1]].tolist()
        assert all((u, v) in edges for u, v in zip(s, d))
        seeds.append(ids[:batch.batch_size].cpu())
    assert torch.equal(torch.cat(seeds), torch.arange(3000))
    assert sampler.sample_seconds > 0
    # The gathers ran on the store's stream, of the priority asked for.
    assert (fs._stream.priority < 0) == priority
    fs.close()
