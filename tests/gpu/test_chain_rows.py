"""The whole-vector chain kernel (kernels_cu/ks_rows.cu) against float64 oracles on the GPU.

Oracles: a product of dense complex128 factors built from the canonical values by the
definition (conftest.dense_oracle), numpy.fft for DFTs and scipy.linalg.hadamard for
Hadamard chains; none of them runs kscupy code. Segments are built directly with
``make_row_segment`` (so the kernel under test is known), and the end-to-end tests check
that ``auto``'s plan really holds a RowSegment. Outputs are NaN-poisoned (``poisoned``).
"""
import numpy
import pytest
import scipy.linalg

import kscupy as ks
from conftest import (DTYPES, RTOL, chain_oracle, gpu_available, gpu_chain, random_array,
                      rel_err, to_numpy)
from kscupy.core import device
from kscupy.engine.costs import constants
from kscupy.kernels import ks_rows
from kscupy.kernels.ks_rows import RowSegment, make_row_segment
from kscupy.core.shuffle import inverse_permutation

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402

BATCHES = [1, 3, 1000, 65537]

# Chains (left to right) of small square factors: nesting ones (several factors per pass,
# strides ascending or descending in application order), ones that do not nest (a pass per
# factor), mixed radices, radix 1 and 16, and a length that is no power of two.
CHAINS = {
    "butterfly16": [(1, 2, 2, 8), (2, 2, 2, 4), (4, 2, 2, 2), (8, 2, 2, 1)],
    "butterfly_desc": [(8, 2, 2, 1), (4, 2, 2, 2), (2, 2, 2, 4), (1, 2, 2, 8)],
    "butterfly512": [(2**l, 2, 2, 2**(8 - l)) for l in range(9)],
    "radix4_64": [(1, 4, 4, 16), (4, 4, 4, 4), (16, 4, 4, 1)],
    "mixed12": [(1, 3, 3, 4), (3, 2, 2, 2), (6, 2, 2, 1)],
    "no_nest": [(1, 4, 4, 8), (4, 2, 2, 4), (2, 4, 4, 4), (32, 1, 1, 1)],
    "radix16": [(1, 16, 16, 8), (16, 8, 8, 1)],
    "odd": [(5, 3, 3, 7), (1, 7, 7, 15), (35, 3, 3, 1)],
}


def _segment(chain, dtype, layout, batch, max_cluster=None):
    """The chain's factors (application order) as one RowSegment, permutations folded the
    way the planner folds them (``max_cluster``: make_row_segment's)."""
    factors = [K.factor.in_dtype(dtype) for K in reversed(chain.factors)]
    dst = None
    if chain.output_permutation is not None:
        dst = inverse_permutation(chain.output_permutation, cupy)
    seg = make_row_segment(factors, dtype, layout, batch, src=chain.input_permutation, dst=dst,
                           max_cluster=max_cluster)
    assert seg is not None
    return seg


def _tol(dtype, chain):
    return 20 * RTOL[numpy.dtype(dtype)] * len(chain)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_rows_against_oracle(poisoned, rng, name, dtype, layout):
    chain = gpu_chain(CHAINS[name], dtype, seed=len(name))
    D = chain_oracle(chain)
    N = chain.shape[1]
    for B in BATCHES:
        if B * N > 2**22:
            B = 2**22 // N + 1                      # keep the oracle cheap; still a tail tile
        seg = _segment(chain, numpy.dtype(dtype), layout, B)
        X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        Y = seg(cupy.asarray(X), layout)
        assert Y.dtype == dtype and Y.shape == ref.shape
        assert rel_err(Y, ref) < _tol(dtype, chain), (B, seg.describe())


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.complex128])
def test_rows_permutations_folded(poisoned, rng, dtype, layout):
    """Input and output gathers folded into the loads and stores."""
    N = 512
    chain = gpu_chain(CHAINS["butterfly512"], dtype, seed=3,
                   input_permutation=cupy.asarray(rng.permutation(N)),
                   output_permutation=cupy.asarray(rng.permutation(N)))
    D = chain_oracle(chain)
    for B in (1, 37, 1000):
        seg = _segment(chain, numpy.dtype(dtype), layout, B)
        assert seg.in_map is not None and seg.out_map is not None
        X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        assert rel_err(seg(cupy.asarray(X), layout), ref) < _tol(dtype, chain)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("name", ["butterfly_desc", "butterfly512", "mixed12", "radix16", "odd"])
def test_rows_last_pass_writes_y(poisoned, rng, name, gather, dtype):
    """Batch-size-first segments whose last pass writes Y itself, and the same through
    store_tile, whether or not make_row_segment would choose it (the kernel is correct
    either way; the choice is about whole sectors), with and without an input gather."""
    import dataclasses
    pats = CHAINS[name]
    N = ks.KSPattern(*pats[0]).shape[1]
    src = cupy.asarray(rng.permutation(N)) if gather else None
    chain = gpu_chain(pats, dtype, seed=5, input_permutation=src)
    D = chain_oracle(chain)
    for B in BATCHES:
        B = min(B, 2**20 // N + 1)
        base = _segment(chain, numpy.dtype(dtype), "bsf", B)
        X = random_array(rng, (B, N), dtype)
        ref = X @ D.T
        for to_y in (False, True):
            seg = dataclasses.replace(base, to_y=to_y)
            assert seg.tile_round_trips == len(seg.passes) + 1 - to_y
            got = seg(cupy.asarray(X), "bsf")
            assert rel_err(got, ref) < _tol(dtype, chain), (B, seg.describe())


def test_dft_last_pass_writes_y():
    """The DFT's last pass (its largest strides) writes Y in bsf, and, as every bsl
    segment's does, in bsl."""
    F = ks.dft(1024, dtype=numpy.complex64, xp=cupy)
    assert _segment(F, numpy.dtype(numpy.complex64), "bsf", 65536).to_y
    assert _segment(F, numpy.dtype(numpy.complex64), "bsl", 65536).to_y


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
@pytest.mark.parametrize("view", ["T", "H", "conj"])
def test_rows_views(poisoned, rng, dtype, view):
    """Transposed (compile-time orientation) and conjugated (run-time flag) factors."""
    chain = getattr(gpu_chain(CHAINS["mixed12"] + [(1, 4, 4, 3)], dtype, seed=7), view)
    chain = chain() if view == "conj" else chain
    D = chain_oracle(chain)
    for layout in ("bsl", "bsf"):
        seg = _segment(chain, numpy.dtype(dtype), layout, 1000)
        X = random_array(rng, (D.shape[1], 1000) if layout == "bsl" else (1000, D.shape[1]), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        assert rel_err(seg(cupy.asarray(X), layout), ref) < _tol(dtype, chain)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_rows_strided_and_misaligned(poisoned, rng, layout):
    """Operands whose strides or alignment rule out vector accesses, and a Fortran-order
    batch in each layout: element-wise accesses, same results."""
    dtype = numpy.complex64
    chain = gpu_chain(CHAINS["butterfly16"], dtype, seed=11)
    D = chain_oracle(chain)
    N, B = 16, 301
    big = random_array(rng, (3 * N + 1, 2 * B + 1) if layout == "bsl" else (2 * B + 1, 3 * N + 1),
                       dtype)
    Xd = cupy.asarray(big)
    operands = {"strided": (Xd[1::3, 1::2] if layout == "bsl" else Xd[1::2, 1::3]),
                "offset": (Xd[1:N + 1, :B] if layout == "bsl" else Xd[:B, 1:N + 1])}
    operands["fortran"] = cupy.asfortranarray(operands["offset"])
    for what, X in operands.items():
        seg = _segment(chain, numpy.dtype(dtype), layout, B)
        ref_x = X.get().astype(numpy.complex128)
        ref = D @ ref_x if layout == "bsl" else ref_x @ D.T
        assert rel_err(seg(X, layout), ref) < _tol(dtype, chain), what


@pytest.mark.parametrize("n", [8, 96, 1024, 4096, 16384])
@pytest.mark.parametrize("dtype", [numpy.complex64, numpy.complex128])
def test_dft_auto_runs_rows(poisoned, rng, n, dtype):
    """``auto`` plans a DFT as one whole-vector launch where it fits, in both layouts, and
    matches numpy.fft (digit reversal folded into the loads)."""
    F = ks.dft(n, dtype=dtype, xp=cupy)
    for layout, B in (("bsf", 3), ("bsf", 1000), ("bsl", 65537 if n <= 64 else 33)):
        X = random_array(rng, (B, n) if layout == "bsf" else (n, B), dtype)
        ref = numpy.fft.fft(X.astype(numpy.complex128), axis=1 if layout == "bsf" else 0)
        Y = F.matmul(cupy.asarray(X), layout=layout)
        assert rel_err(Y, ref) < (2e-5 if dtype == numpy.complex64 else 1e-12), layout
        # the segment itself, whatever the model chose for this batch
        seg = _segment(F, numpy.dtype(dtype), layout, B) if ks_rows.rows_smem(
            n, 1, numpy.dtype(dtype).itemsize, layout) <= min(
                ks_rows.SMEM_MAX, device.current().smem_per_block) else None
        if seg is not None:
            assert rel_err(seg(cupy.asarray(X), layout), ref) < (
                2e-5 if dtype == numpy.complex64 else 1e-12)
    plan = F.plan("bsf", dtype, 2**26 // n)
    if n == 1024 and dtype == numpy.complex64:
        assert plan.launches == 1 and isinstance(plan.steps[0], RowSegment), plan.describe()


@pytest.mark.parametrize("n", [2, 64, 1024, 8192])
def test_hadamard_rows(poisoned, rng, n):
    H = ks.hadamard(n, dtype=numpy.float32, xp=cupy)
    ref_m = scipy.linalg.hadamard(n).astype(numpy.float64)
    for layout in ("bsl", "bsf"):
        X = random_array(rng, (n, 1000) if layout == "bsl" else (1000, n), numpy.float32)
        ref = ref_m @ X if layout == "bsl" else X @ ref_m.T
        seg = _segment(H, numpy.dtype(numpy.float32), layout, 1000)
        assert rel_err(seg(cupy.asarray(X), layout), ref) < 1e-5
        assert rel_err(H.matmul(cupy.asarray(X), layout=layout), ref) < 1e-5


# -- computed stages (kscupy/core/structure.DFTStage): DFT and Hadamard factors from their
# structure; oracles from the definitions, W[k, j] = exp(-2 pi i k j / n) and scipy's hadamard
def _dft_matrix(n, inverse=False, norm=None):
    k = numpy.arange(n)
    W = numpy.exp((1 if inverse else -1) * 2j * numpy.pi * numpy.outer(k, k) / n)
    scale = {None: 1 / n if inverse else 1.0, "ortho": 1 / numpy.sqrt(n)}[norm]
    return W * scale


def _computed(seg):
    return sum(stage != ks_rows.STORED for stage, _ in seg.stages)


STAGE_CASES = {   # name -> (chain builder(dtype), oracle matrix(n), n, dtypes)
    "hadamard256": (lambda dt: ks.hadamard(256, dtype=dt, xp=cupy),
                    lambda: scipy.linalg.hadamard(256), DTYPES),
    "hadamard64_normalized": (lambda dt: ks.hadamard(64, normalized=True, dtype=dt, xp=cupy),
                              lambda: scipy.linalg.hadamard(64) / 8.0, DTYPES),
    "dft512": (lambda dt: ks.dft(512, dtype=dt, xp=cupy), lambda: _dft_matrix(512),
               [numpy.complex64, numpy.complex128]),
    "idft256_ortho": (lambda dt: ks.idft(256, dtype=dt, norm="ortho", xp=cupy),
                      lambda: _dft_matrix(256, True, "ortho"), [numpy.complex64, numpy.complex128]),
    "dft1024_T": (lambda dt: ks.dft(1024, dtype=dt, xp=cupy).T, lambda: _dft_matrix(1024).T,
                  [numpy.complex64, numpy.complex128]),
    "dft128_H": (lambda dt: ks.dft(128, dtype=dt, norm="ortho", xp=cupy).H,
                 lambda: _dft_matrix(128, norm="ortho").conj().T,
                 [numpy.complex64, numpy.complex128]),
}


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(STAGE_CASES))
def test_stages_against_oracle(poisoned, rng, name, dtype, layout):
    """Radix-2 DFT and Hadamard stages computed from their structure (twiddles before or
    after the butterfly, conjugated, scaled), every batch size, both layouts."""
    build, oracle, dtypes = STAGE_CASES[name]
    if dtype not in dtypes:
        pytest.skip(f"{name} has no {numpy.dtype(dtype)} values")
    chain = build(dtype)
    D = oracle().astype(numpy.complex128)
    N = chain.shape[1]
    for B in BATCHES:
        if B * N > 2**22:
            B = 2**22 // N + 1
        seg = _segment(chain, numpy.dtype(dtype), layout, B)
        assert _computed(seg) == len(chain), seg.describe()
        X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        Y = seg(cupy.asarray(X), layout)
        assert Y.dtype == dtype and Y.shape == ref.shape
        assert rel_err(Y, ref) < _tol(dtype, chain), (B, seg.describe())


@pytest.mark.parametrize("dtype", [numpy.complex64, numpy.complex128])
def test_stages_beside_stored_factors(poisoned, rng, dtype):
    """A random butterfly after a DFT: stored and computed factors in the same passes."""
    chain = ks.butterfly(64, dtype=dtype, xp=cupy, seed=3) @ ks.dft(64, dtype=dtype, xp=cupy)
    D = chain_oracle(chain)
    for layout in ("bsl", "bsf"):
        seg = _segment(chain, numpy.dtype(dtype), layout, 1000)
        assert 0 < _computed(seg) < len(chain), seg.describe()
        X = random_array(rng, (64, 1000) if layout == "bsl" else (1000, 64), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        assert rel_err(seg(cupy.asarray(X), layout), ref) < _tol(dtype, chain)


def test_written_values_drop_the_structure(poisoned, rng):
    """The structure is checked, not trusted: after a factor's values are overwritten, it is
    no longer computed, and products follow the new values."""
    F = ks.dft(256, dtype=numpy.complex64, xp=cupy)
    X = random_array(rng, (1000, 256), numpy.complex64)
    assert rel_err(F.matmul(cupy.asarray(X), layout="bsf"),
                   X @ _dft_matrix(256).T) < 2e-5         # plans (and keeps) computed stages
    K = F.factors[3]
    K.values = K.values * cupy.asarray(random_array(rng, tuple(K.pattern), numpy.complex64))
    assert K.structure is None
    seg = _segment(F, numpy.dtype(numpy.complex64), "bsf", 1000)
    assert _computed(seg) == len(F) - 1, seg.describe()
    ref = X @ chain_oracle(F).T
    assert rel_err(seg(cupy.asarray(X), "bsf"), ref) < _tol(numpy.complex64, F)
    assert rel_err(F.matmul(cupy.asarray(X), layout="bsf"), ref) < _tol(numpy.complex64, F)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64])
def test_interleaved_blocks_follow_writes(poisoned, rng, dtype):
    """Stored blocks are read from their interleaved copy (Factor.interleaved_words): a
    product planned before a factor is overwritten follows the new values after it."""
    C = ks.butterfly(1024, dtype=dtype, xp=cupy, seed=7)
    X = cupy.asarray(random_array(rng, (1000, 1024), dtype))
    seg = _segment(C, numpy.dtype(dtype), "bsf", 1000)
    assert any(seg.vector_blocks), seg.describe()
    assert rel_err(C.matmul(X, layout="bsf"), to_numpy(X) @ chain_oracle(C).T) \
        < _tol(dtype, C)
    K = C.factors[4]
    K.values = K.values * cupy.asarray(random_array(rng, tuple(K.pattern), dtype))
    ref = to_numpy(X) @ chain_oracle(C).T
    assert rel_err(C.matmul(X, layout="bsf"), ref) < _tol(dtype, C)
    assert rel_err(_segment(C, numpy.dtype(dtype), "bsf", 1000)(X, "bsf"), ref) < _tol(dtype, C)


def test_rows_auto_plan_end_to_end(poisoned, rng):
    """A random butterfly under auto: the product matches, and on a device whose cost
    constants were fitted on it the plan holds a RowSegment (elsewhere, an emulated device
    included, the unknown device's estimate may plan the factors' products instead)."""
    chain = gpu_chain(CHAINS["butterfly512"], numpy.float32, seed=5)
    D = chain_oracle(chain)
    fitted = constants.fitted_on(device.current().name)
    for layout in ("bsl", "bsf"):
        plan = chain.plan(layout, numpy.float32, 25088)
        assert not fitted or any(isinstance(s, RowSegment) for s in plan.steps), \
            plan.describe()
        X = random_array(rng, (512, 25088) if layout == "bsl" else (25088, 512), numpy.float32)
        ref = D @ X if layout == "bsl" else X @ D.T
        assert rel_err(chain.matmul(cupy.asarray(X), layout=layout), ref) < _tol(
            numpy.float32, chain)


def _factor_by_factor(chain, X):
    """The definition in float64, factor by factor (einsum over each factor's canonical
    values) on the rows of X: no dense matrix of a long chain."""
    B = X.shape[0]
    ref = X.astype(numpy.complex128 if X.dtype.kind == "c" else numpy.float64)
    for K in reversed(chain.factors):   # application order
        a, b, c, d = K.pattern
        ref = numpy.einsum("iklj,nilj->nikj", to_numpy(K.values).astype(ref.dtype),
                           ref.reshape(B, a, c, d)).reshape(B, a * b * d)
    return ref


def test_long_stored_tiles_of_wide_blocks(poisoned, rng):
    """Batch-size-first one-block tiles of 4 rows of a random butterfly(4096) float32 (as on
    a GPU without clusters) take two blocks of 512 threads an SM (ks_rows._configure) on
    a Hopper's shared memory and threads (another device's facts choose their own tiles,
    checked for correctness only); checked against the definition, a ragged last tile
    included."""
    from kscupy.core import device as devices
    C = ks.butterfly(4096, dtype=numpy.float32, xp=cupy, seed=17)
    B = 1001
    seg = _segment(C, numpy.dtype(numpy.float32), "bsf", B, max_cluster=1)
    facts = devices.current()
    if (facts.smem_per_sm, facts.threads_per_sm) == (devices.H200.smem_per_sm,
                                                      devices.H200.threads_per_sm):
        assert (seg.rows, seg.threads, seg.min_blocks) == (4, 512, 2), seg.describe()
    X = random_array(rng, (B, 4096), numpy.float32)
    assert rel_err(seg(cupy.asarray(X), "bsf"), _factor_by_factor(C, X)) < \
        RTOL[numpy.dtype(numpy.float32)]


def test_rows_large_offsets(poisoned):
    """B·N above 2^31 elements: 64-bit addressing of rows (float16 keeps it to 4.3 GB)."""
    N, dtype = 16, numpy.float16
    chain = gpu_chain(CHAINS["butterfly16"], dtype, seed=13)
    D = chain_oracle(chain)
    B = 2**31 // N + 4099
    for layout in ("bsf",):
        X = cupy.empty((B, N), dtype=dtype)
        X[...] = cupy.random.default_rng(0).standard_normal((B, N), dtype=numpy.float32)
        seg = _segment(chain, numpy.dtype(dtype), layout, B)
        Y = seg(X, layout)
        tail = slice(B - 5000, B)
        ref = X[tail].get().astype(numpy.complex128) @ D.T
        assert rel_err(Y[tail], ref) < _tol(dtype, chain)
        del X, Y


@pytest.mark.parametrize("dtype", DTYPES)
def test_sanitizer_subset_rows(poisoned, rng, dtype):
    """Small cases for compute-sanitizer: gathers, ragged tiles, both layouts, non-nesting."""
    for name in ("butterfly16", "no_nest", "odd"):
        base = gpu_chain(CHAINS[name], dtype, seed=5)
        N = base.shape[1]
        chain = ks.KSChain(base.factors, input_permutation=cupy.asarray(rng.permutation(N)),
                           output_permutation=cupy.asarray(rng.permutation(N)))
        D = chain_oracle(chain)
        for layout in ("bsl", "bsf"):
            seg = _segment(chain, numpy.dtype(dtype), layout, 37)
            X = random_array(rng, (N, 37) if layout == "bsl" else (37, N), dtype)
            ref = D @ X if layout == "bsl" else X @ D.T
            assert rel_err(seg(cupy.asarray(X), layout), ref) < _tol(dtype, chain)
    # computed stages: twiddle tables and scales read from the meta table
    # (the forward DFT: the computed bit reversal and, in bsf, the last pass writing Y)
    stages = [ks.hadamard(64, normalized=True, dtype=dtype, xp=cupy)]
    if numpy.dtype(dtype).kind == "c":
        stages += [ks.dft(64, dtype=dtype, norm="ortho", xp=cupy).H,
                   ks.dft(64, dtype=dtype, xp=cupy)]
    for chain in stages:
        D = chain_oracle(chain)
        for layout in ("bsl", "bsf"):
            seg = _segment(chain, numpy.dtype(dtype), layout, 37)
            assert _computed(seg) == len(chain)
            X = random_array(rng, (64, 37) if layout == "bsl" else (37, 64), dtype)
            ref = D @ X if layout == "bsl" else X @ D.T
            assert rel_err(seg(cupy.asarray(X), layout), ref) < _tol(dtype, chain)
