"""Plan steps that rewrite a chain, against float64 oracles on the GPU: a run of factors
applied as its product (steps.ProductStep) and a plan run in the other layout between two
transposes (steps.Relayout).

The oracle is the product of dense float64 factors built from the canonical values by the
definition, with the chain's permutations as a column scatter and a row gather
(conftest.chain_oracle), or numpy.fft; neither runs kscupy code. Each auto test checks that
the plan really holds the step, so a planner that stopped choosing it would fail here.
Outputs are NaN-poisoned.
"""
import dataclasses

import numpy
import pytest

import kscupy as ks
from conftest import DTYPES, RTOL, chain_oracle, gpu_available, gpu_chain, random_array, rel_err
from kscupy.core import device as devices
from kscupy.engine import planner
from kscupy.engine.steps import ProductStep, Relayout
from kscupy.kernels import ks_rows

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402

#: An H200's facts as device.current() gives them (132 SMs at 1.98 GHz, 4.8 TB/s; clusters
#: of up to 16 blocks)
H200 = dataclasses.replace(devices.H200, name="H200", cuda_runtime=13020, memory=150 * 2**30)

BATCHES = [1, 3, 1000, 65537]
BOTTLENECK = [(2, 48, 192, 1), (1, 192, 48, 2)]       # 96 -> 384 -> 96: a 96 x 96 product


def _products(chain, layout, dtype, batch):
    return [s for s in chain.plan(layout, dtype, batch).steps
            if isinstance(s, ProductStep)]


@pytest.mark.parametrize("permuted", [False, True])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_bottleneck_chain_as_its_product(poisoned, rng, dtype, layout, permuted):
    base = gpu_chain(BOTTLENECK, dtype, seed=7)
    N = base.shape[1]
    perms = dict(input_permutation=cupy.asarray(rng.permutation(N)),
                 output_permutation=cupy.asarray(rng.permutation(N))) if permuted else {}
    chain = ks.KSChain(base.factors, **perms)
    D = chain_oracle(chain)
    tol = 20 * RTOL[numpy.dtype(dtype)] * len(chain)
    for B in BATCHES:
        X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        Y = chain.matmul(cupy.asarray(X), layout=layout)
        assert Y.dtype == dtype and rel_err(Y, ref) < tol, B
        if B == BATCHES[-1]:
            steps = chain.plan(layout, numpy.dtype(dtype), B).steps
            assert len(steps) == 1 and isinstance(steps[0], ProductStep), \
                chain.plan(layout, numpy.dtype(dtype), B).describe()


def test_product_follows_a_write(poisoned, rng):
    """The product is formed from the factors' values when the plan is made: writing a
    factor makes a new plan with the new product."""
    dtype = numpy.float32
    chain = gpu_chain(BOTTLENECK, dtype, seed=3)
    X = cupy.asarray(random_array(rng, (1000, 96), dtype))
    chain.matmul(X, layout="bsf")
    assert _products(chain, "bsf", numpy.dtype(dtype), 1000)
    K = chain.factors[0]
    K.values = cupy.asarray(random_array(rng, K.values.shape, dtype))
    ref = X.get().astype(numpy.float64) @ chain_oracle(chain).T
    assert rel_err(chain.matmul(X, layout="bsf"), ref) < 40 * RTOL[numpy.dtype(dtype)]


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_relayout_against_oracle(poisoned, rng, dtype, layout):
    """A chain with permutations through the other layout's plan: every dtype, both
    directions, the batch sizes of the suite and a strided operand."""
    base = gpu_chain([(1, 2, 2, 8), (2, 2, 2, 4), (4, 2, 2, 2), (8, 2, 4, 1)], dtype, seed=9)
    M, N = base.shape
    chain = ks.KSChain(base.factors, input_permutation=cupy.asarray(rng.permutation(N)),
                       output_permutation=cupy.asarray(rng.permutation(M)))
    other = "bsf" if layout == "bsl" else "bsl"
    D = chain_oracle(chain)
    tol = 20 * RTOL[numpy.dtype(dtype)] * len(chain)
    for B in BATCHES:
        step = Relayout(planner.plan(chain.factor_chain, other, numpy.dtype(dtype), B), other,
                        chain.shape)
        X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
        ref = D @ X if layout == "bsl" else X @ D.T
        Y = step(cupy.asarray(X), layout)
        assert Y.shape == ref.shape and Y.dtype == dtype and rel_err(Y, ref) < tol, B
    wide = random_array(rng, (N, 2 * 999) if layout == "bsl" else (999, 2 * N), dtype)
    view = cupy.asarray(wide)[:, ::2]
    ref = D @ view.get() if layout == "bsl" else view.get() @ D.T
    assert rel_err(step(view, layout), ref) < tol


def test_long_dft_in_batch_size_last_runs_batch_size_first(poisoned, rng):
    """DFT(16384), complex64, batch-size-last, planned for an H200's facts without
    thread-block clusters (``max_cluster=1``; the plan tests/test_planner.py checks; on an
    H100's the model prefers merged products): the plan transposes to the batch-size-first
    whole-vector launch and back, and matches numpy.fft. With clusters the plan holds the
    vector on 16 blocks in batch-size-last instead (checked too)."""
    n, B = 16384, 4096
    F = ks.dft(n, dtype=numpy.complex64, xp=cupy)
    X = cupy.asarray(random_array(rng, (n, B), numpy.complex64))
    cols = slice(0, B, 97)                   # a sample of columns keeps the oracle cheap
    ref = numpy.fft.fft(X[:, cols].get().astype(numpy.complex128), axis=0)
    clustered = planner.plan(F.factor_chain, "bsl", numpy.dtype(numpy.complex64), B,
                             device=H200)
    segs = [s for s in clustered.steps if isinstance(s, ks_rows.RowSegment)]
    assert len(segs) == 1 and segs[0].cluster == 16 and segs[0].layout == "bsl", \
        clustered.describe()
    if devices.current().max_cluster >= 16:     # runs only where clusters of 16 launch
        assert rel_err(clustered.prepare(X, "bsl")(X)[:, cols], ref) < 2e-5
    plan = planner.plan(F.factor_chain, "bsl", numpy.dtype(numpy.complex64), B,
                        device=dataclasses.replace(H200, max_cluster=1))
    assert isinstance(plan.steps[0], Relayout), plan.describe()
    assert plan.launches == 3
    Y = plan.prepare(X, "bsl")(X)
    assert rel_err(Y[:, cols], ref) < 2e-5
