"""Fused chain kernels (kernels_cu/ks_chain.cu) against float64 oracles on the GPU.

Oracles: a product of dense float64 factors built from the canonical values by the
definition (conftest.dense_oracle), numpy.fft for DFT chains and scipy.linalg.hadamard for
Hadamard chains; none of them runs kscupy code. Every test also checks that the plan it
exercises really contains a fused segment, so a planner that silently fell back to
per-factor application would fail here. The fused plans are built with
``planner.plan(C.factor_chain, ..., fuse="always", rows=False)`` (the segment kernel, fewest
launches) and run prepared for their operand. Outputs are NaN-poisoned (``poisoned``
fixture).
"""
import numpy
import pytest
import scipy.linalg

import kscupy as ks
from conftest import (DTYPES, RTOL, chain_oracle, gpu_available, gpu_chain, random_array,
                      rel_err)
from kscupy.engine import planner
from kscupy.kernels import ks_chain, ks_rows
from kscupy.kernels.ks_chain import FusedSegment

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402

BATCHES = [1, 3, 1000, 65537]

# Chains (left to right) that the fused kernel must handle: square and rectangular factors,
# in-place and ping-pong stages, blocks smaller and larger than a work item.
CHAINS = {
    "butterfly16": [(1, 2, 2, 8), (2, 2, 2, 4), (4, 2, 2, 2), (8, 2, 2, 1)],
    "monarch": [(1, 8, 4, 4), (4, 4, 8, 1)],
    "rect3": [(1, 6, 2, 2), (2, 1, 3, 2), (2, 6, 5, 1)],
    "mixed4": [(3, 4, 4, 2), (6, 4, 2, 1), (3, 2, 4, 2), (1, 6, 6, 4)],
    "paper_small": [(1, 24, 6, 2), (2, 6, 24, 1)],
    "wide_blocks": [(1, 64, 16, 2), (2, 16, 64, 1)],
    "six": [(1, 2, 2, 16), (2, 2, 2, 8), (4, 2, 2, 4), (8, 2, 2, 2), (16, 2, 2, 1), (32, 1, 1, 1)],
    "strided_only": [(1, 4, 4, 8), (4, 2, 2, 4)],
}


def _fused_plan(chain, layout, dtype, batch):
    """The chain's plan on the shared-memory segment kernel with the fewest launches (no
    whole-vector segments: those are test_chain_rows.py's)."""
    return planner.plan(chain.factor_chain, layout, numpy.dtype(dtype), max(batch, 1),
                        fuse="always", rows=False)


def _fused(chain, X, layout):
    """The chain's product through :func:`_fused_plan` for X's dtype and batch, prepared for
    X and run on it. The plan is held while its run runs: a segment's kernel reads its
    factors (merged ones too, which only the plan holds) by the addresses in its meta table,
    which the prepared run does not keep alive."""
    batch = X.shape[1] if layout == "bsl" else X.shape[0]
    plan = _fused_plan(chain, layout, X.dtype, batch)
    return plan.prepare(X, layout)(X)


def _fused_steps(chain, layout, dtype, batch):
    return [s for s in _fused_plan(chain, layout, dtype, batch).steps
            if isinstance(s, FusedSegment)]


def _check(chain, X, layout, ref, dtype):
    Y = _fused(chain, X, layout)
    tol = 20 * RTOL[numpy.dtype(dtype)] * len(chain)
    assert Y.dtype == dtype and rel_err(Y, ref) < tol


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_fused_chain_against_oracle(poisoned, rng, name, dtype, layout):
    chain = gpu_chain(CHAINS[name], dtype, seed=len(name))
    D = chain_oracle(chain)
    N = chain.shape[1]
    assert _fused_steps(chain, layout, numpy.dtype(dtype), 1000), "nothing was fused"
    for B in BATCHES:
        if B * N > 2**22:
            B = 2**22 // N + 1                      # keep the oracle cheap; still a tail tile
        X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        Xd = cupy.asarray(X)
        _check(chain, Xd, layout, ref, dtype)
        # without merging: every original factor is a stage of the fused kernel (rows=False:
        # the whole-vector kernel, tested in test_chain_rows.py, would take small chains)
        unmerged = planner.plan(chain.factor_chain, layout, numpy.dtype(dtype), B, fuse="always",
                                merge=False, rows=False)
        assert any(isinstance(s, FusedSegment) for s in unmerged.steps)
        assert rel_err(unmerged(Xd, layout), ref) < 20 * RTOL[numpy.dtype(dtype)] * len(chain)
        # per-factor path: an independent route through the same factors
        Yp = chain.matmul(Xd, layout=layout, backend="kernel")
        assert rel_err(Yp, ref) < 20 * RTOL[numpy.dtype(dtype)] * len(chain)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
@pytest.mark.parametrize("view", ["T", "H", "conj"])
def test_fused_views(poisoned, rng, dtype, view):
    """Transposed and conjugated factors are read through strides and a conj flag."""
    chain = getattr(gpu_chain(CHAINS["mixed4"], dtype, seed=7), view)
    chain = chain() if view == "conj" else chain
    D = chain_oracle(chain)
    for layout in ("bsl", "bsf"):
        assert _fused_steps(chain, layout, numpy.dtype(dtype), 1000)
        X = random_array(rng, (D.shape[1], 1000) if layout == "bsl" else (1000, D.shape[1]), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        _check(chain, cupy.asarray(X), layout, ref, dtype)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_permutations_folded(poisoned, rng, layout):
    """Input and output permutations are folded into the first and last segment."""
    dtype = numpy.complex64
    base = gpu_chain(CHAINS["six"], dtype, seed=3)
    N = base.shape[1]
    chain = ks.KSChain(base.factors, input_permutation=cupy.asarray(rng.permutation(N)),
                       output_permutation=cupy.asarray(rng.permutation(N)))
    steps = _fused_plan(chain, layout, numpy.dtype(dtype), 1000).steps
    assert isinstance(steps[0], FusedSegment) and steps[0].src is not None
    assert isinstance(steps[-1], FusedSegment) and steps[-1].dst is not None
    D = chain_oracle(chain)
    for B in BATCHES:
        X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        _check(chain, cupy.asarray(X), layout, ref, dtype)


@pytest.mark.parametrize("budget", [ks_chain.SMEM_BUDGET, 4 * 1024])
@pytest.mark.parametrize("n", [64, 1024, 16384, 360])
@pytest.mark.parametrize("dtype", [numpy.complex64, numpy.complex128])
def test_dft_against_numpy_fft(poisoned, rng, monkeypatch, n, dtype, budget):
    """DFT chains in both layouts; a small shared-memory budget forces several segments
    (exercising super-group ordering for the digit-reversed input)."""
    full_budget = budget == ks_chain.SMEM_BUDGET
    monkeypatch.setattr(ks_chain, "SMEM_BUDGET", budget)
    F = ks.dft(n, dtype=dtype, xp=cupy)
    for layout, B in (("bsf", 3), ("bsf", 1000), ("bsl", 65537 if n <= 64 else 33)):
        steps = _fused_steps(F, layout, numpy.dtype(dtype), B)
        if full_budget or n <= 64:
            assert steps
        X = random_array(rng, (B, n) if layout == "bsf" else (n, B), dtype)
        ref = numpy.fft.fft(X.astype(numpy.complex128), axis=1 if layout == "bsf" else 0)
        Xd = cupy.asarray(X)
        for backend in ("fused", "auto"):
            Y = _fused(F, Xd, layout) if backend == "fused" else F.matmul(Xd, layout=layout)
            assert rel_err(Y, ref) < (2e-5 if dtype == numpy.complex64 else 1e-12), backend


def test_dft_plan_fuses_and_merges():
    """The auto plan of DFT(1024) in BSF is one launch: of its ten radix-2 stages computed
    from their declared structure, or, for the same values declared as nothing, of five
    merged radix-4 factors."""
    F = ks.dft(1024, dtype=numpy.complex64, xp=cupy)
    plan = F.plan("bsf", numpy.complex64, 65536)
    assert plan.launches == 1, plan.describe()
    seg = plan.steps[0]
    assert [p.b for p in seg.patterns] == [2] * 10 and seg.src is not None
    assert all(stage != ks_rows.STORED for stage, _ in seg.stages)
    stored = ks.KSChain([ks.KSMatrix(K.values) for K in F.factors],
                        input_permutation=F.input_permutation)
    plan = stored.plan("bsf", numpy.complex64, 65536)
    assert plan.launches == 1, plan.describe()
    assert [p.b for p in plan.steps[0].patterns] == [4] * 5


@pytest.mark.parametrize("n", [2, 64, 1024])
def test_hadamard_fused(poisoned, rng, n):
    H = ks.hadamard(n, dtype=numpy.float32, xp=cupy)
    ref_m = scipy.linalg.hadamard(n).astype(numpy.float64)
    for layout in ("bsl", "bsf"):
        X = random_array(rng, (n, 1000) if layout == "bsl" else (1000, n), numpy.float32)
        ref = ref_m @ X if layout == "bsl" else X @ ref_m.T
        Y = _fused(H, cupy.asarray(X), layout)
        assert rel_err(Y, ref) < 1e-5


def test_fused_strided_operand(poisoned, rng):
    chain = gpu_chain(CHAINS["monarch"], numpy.float32, seed=11)
    D = chain_oracle(chain)
    X = random_array(rng, (2 * 300, 3 * D.shape[1]), numpy.float32)
    Xv = cupy.asarray(X)[::2, ::3]                  # both strides > 1
    ref = X[::2, ::3] @ D.T
    _check(chain, Xv, "bsf", ref, numpy.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sanitizer_subset_chain(poisoned, rng, dtype):
    """Small cases for compute-sanitizer: permutations, ping-pong, views, tails."""
    for name in ("rect3", "six", "paper_small"):
        chain = gpu_chain(CHAINS[name], dtype, seed=5)
        N = chain.shape[1]
        chain = ks.KSChain(chain.factors, input_permutation=cupy.asarray(rng.permutation(N)))
        D = chain_oracle(chain)
        for layout in ("bsl", "bsf"):
            X = random_array(rng, (N, 37) if layout == "bsl" else (37, N), dtype)
            ref = D @ X if layout == "bsl" else X @ D.T
            _check(chain, cupy.asarray(X), layout, ref, dtype)
