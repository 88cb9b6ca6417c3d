"""Dask arrays through KS operators: lazy, split along the batch axis, right chunk type,
checked against float64 oracles (NumPy chunks on the CPU; CuPy chunks as `gpu`)."""
import subprocess
import sys

import numpy
import pytest

import kscupy as ks
from conftest import RTOL, random_array, rel_err, to_numpy
from operator_kinds import KIND_NAMES, operator_kinds, operator_oracle

da = pytest.importorskip("dask.array", reason="dask is not installed (pip install kscupy[dask])")


def test_kscupy_imports_without_dask():
    code = ("import sys; sys.modules['dask'] = None; import kscupy, numpy; "
            "K = kscupy.KSMatrix.random((1, 2, 2, 1)); K @ numpy.ones(2); "
            "assert not any(m.startswith('dask.') for m in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def chunked(xp, X, chunks):
    return da.from_array(xp.asarray(X), chunks=chunks, asarray=False)


@pytest.mark.parametrize("kind", KIND_NAMES)
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_both_layouts_are_lazy_and_exact(xp, rng, kind, dtype):
    op = operator_kinds(xp, rng, dtype)[kind]
    D = operator_oracle(op)
    M, N = op.shape
    tol = RTOL[numpy.dtype(dtype)] * 10
    X = random_array(rng, (N, 23), dtype)
    Y = op @ chunked(xp, X, (max(1, N // 3), 5))      # feature axis split: rechunked
    assert isinstance(Y, da.Array) and Y.shape == (M, 23) and Y.dtype == dtype
    assert Y.chunks == ((M,), (5, 5, 5, 5, 3))
    assert type(Y._meta) is type(xp.empty(0)) and Y._meta.dtype == dtype
    computed = Y.compute()
    assert type(computed) is type(xp.empty(0))
    assert rel_err(computed, D @ X) < tol
    Z = chunked(xp, X.T, (6, N)) @ op.T                # batch-size-first
    assert Z.chunks == ((6, 6, 6, 5), (M,))
    assert rel_err(Z.compute(), X.T @ D.T) < tol
    W = random_array(rng, (9, M), dtype)
    assert rel_err((chunked(xp, W, (4, M)) @ op).compute(), W @ D) < tol
    x = X[:, 0]
    assert rel_err((op @ chunked(xp, x, N)).compute(), D @ x) < tol


def test_result_dtype_promotes(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float32))
    X = da.from_array(rng.standard_normal((40, 6)), chunks=(40, 3))     # float64
    Y = K @ X
    assert Y.dtype == numpy.float64 and Y.compute().dtype == numpy.float64
    assert rel_err(Y.compute(), operator_oracle(K) @ X.compute()) < 1e-6


def test_bad_dask_operands_raise(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float32))
    with pytest.raises(ValueError, match="shape mismatch"):
        K @ da.ones((39, 4), chunks=(39, 2))
    with pytest.raises(ValueError, match="shape mismatch"):
        da.ones((4, 40), chunks=(2, 40)) @ K
    with pytest.raises(ValueError, match="1-D or 2-D"):
        K @ da.ones((40, 2, 2))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_numpy_chunks_go_through_a_cupy_operators_gpu_and_back(poisoned, rng, dtype):
    """Host chunks with a GPU operator: streamed through the GPU (stream_matmul), NumPy
    chunks back, in both layouts and as a vector; CuPy chunks with a NumPy operator raise."""
    import cupy
    w = random_array(rng, (2, 3, 4, 5), dtype)
    K = ks.KSMatrix(cupy.asarray(w))
    D = dense_of(K)
    Xh = random_array(rng, (1000, 40), dtype)
    Y = da.from_array(Xh, chunks=(300, 40)) @ K.T
    assert isinstance(Y._meta, numpy.ndarray)
    assert rel_err(Y.compute(), Xh @ D.T) < RTOL[numpy.dtype(dtype)]
    Z = K @ da.from_array(Xh.T.copy(), chunks=(40, 300))
    assert rel_err(Z.compute(), D @ Xh.T) < RTOL[numpy.dtype(dtype)]
    v = (K @ da.from_array(Xh[0], chunks=40)).compute()
    assert isinstance(v, numpy.ndarray) and rel_err(v, D @ Xh[0]) < RTOL[numpy.dtype(dtype)]
    with pytest.raises(TypeError, match="numpy values"):
        ks.KSMatrix(w) @ chunked(cupy, Xh.T.copy(), (40, 300))


def dense_of(K):
    """The dense matrix of a CuPy KSMatrix on the host."""
    return to_numpy(K.todense())


@pytest.mark.gpu
def test_cupy_chunks_stay_on_the_gpu(rng):
    import cupy
    C = ks.dft(64, dtype=numpy.complex64, xp=cupy)
    X = random_array(rng, (1000, 64), numpy.complex64)
    Y = chunked(cupy, X, (128, 64)) @ C.T
    assert isinstance(Y._meta, cupy.ndarray)
    blocks = Y.to_delayed().ravel()
    assert all(isinstance(b.compute(), cupy.ndarray) for b in blocks[:2])
    assert rel_err(to_numpy(Y.compute()), numpy.fft.fft(X.astype(numpy.complex128), axis=-1)) < 1e-5


def test_operator_is_one_key_of_the_graph(rng):
    """Workers receive the operator once, not once per block."""
    import pickle
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64))
    Y = K @ da.from_array(random_array(rng, (40, 1000), numpy.float64), chunks=(40, 100))
    graph = dict(Y.__dask_graph__())
    assert sum("kscupy-operator" in str(key) for key in graph) == 1
    tasks = [task for key, task in graph.items() if "kscupy-matmul" in str(key)]
    assert len(tasks) == 10
    assert all(len(pickle.dumps(task)) < K.values.nbytes for task in tasks)


def test_values_keys_name_what_an_operator_applies(rng):
    """Equal for copies and views made the same way, different for another view and after
    a write: for matrices and chains."""
    import pickle
    for op in (ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64)),
               ks.butterfly(16, dtype=numpy.float64, seed=0)):
        key = op._values_key()
        hash(key)
        assert pickle.loads(pickle.dumps(op))._values_key() == key
        assert op.T._values_key() == op.T._values_key() != key
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64))
    key = K._values_key()
    K.values = random_array(rng, (2, 3, 4, 5), numpy.float64)
    assert K._values_key() != key
    C = ks.butterfly(16, dtype=numpy.float64, seed=0)
    key = C._values_key()
    C.factors[0].values = C.factors[0].values * 2
    assert C._values_key() != key


def test_under_a_client_the_operator_is_scattered_once_per_version_of_its_values(rng):
    """With a distributed client, every product of one operator takes the same future (the
    operator sent from here once, not with each graph), views made anew each time too
    (``X @ K.T``), until its values are written; only the most recent operators stay
    scattered; without a client the operator travels with each graph again."""
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")
    import dask
    from kscupy import dask as ks_dask
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64))
    Xh = random_array(rng, (1000, 40), numpy.float64)
    X = da.from_array(Xh, chunks=(250, 40))
    tol = RTOL[numpy.dtype(numpy.float64)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(2)
        first = ks_dask._scattered(K.T)
        assert first is not None and ks_dask._scattered(K.T) is first     # another view
        for _ in range(2):
            assert rel_err((X @ K.T).compute(), Xh @ K.todense().T) < tol
        assert ks_dask._scattered(K.T) is first
        assert ks_dask._scattered(K) is not first                          # not the same view
        assert client.who_has([first])[first.key]          # held by a worker throughout
        K.values = random_array(rng, (2, 3, 4, 5), numpy.float64)
        assert ks_dask._scattered(K.T) is not first
        assert rel_err((X @ K.T).compute(), Xh @ K.todense().T) < tol
        others = [ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64))
                  for _ in range(ks_dask.MAX_SCATTERED)]
        for other in others:
            ks_dask._scattered(other)
        assert len(ks_dask._SCATTERED) == ks_dask.MAX_SCATTERED
        assert K.T._values_key() not in ks_dask._SCATTERED                 # the oldest went
        with dask.config.set(scheduler="threads"):        # graphs for another scheduler
            assert ks_dask._scattered(K) is None
            assert rel_err((X @ K.T).compute(), Xh @ K.todense().T) < tol
    assert ks_dask._scattered(K) is None
    graph = dict((X @ K.T).__dask_graph__())
    assert sum("kscupy-operator" in str(key) for key in graph) == 1


@pytest.mark.gpu
def test_one_worker_per_gpu_transforms_its_own_chunks(rng):
    """kscupy.dask.gpu_cluster: each worker sees its own physical GPU, the chunks are spread
    over both and stay CuPy arrays there, and the gathered result is numpy.fft's."""
    import cupy
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    from kscupy.dask import gpu_cluster
    F = ks.dft(64, dtype=numpy.complex64, xp=cupy)
    X = random_array(rng, (4000, 64), numpy.complex64)
    with gpu_cluster(2) as cluster, distributed.Client(cluster) as client:
        seen = client.run(lambda: __import__("os").environ["CUDA_VISIBLE_DEVICES"])
        assert sorted(seen.values()) == ["0", "1"]
        buses = client.run(lambda: __import__("cupy").cuda.Device(0).pci_bus_id)
        assert len(set(buses.values())) == 2, buses        # two physical GPUs, not one
        Y = (chunked(cupy, X, (500, 64)) @ F.T).persist()
        distributed.wait(Y)
        holders = {w for ws in client.who_has(Y).values() for w in ws}
        assert len(holders) == 2, client.who_has(Y)
        kinds = client.run(lambda dask_worker: sorted({type(v).__module__.split(".")[0]
                                                      for v in dask_worker.data.values()}))
        assert all(k == ["cupy"] for k in kinds.values()), kinds
        result = Y.compute()
    assert rel_err(to_numpy(result), numpy.fft.fft(X.astype(numpy.complex128), axis=-1)) < 1e-5


def test_matmul_takes_a_dask_operand_as_the_operators_do():
    """``op.matmul(X, layout=...)`` with a dask array is the lazy product ``op @ X`` gives
    (and ``X @ op.T`` in bsf); another backend than auto is refused by name."""
    da = pytest.importorskip("dask.array")
    K = ks.KSMatrix.random((2, 3, 4, 5), dtype=numpy.float64, seed=0)
    X = numpy.random.default_rng(0).standard_normal((40, 6))
    Y = K.matmul(da.from_array(X, chunks=(40, 3)))
    numpy.testing.assert_allclose(Y.compute(), K.todense() @ X, rtol=1e-12)
    Z = K.matmul(da.from_array(X.T, chunks=(3, 40)), layout="bsf")
    numpy.testing.assert_allclose(Z.compute(), X.T @ K.todense().T, rtol=1e-12)
    with pytest.raises(ValueError, match="backend='auto'"):
        K.matmul(da.from_array(X, chunks=(40, 3)), backend="dense")



def test_unknown_chunk_sizes_are_named_with_the_fix():
    K = ks.KSMatrix.random((2, 3, 4, 5), dtype=numpy.float64, seed=0)
    X = da.from_array(numpy.ones((40, 6)), chunks=(40, 3))
    X = X[:, X[0] > 0]                       # boolean indexing: unknown sizes along axis 1
    with pytest.raises(ValueError, match=r"compute_chunk_sizes\(\)"):
        X.T @ K.T
