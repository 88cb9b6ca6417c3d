"""bfloat16 values and operands (NumPy and CuPy hold them through ``ml_dtypes``): products
in both layouts, chains, mixed dtypes, the values' gradient and the refusals, against float64
oracles from the definition (the bfloat16 inputs widened exactly). Products sum in float32
and round once: one bfloat16 rounding of the result, a relative error of at most 2^-8 per
element."""
import numpy
import pytest

import kscupy as ks
from conftest import dense_oracle, gpu_available, rel_err, to_numpy
from kscupy.core import arrays

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (the test extra)")
BF16 = numpy.dtype(ml_dtypes.bfloat16)
#: a result rounded once to bfloat16 (8 significant bits), norm-wise, with room for the
#: float32 sums
TOL = 5e-3


def bf16_array(rng, shape, xp=numpy):
    return xp.asarray(rng.standard_normal(shape).astype(numpy.float32).astype(BF16))


def as64(A):
    return to_numpy(A).astype(numpy.float32).astype(numpy.float64)


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def module(request):
    if request.param == "numpy":
        return numpy
    if not gpu_available():
        pytest.skip("needs CuPy and a CUDA device")
    import cupy
    return cupy


def test_bfloat16_is_a_supported_half_dtype():
    assert arrays.BFLOAT16 == BF16 and BF16 in ks.SUPPORTED_DTYPES
    assert arrays.is_half(BF16) and arrays.is_half(numpy.float16)
    assert not arrays.is_half(numpy.float32)
    arrays.check_operand_dtype(BF16)                    # NumPy files it under kind "V"


def test_real_parts_and_epsilon_without_numpy_finfo(monkeypatch):
    # ml_dtypes before 0.6 does not teach numpy.finfo about bfloat16: kscupy must not ask it.
    finfo = numpy.finfo

    def refusing_finfo(dtype):
        if numpy.dtype(dtype) == BF16:
            raise ValueError("data type dtype(bfloat16) not compatible with finfo")
        return finfo(dtype)
    monkeypatch.setattr(numpy, "finfo", refusing_finfo)
    assert arrays.real_dtype(BF16) == BF16 and arrays.epsilon(BF16) == 2.0 ** -7
    assert arrays.real_dtype(numpy.complex64) == numpy.float32
    assert arrays.epsilon(numpy.complex128) == finfo(numpy.float64).eps
    rng = numpy.random.default_rng(5)
    K = ks.KSMatrix(rng.standard_normal((2, 3, 4, 2)).astype(BF16))
    X = rng.standard_normal((16, 5)).astype(BF16)
    G = rng.standard_normal((12, 5)).astype(BF16)
    assert ks.values_grad(K, X, G).dtype == BF16


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("pattern", [(1, 4, 4, 1), (2, 8, 16, 2), (3, 5, 7, 4), (1, 64, 64, 1)])
def test_products_against_the_definition(module, rng, pattern, layout):
    K = ks.KSMatrix(bf16_array(rng, pattern, module))
    assert K.dtype == BF16
    D = dense_oracle(as64(K.values))
    M, N = K.shape
    for B in (1, 3, 127):
        X = bf16_array(rng, (N, B) if layout == "bsl" else (B, N), module)
        Y = K.matmul(X, layout=layout)
        assert Y.dtype == BF16 and type(Y) is type(X)
        ref = D @ as64(X) if layout == "bsl" else as64(X) @ D.T
        assert rel_err(Y, ref) < TOL, (B, rel_err(Y, ref))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["kernel", "kernel_bsl", "kernel_fma", "kernel_skinny",
                                     "direct", "bmm", "block_dense", "dense"])
@pytest.mark.parametrize("pattern", [(4, 32, 48, 2), (3, 5, 7, 4), (3, 16, 8, 1), (1, 24, 40, 3)])
def test_each_gpu_backend(poisoned, rng, backend, pattern):
    """Every GPU backend a product may run (``auto`` picks among them by the model or by
    timing), each layout, batches of one, a few and an odd many."""
    if not gpu_available():
        pytest.skip("needs CuPy and a CUDA device")
    import cupy
    K = ks.KSMatrix(bf16_array(rng, pattern, cupy))
    D = dense_oracle(as64(K.values))
    for layout in ("bsl", "bsf"):
        for B in (1, 3, 127, 300):
            X = bf16_array(rng, (K.shape[1], B) if layout == "bsl" else (B, K.shape[1]), cupy)
            Y = K.matmul(X, layout=layout, backend=backend)
            ref = D @ as64(X) if layout == "bsl" else as64(X) @ D.T
            assert Y.dtype == BF16 and rel_err(Y, ref) < TOL, (layout, B, rel_err(Y, ref))


def test_multiples_and_sums_stay_bfloat16(module, rng):
    """``alpha * K``, ``K / alpha``, ``K + L`` and ``K - L`` hold bfloat16 values (CuPy's
    arithmetic may compute them in float32: each is rounded once, back to bfloat16)."""
    K = ks.KSMatrix(bf16_array(rng, (2, 6, 4, 3), module))
    L = ks.KSMatrix(bf16_array(rng, (2, 6, 4, 3), module))
    DK, DL = dense_oracle(as64(K.values)), dense_oracle(as64(L.values))
    for result, expected in ((1.5 * K, 1.5 * DK), (K / 4, DK / 4), (K + L, DK + DL),
                             (K - L, DK - DL)):
        assert result.dtype == BF16 and result.values.dtype == BF16
        assert rel_err(dense_oracle(as64(result.values)), expected) < TOL
    # a Python complex makes it complex64, a NumPy scalar keeps its own precision (NEP 50,
    # whatever ml_dtypes' own promotion of bfloat16 says)
    assert (1j * K).dtype == numpy.complex64 and (numpy.float32(2) * K).dtype == numpy.float32
    assert rel_err(dense_oracle(to_numpy((2j * K).values)), 2j * DK) < TOL


def test_a_chain_and_mixed_dtypes(module, rng):
    C = ks.butterfly(64, dtype=BF16, xp=module, seed=0)
    X = bf16_array(rng, (64, 5), module)
    D = numpy.eye(64)
    for f in reversed(C.factors):
        D = dense_oracle(as64(f.values)) @ D
    assert C.dtype == BF16
    assert rel_err(C @ X, D @ as64(X)) < 4 * TOL        # one rounding per factor
    # with float32 operands the result is float32, from the bfloat16 values as they are
    K = C.factors[0]
    X32 = module.asarray(rng.standard_normal((64, 5)).astype(numpy.float32))
    Y = K @ X32
    assert Y.dtype == numpy.float32
    assert rel_err(Y, dense_oracle(as64(K.values)) @ as64(X32)) < 1e-5


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("pattern, B", [((2, 8, 6, 3), 40), ((1, 24, 40, 1), 300),
                                        ((2, 16, 24, 4), 3000)])
def test_the_values_gradient(module, rng, pattern, B, layout):
    """Both layouts, d = 1 and d > 1, and on the GPU a batch long enough for its ways to be
    timed (kscupy.engine.gradient_paths)."""
    a, b, c, d = pattern
    K = ks.KSMatrix(bf16_array(rng, pattern, module))
    X = bf16_array(rng, (a * c * d, B) if layout == "bsl" else (B, a * c * d), module)
    G = bf16_array(rng, (a * b * d, B) if layout == "bsl" else (B, a * b * d), module)
    dw = ks.values_grad(K, X, G, layout=layout)
    assert dw.dtype == BF16 and dw.shape == pattern
    X64, G64 = as64(X), as64(G)
    if layout == "bsf":
        X64, G64 = X64.T, G64.T
    ref = numpy.empty(pattern)
    for i in range(a):
        for j in range(d):
            rows = i * b * d + numpy.arange(b) * d + j
            cols = i * c * d + numpy.arange(c) * d + j
            ref[i, :, :, j] = G64[rows] @ X64[cols].T
    assert rel_err(dw, ref) < TOL


def test_what_has_no_bfloat16_says_so(rng):
    K = ks.KSMatrix(bf16_array(rng, (2, 4, 4, 1)))
    with pytest.raises(TypeError, match="bfloat16 CSR"):
        K.tocsr()
    with pytest.raises(TypeError, match="bfloat16 gradients are too coarse"):
        ks.fit(numpy.eye(8), [(2, 4, 4, 1), (1, 8, 8, 1)], dtype=BF16, steps=1)


@pytest.mark.gpu
def test_pytorch_bfloat16_tensors_come_back_as_such(rng):
    torch = pytest.importorskip("torch")
    if not gpu_available() or not torch.cuda.is_available():
        pytest.skip("needs CuPy, PyTorch and a CUDA device")
    w = rng.standard_normal((2, 16, 8, 2)).astype(numpy.float32)
    K = ks.KSMatrix(torch.from_numpy(w).to("cuda", torch.bfloat16))
    X = torch.from_numpy(rng.standard_normal((32, 70)).astype(numpy.float32)).to(
        "cuda", torch.bfloat16)
    Y = K @ X
    assert isinstance(Y, torch.Tensor) and Y.dtype == torch.bfloat16 and Y.is_cuda
    D = dense_oracle(K.values.astype(numpy.float32).get().astype(numpy.float64))
    ref = D @ X.float().cpu().numpy().astype(numpy.float64)
    assert rel_err(Y.float().cpu().numpy(), ref) < TOL
