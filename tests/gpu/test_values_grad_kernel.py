"""The values' gradient kernels on the GPU (kscupy/kernels/ks_values_grad.py, the tensor
cores; kscupy/kernels/gemm.py, cuBLAS) against an oracle from the definition (each group's
rows of G and X found by index arithmetic, their product summed in complex128 on the host,
one group at a time: the long batches' operands stay small), with every new allocation
poisoned with NaN: every
dtype, both layouts, blocks smaller and larger than a 64 x 64 tile and not multiples of it,
batches of 1, 3, 127 and 65537, one split and many, strided and misaligned operands.
Run with ``pytest -m gpu``."""
import numpy
import pytest

from conftest import DTYPES, gpu_available, random_array, rel_err
from kscupy.core import arrays
from test_gradients import tolerance

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402

#: Every dtype, bfloat16 too where ml_dtypes gives it (the kernel's float16 code, bf16 MMAs).
ALL_DTYPES = DTYPES + ([arrays.BFLOAT16] if arrays.BFLOAT16 is not None else [])
HALF_DTYPES = list(arrays.HALF_DTYPES)


def tol(dtype):
    """bfloat16: a result rounded once to 8 significant bits, norm-wise, with room."""
    return 5e-3 if arrays.is_bfloat16(dtype) else tolerance(dtype)

from kscupy.core import device  # noqa: E402
from kscupy.engine import gradient_paths  # noqa: E402
from kscupy.kernels import gemm, ks_values_grad, nvrtc  # noqa: E402

if not device.current().tensor_cores:
    pytest.skip("the values' gradient kernel needs tensor cores (sm_80)", allow_module_level=True)

#: Blocks inside one tile, across tiles with ragged edges, and d > 1 (bsf: transposed first).
PATTERNS = [(1, 1, 1, 1), (3, 5, 7, 2), (2, 64, 64, 1), (1, 100, 70, 1), (2, 65, 130, 3),
            (4, 16, 48, 4)]


def operands(rng, pattern, B, layout, dtype):
    a, b, c, d = pattern
    M, N = a * b * d, a * c * d
    X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
    G = random_array(rng, (M, B) if layout == "bsl" else (B, M), dtype)
    return cupy.asarray(X), cupy.asarray(G)


def values_oracle(pattern, X, G, layout):
    """``dw[i, k, l, j] = sum_n G[i*b*d + k*d + j, n] conj(X[i*c*d + l*d + j, n])``."""
    a, b, c, d = pattern
    X = cupy.asnumpy(X).astype(numpy.complex128)
    G = cupy.asnumpy(G).astype(numpy.complex128)
    if layout == "bsf":
        X, G = X.T, G.T
    dw = numpy.empty(pattern, numpy.complex128)
    for i in range(a):
        for j in range(d):
            rows, cols = i * b * d + numpy.arange(b) * d + j, i * c * d + numpy.arange(c) * d + j
            dw[i, :, :, j] = G[rows] @ X[cols].conj().T
    return dw


def check(dW, pattern, X, G, layout, dtype, what, rounded=False):
    """``dW`` in the values' canonical order ``(a, b, c, d)`` against the oracle: float32
    sums for float16 operands (the kernel's), or rounded to float16 (``rounded``, cuBLAS's)."""
    assert dW.shape == tuple(pattern), what
    half = arrays.is_half(dtype)
    expected = numpy.float32 if half and not rounded else dtype
    assert dW.dtype == expected, what
    assert rel_err(dW, values_oracle(pattern, X, G, layout)) < tol(dtype), what


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_the_kernel_against_the_definition(poisoned, rng, dtype, layout):
    for pattern in PATTERNS:
        for B in (1, 3, 127, 1000):
            X, G = operands(rng, pattern, B, layout, dtype)
            for sms in (1, 1000):        # one split, and as many as the batch allows
                dW = ks_values_grad.values_gradient(G, X, pattern, layout, sms=sms)
                check(dW, pattern, X, G, layout, dtype, (pattern, B, sms))


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_both_tiles_of_the_16_bit_dtypes(poisoned, rng, dtype, layout):
    """Blocks that fill 128 x 128 tiles take the large tile where its tiles fill the GPU
    (here one multiprocessor), the small one where they would not (a thousand); both
    against the definition, with one split and many."""
    for pattern in [(2, 128, 256, 1), (1, 256, 128, 2)]:
        assert ks_values_grad.tile_for(pattern, dtype, 1) == "large"
        assert ks_values_grad.tile_for(pattern, dtype, 1000) == "small"
        for B, sms in [(3, 1), (1000, 1), (4099, 1), (1000, 1000)]:
            X, G = operands(rng, pattern, B, layout, dtype)
            dW = ks_values_grad.values_gradient(G, X, pattern, layout, sms=sms)
            check(dW, pattern, X, G, layout, dtype, (pattern, B, sms))


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", [numpy.float16, numpy.float32, numpy.complex128],
                         ids=lambda t: numpy.dtype(t).name)
def test_a_long_batch_in_splits(poisoned, rng, dtype, layout):
    """B = 65537: splits of whole chunks and a ragged last one, vectors of one element
    where the batch is odd (bsl)."""
    pattern = (2, 96, 80, 1)
    X, G = operands(rng, pattern, 65537, layout, dtype)
    count, span = ks_values_grad.splits(pattern, 65537, X.dtype, layout, 132)
    assert count > 1 and span * (count - 1) < 65537 <= span * count
    dW = ks_values_grad.values_gradient(G, X, pattern, layout, sms=132)
    check(dW, pattern, X, G, layout, dtype, "long")


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", [numpy.float16, numpy.float32, numpy.complex64],
                         ids=lambda t: numpy.dtype(t).name)
def test_strided_and_misaligned_operands(poisoned, rng, dtype, layout):
    """Views with a row stride beyond the row, every other batch column (copied), Fortran
    order (copied: the kernel's unit stride is the second axis in both layouts), and
    operands one element past an aligned address (single-element copies)."""
    pattern = (2, 40, 72, 1)
    a, b, c, d = pattern
    X, G = operands(rng, pattern, 300, layout, dtype)
    wide = (lambda A: cupy.pad(A, ((0, 0), (0, 5)))[:, :-5]) if layout == "bsl" \
        else (lambda A: cupy.pad(A, ((0, 0), (0, 3)))[:, :-3])
    views = {"row stride": (wide(X), wide(G)),
             "every other column": (X[:, ::2], G[:, ::2]) if layout == "bsl" else (X[::2], G[::2]),
             "Fortran order": (cupy.asfortranarray(X), cupy.asfortranarray(G)),
             "misaligned": tuple(cupy.concatenate([A.ravel(), A.ravel()[:1]])[1:].reshape(A.shape)
                                 for A in (X, G))}
    for what, (Xv, Gv) in views.items():
        dW = ks_values_grad.values_gradient(Gv, Xv, pattern, layout, sms=132)
        check(dW, pattern, Xv, Gv, layout, dtype, what)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_splits_add_up_in_one_order_and_launches_are_kept(rng, layout):
    """With many splits the last block of each tile adds the slices in split order: the
    same operands give the same bits every time. A second call reuses the prepared launch."""
    pattern = (1, 96, 96, 1)
    X, G = operands(rng, pattern, 20000, layout, numpy.float32)
    count, _ = ks_values_grad.splits(pattern, 20000, X.dtype, layout, 1000)
    assert count > 8
    first = ks_values_grad.values_gradient(G, X, pattern, layout, sms=1000)
    hits = ks_values_grad._plan.cache_info().hits
    for _ in range(5):
        assert (ks_values_grad.values_gradient(G, X, pattern, layout, sms=1000) == first).all()
    assert ks_values_grad._plan.cache_info().hits == hits + 5
    check(first, pattern, X, G, layout, numpy.float32, "splits")


def test_non_finite_values_reach_the_gradient(rng):
    """A NaN and an infinity in X reach exactly the values they touch (3xTF32 splits keep
    them), and nothing else."""
    pattern = (1, 64, 64, 1)
    X, G = operands(rng, pattern, 256, "bsl", numpy.float32)
    X[3, 17], X[5, 40] = numpy.nan, numpy.inf
    dW = cupy.asnumpy(ks_values_grad.values_gradient(G, X, pattern, "bsl"))[0, :, :, 0]
    assert numpy.isnan(dW[:, 3]).all() and not numpy.isfinite(dW[:, 5]).any()
    others = numpy.delete(dW, [3, 5], axis=1)
    assert numpy.isfinite(others).all()


@pytest.mark.parametrize("tile", ks_values_grad.TILES)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_shared_memory_as_the_source_computes_it(dtype, layout, tile):
    fn = nvrtc.function("ks_values_grad.cu", ks_values_grad.smem_probe_name(dtype, layout, tile))
    out = cupy.zeros(1, cupy.int64)
    fn((1,), (1,), (out,))
    assert int(out[0]) == ks_values_grad.smem_bytes(dtype, layout, tile)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_the_cublas_path_against_the_definition(poisoned, rng, dtype, layout):
    """cuBLAS's path, which GPUs without tensor cores and sizes beyond the kernel's take."""
    for pattern in PATTERNS:
        for B in (1, 127, 5000):
            X, G = operands(rng, pattern, B, layout, dtype)
            dW = gemm.values_gradient(G, X, pattern, layout, sms=132)     # (a, d, b, c)
            check(dW.transpose(0, 2, 3, 1), pattern, X, G, layout, dtype, (pattern, B),
                  rounded=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_the_diagonal_blocks_path_against_the_definition(poisoned, rng, dtype):
    """cuBLAS's batch-size-first path with d > 1 that multiplies each i's columns whole."""
    for pattern in [p for p in PATTERNS if p[3] > 1]:
        for B in (1, 127, 5000):
            X, G = operands(rng, pattern, B, "bsf", dtype)
            dW = gemm.values_gradient_diagonal(G, X, pattern)                 # (a, d, b, c)
            check(dW.transpose(0, 2, 3, 1), pattern, X, G, "bsf", dtype, (pattern, B),
                  rounded=True)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64] + HALF_DTYPES,
                         ids=lambda t: numpy.dtype(t).name)
def test_a_long_batch_times_the_ways_and_keeps_a_right_one(poisoned, rng, dtype):
    """The public path's first gradient of a shape times every way on its operands; that
    gradient and the next, by the way kept, match the definition."""
    gradient_paths.forget()
    pattern = (2, 24, 40, 3)
    for B in (gradient_paths.MEASURE_MIN_BATCH, gradient_paths.MEASURE_MIN_BATCH + 5):
        X, G = operands(rng, pattern, B, "bsf", dtype)
        dW = gradient_paths.values_gradient(G, X, pattern, "bsf")
        assert gradient_paths.choice(G, X, pattern, "bsf") in gradient_paths.WAYS
        assert rel_err(dW, values_oracle(pattern, X, G, "bsf")) < tol(dtype), B
    gradient_paths.forget()