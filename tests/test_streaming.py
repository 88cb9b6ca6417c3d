"""kscupy.stream_matmul: a host batch through the GPU in chunks. The chunking and the checks
on the CPU; on the GPU the result against a float64 oracle from the definition (conftest),
both layouts, ragged last chunks, pinned and pageable memory, dtype promotion, chains."""
import numpy
import pytest
import scipy.sparse.linalg

import kscupy as ks
from conftest import GPU_REASON, chain_oracle, dense_oracle, gpu_available, random_array, \
    rel_err, to_numpy
from kscupy.streaming import chunks


@pytest.mark.parametrize("batch, per_chunk", [(10, 3), (9, 3), (1, 5), (5, 5), (7, 1)])
def test_chunks_cover_the_batch_once_in_order(batch, per_chunk):
    runs = chunks(batch, per_chunk)
    assert [i for start, stop in runs for i in range(start, stop)] == list(range(batch))
    assert all(stop - start == per_chunk for start, stop in runs[:-1])
    assert 0 < runs[-1][1] - runs[-1][0] <= per_chunk


def test_a_numpy_operator_or_a_bad_batch_is_refused():
    K = ks.KSMatrix.random((2, 4, 4, 2), dtype=numpy.float32)
    with pytest.raises(TypeError, match="CuPy values"):
        ks.stream_matmul(K, numpy.ones((3, 16), numpy.float32))
    with pytest.raises(TypeError, match="kscupy operator"):
        ks.stream_matmul(numpy.eye(4), numpy.ones((3, 4)))
    with pytest.raises(TypeError, match="kscupy operator"):      # an operator of SciPy's
        ks.stream_matmul(scipy.sparse.linalg.aslinearoperator(numpy.eye(4)),
                         numpy.ones((3, 4)))


def _gpu():
    if not gpu_available():
        pytest.skip(GPU_REASON)
    import cupy
    import cupyx
    return cupy, cupyx


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bsf", "bsl"])
@pytest.mark.parametrize("memory", ["pageable", "pinned"])
def test_against_the_definition(rng, layout, memory):
    cupy, cupyx = _gpu()
    w = random_array(rng, (2, 16, 8, 4), numpy.float32)
    K = ks.KSMatrix(cupy.asarray(w))
    M, N = K.shape
    B = 1001                                    # chunks of 64: a ragged last one
    shape = (B, N) if layout == "bsf" else (N, B)
    X = random_array(rng, shape, numpy.float32)
    out = None
    if memory == "pinned":
        pinned = cupyx.empty_pinned(shape, numpy.float32)
        pinned[...] = X
        X = pinned
        out = cupyx.empty_pinned((B, M) if layout == "bsf" else (M, B), numpy.float32)
        out[...] = numpy.nan                   # poisoned: every element must be written
    per_row = 4 * (M + N)
    Y = ks.stream_matmul(K, X, layout=layout, out=out, chunk_bytes=64 * per_row, streams=3)
    D = dense_oracle(w)
    ref = X @ D.T if layout == "bsf" else D @ X
    assert rel_err(Y, ref) < 1e-5
    if out is not None:
        assert Y is out


@pytest.mark.gpu
def test_dtype_promotion_and_a_chain(rng):
    cupy, _ = _gpu()
    C = ks.butterfly(256, dtype=numpy.float32, xp=cupy, seed=3)
    X = random_array(rng, (777, 256), numpy.float64)       # float64 batch: float64 result
    Y = ks.stream_matmul(C, X, chunk_bytes=100 * (256 * 8 + 256 * 8))
    assert Y.dtype == numpy.float64 and isinstance(Y, numpy.ndarray)
    assert rel_err(Y, X @ chain_oracle(C).T) < 1e-5


@pytest.mark.gpu
def test_out_and_chunk_checks(rng):
    cupy, _ = _gpu()
    K = ks.KSMatrix.random((1, 4, 4, 1), dtype=numpy.float32, xp=cupy, seed=1)
    X = numpy.ones((5, 4), numpy.float32)
    with pytest.raises(ValueError, match="out must be"):
        ks.stream_matmul(K, X, out=numpy.empty((5, 4), numpy.float64))
    with pytest.raises(ValueError, match="chunk_bytes"):
        ks.stream_matmul(K, X, chunk_bytes=8)
    with pytest.raises(TypeError, match="host memory"):
        ks.stream_matmul(K, cupy.asarray(X))
    with pytest.raises(ValueError, match="expected"):
        ks.stream_matmul(K, X.T.copy())
    assert ks.stream_matmul(K, numpy.ones((0, 4), numpy.float32)).shape == (0, 4)
    assert to_numpy(ks.stream_matmul(K, X)).shape == (5, 4)
