"""The tiled transpose and ``backend="kernel_bsl"`` (the tensor-core kernel in its batch order
between two transposes) on the GPU, against NumPy's transpose and the float64 oracle
(run with ``pytest -m gpu``). Outputs are NaN-poisoned (the ``poisoned`` fixture)."""
import numpy
import pytest

import kscupy as ks
from conftest import DTYPES, gpu_available, random_array

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402
from kscupy.kernels import transpose  # noqa: E402
from test_kernel import check, oracle  # noqa: E402

dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)

# Tile multiples and tails of 32, 64 and 128 (the tiles), extents that allow 8-byte vectors,
# only 2-element ones, or none (odd), a single row or column; few rows (the one-element-a-
# thread kernel: fewer than a quarter of a tile) at odd, even and multiple-of-4 counts,
# and multiples of 4 on either side of a quarter of float16's 128-row tile.
SHAPES = [(1, 1), (1, 37), (37, 1), (64, 64), (65, 63), (2, 130), (130, 2), (96, 1000),
          (1000, 96), (257, 33), (3, 70001), (12, 4100), (7, 333), (28, 260), (32, 260)]


@dtypes
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_transpose(poisoned, rng, dtype, shape):
    A = random_array(rng, shape, dtype)
    At = transpose.transpose(cupy.asarray(A))
    assert At.flags.c_contiguous and At.shape == shape[::-1] and At.dtype == dtype
    numpy.testing.assert_array_equal(cupy.asnumpy(At), A.T)


def test_transposes_of_arrays_alike_share_a_run(poisoned, rng):
    """A second array like the first (shape, strides, dtype, alignment) reuses the run kept
    for it and gets its own result; one off the first's alignment gets a run of its own, whose
    copies are as wide as its address allows."""
    transpose._KEPT.clear()
    A, B = (cupy.asarray(random_array(rng, (96, 40), numpy.float32)) for _ in range(2))
    numpy.testing.assert_array_equal(cupy.asnumpy(transpose.transpose(A)), cupy.asnumpy(A).T)
    assert len(transpose._KEPT) == 1
    numpy.testing.assert_array_equal(cupy.asnumpy(transpose.transpose(B)), cupy.asnumpy(B).T)
    assert len(transpose._KEPT) == 1
    flat = cupy.asarray(random_array(rng, (96 * 40 + 1,), numpy.float32))
    C = flat[1:].reshape(96, 40)                  # 4 bytes past B's alignment
    numpy.testing.assert_array_equal(cupy.asnumpy(transpose.transpose(C)), cupy.asnumpy(C).T)
    assert len(transpose._KEPT) == 2


@dtypes
@pytest.mark.parametrize("view", ["fortran", "column_step", "reversed", "offset",
                                  "misaligned"])
@pytest.mark.parametrize("rows", [70, 5], ids=["tiled", "few_rows"])
def test_transpose_of_views(poisoned, rng, dtype, view, rows):
    """Strided, reversed and misaligned operands (the vector path needs aligned, contiguous
    rows; the rest goes element by element), with enough rows for the tiles and few."""
    base = cupy.asarray(random_array(rng, (rows, 132), dtype))
    A = {"fortran": lambda: cupy.asfortranarray(base), "column_step": lambda: base[:, ::3],
         "reversed": lambda: base[::-1, ::-1],
         # the first element one element past a 16-byte boundary: odd extents, then even
         # ones (vectors refused for the address alone)
         "offset": lambda: base[1:, 1:], "misaligned": lambda: base[2:, 1:131]}[view]()
    numpy.testing.assert_array_equal(cupy.asnumpy(transpose.transpose(A)), cupy.asnumpy(A).T)


@dtypes
@pytest.mark.parametrize("pattern", [(1, 48, 192, 3), (4, 64, 32, 4), (2, 128, 128, 1),
                                     (3, 16, 80, 5), (1, 1, 7, 3), (2, 96, 48, 16)], ids=str)
@pytest.mark.parametrize("B", [1, 3, 1000, 65537])
def test_kernel_bsl(poisoned, rng, dtype, pattern, B):
    """Batch-size-first products through the batch order, every dtype and batch size."""
    M, N = ks.KSPattern(*pattern).shape
    if (M + N) * B * numpy.dtype(dtype).itemsize > 2**27:
        pytest.skip("operands above 128 MiB")
    K = ks.KSMatrix.random(pattern, dtype=dtype, xp=cupy, seed=5)
    X = cupy.asarray(random_array(rng, (B, N), dtype))
    check(K.matmul(X, layout="bsf", backend="kernel_bsl"), oracle(K.values, X, "bsf"), dtype)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_kernel_bsl_views(poisoned, rng, layout):
    """Transposed and conjugated views, a strided operand, and batch-size-last (where
    kernel_bsl is the plain kernel)."""
    K = ks.KSMatrix.random((2, 48, 32, 3), dtype=numpy.complex64, xp=cupy, seed=6)
    for op in (K, K.T, K.H):
        M, N = op.shape
        shape = (N, 2 * 300) if layout == "bsl" else (2 * 300, N)
        X = cupy.asarray(random_array(rng, shape, numpy.complex64))
        X = X[:, ::2] if layout == "bsl" else X[::2]
        check(op.matmul(X, layout=layout, backend="kernel_bsl"),
              oracle(op.values, X, layout), numpy.complex64)
