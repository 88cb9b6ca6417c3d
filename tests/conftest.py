"""Shared test machinery: the float64 oracle, array-module fixtures, tolerances.

The oracle builds a dense KS matrix from canonical values straight from the definition
``K = sum_{i,k,l,j} w[i,k,l,j] (e_i e_i^T) ⊗ (e_k e_l^T) ⊗ (e_j e_j^T)`` — an einsum with two
identity matrices — and never calls kscupy.
"""
import os

import numpy
import pytest

# Every test (and CLI subprocess) waits for the kernel auto chose: with compiles in the
# background the first call of each new kernel would run, and check, the direct kernel
# instead (kscupy/kernels/nvrtc.py). The tests of the background path switch it on.
os.environ["KSCUPY_BACKGROUND_COMPILE"] = "0"

# float16: one rounding of each result (unit roundoff 2^-11 = 4.9e-4), sums in float32
RTOL = {numpy.dtype(numpy.float16): 2e-3,
        numpy.dtype(numpy.float32): 1e-5, numpy.dtype(numpy.complex64): 1e-5,
        numpy.dtype(numpy.float64): 1e-12, numpy.dtype(numpy.complex128): 1e-12}
DTYPES = list(RTOL)


def dense_oracle(w):
    """Dense complex128 matrix of shape (a*b*d, a*c*d) from canonical values w (a, b, c, d)."""
    w = numpy.asarray(w, dtype=numpy.complex128)
    a, b, c, d = w.shape
    D6 = numpy.einsum("iklj,im,jn->ikjmln", w, numpy.eye(a), numpy.eye(d))
    return D6.reshape(a * b * d, a * c * d)


def gpu_chain(patterns, dtype, seed, **permutations):
    """A KSChain of random CuPy KS matrices of ``patterns`` (left to right), seeded."""
    import cupy
    import kscupy as ks
    rng = numpy.random.default_rng(seed)
    return ks.KSChain([ks.KSMatrix.random(p, dtype=dtype, xp=cupy, seed=int(rng.integers(2**31)))
                       for p in patterns], **permutations)


def chain_oracle(chain):
    """Dense complex128 matrix of a chain: the product of its factors' oracles (from their
    canonical values), the output permutation a row gather, the input one a column scatter
    (``x[perm]`` applied first: ``D[:, argsort(perm)]``)."""
    D = dense_oracle(to_numpy(chain.factors[0].values))
    for f in chain.factors[1:]:
        D = D @ dense_oracle(to_numpy(f.values))
    if chain.output_permutation is not None:
        D = D[to_numpy(chain.output_permutation)]
    if chain.input_permutation is not None:
        D = D[:, numpy.argsort(to_numpy(chain.input_permutation))]
    return D


def to_numpy(x):
    return x.get() if hasattr(x, "get") else numpy.asarray(x)


def rel_err(Y, ref):
    Y = to_numpy(Y).astype(numpy.complex128)
    ref = numpy.asarray(ref, dtype=numpy.complex128)
    assert Y.shape == ref.shape, (Y.shape, ref.shape)
    assert numpy.all(numpy.isfinite(Y)), "result has non-finite entries"
    denom = numpy.linalg.norm(ref)
    return float(numpy.linalg.norm(Y - ref) / (denom if denom else 1.0))


def random_array(rng, shape, dtype):
    """Fresh standard-normal data (complex when dtype is), never zeros."""
    dtype = numpy.dtype(dtype)
    X = rng.standard_normal(shape)
    if dtype.kind == "c":
        X = X + 1j * rng.standard_normal(shape)
    return X.astype(dtype)


def gpu_available():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


GPU_REASON = "needs CuPy and a CUDA device"

#: Parametrize a test over the array module: NumPy always, CuPy as a `gpu`-marked case.
XP_PARAMS = [pytest.param("numpy", id="numpy"),
             pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]


@pytest.fixture(params=XP_PARAMS)
def xp(request):
    if request.param == "numpy":
        return numpy
    if not gpu_available():
        pytest.skip(GPU_REASON)
    import cupy
    return cupy


@pytest.fixture
def poisoned():
    """Fill every new device allocation with 0xFF bytes (NaN in every float dtype), so that an
    output element a kernel fails to write fails the test."""
    import cupy
    pool = cupy.cuda.MemoryPool()

    def malloc(size):
        mem = pool.malloc(size)
        if size:
            cupy.cuda.runtime.memsetAsync(mem.ptr, 0xFF, size, cupy.cuda.get_current_stream().ptr)
        return mem

    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(malloc)
    try:
        yield
    finally:
        cupy.cuda.set_allocator(previous)
        pool.free_all_blocks()


@pytest.fixture
def rng(request):
    # A fresh, test-specific seed: different tests see different data, reruns are reproducible.
    import zlib
    return numpy.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests cleanly, with the reason, where there is no device."""
    if gpu_available():
        return
    skip = pytest.mark.skip(reason=GPU_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
