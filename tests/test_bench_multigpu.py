"""The scale suite's Dask rows (kscupy.bench.multigpu) on the CPU: a NumPy operator on a
local in-process cluster, so the row's timing, baseline and check run without a GPU (the
GPU rows run the same functions on kscupy.dask.gpu_cluster)."""
import numpy
import pytest

import kscupy as ks
from kscupy.bench import multigpu

distributed = pytest.importorskip("distributed", reason="the Dask rows need dask.distributed")


def test_the_cluster_sizes():
    assert [multigpu.gpu_counts(n) for n in (1, 2, 3, 4, 8)] == \
        [[1], [1, 2], [1, 2, 3], [1, 2, 4], [1, 2, 4, 8]]


def test_a_chunk_is_the_same_wherever_drawn():
    op = ks.butterfly(32, dtype=numpy.complex64, seed=0)
    X = multigpu._batch(op, numpy.complex64, 100, 40)
    assert X.chunks == ((40, 40, 20), (32,))
    third = multigpu._chunk(op, numpy.complex64, 100, 40, 2)
    assert third.dtype == numpy.complex64 and third.shape == (20, 32)
    assert numpy.array_equal(X.blocks[2].compute(), third)
    assert not numpy.array_equal(X.blocks[1].compute()[:20], third)


def test_a_row_on_a_local_cluster():
    op = ks.butterfly(64, dtype=numpy.float32, seed=0)
    no_dask = multigpu.no_dask_seconds(op, numpy.float32, 1000, 256)
    assert no_dask > 0
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        row = multigpu.dask_row(op, "butterfly(64)", numpy.float32, 1000, 256, client, 1,
                                no_dask)
        two = multigpu.dask_row(op, "butterfly(64)", numpy.float32, 1000, 256, client, 2,
                                no_dask, one_gpu=row["seconds"])
    assert row["suite"] == "dask" and row["gpus"] == 1 and row["dtype"] == "float32"
    assert row["relerr"] < 1e-6 and len(row["all_seconds"]) == multigpu.REPEAT
    assert row["speedup"] == 1.0
    assert row["bandwidth_fraction"] == pytest.approx(no_dask / row["seconds"])
    assert two["speedup"] == pytest.approx(row["seconds"] / two["seconds"])
    assert two["bandwidth_fraction"] == pytest.approx(no_dask / (2 * two["seconds"]))


def test_a_run_s_result_is_dropped_before_the_next_and_the_batch_kept():
    op = ks.butterfly(64, dtype=numpy.float32, seed=0)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        X = multigpu._batch(op, numpy.float32, 1000, 256).persist()
        Y = (X @ op.T).persist()
        distributed.wait(Y)
        held = set(client.who_has(Y))
        assert len(held) == 4
        multigpu._release(client, Y)
        assert not held & {key for key, workers in client.who_has().items() if workers}
        assert len(client.who_has(X)) == 4
