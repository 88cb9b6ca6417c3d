"""Two factors fused on the tensor cores (kernels_cu/ks_pair.cu, planner's PairSegment)
against float64 oracles on the GPU.

The oracle is the product of dense float64 factors built from the canonical values by the
definition (conftest.chain_oracle); it runs no kscupy code. Outputs are NaN-poisoned, so an
output element the kernel fails to write fails the test.
"""
import numpy
import pytest

import kscupy as ks
from conftest import RTOL, chain_oracle, gpu_available, gpu_chain, random_array, rel_err
from kscupy.engine import planner
from kscupy.engine.costs import gpu as gpu_costs
from kscupy.kernels import ks_pair

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402

BATCHES = [1, 3, 1000, 65537]
#: (left, right) factors of a chain K_left K_right (right applied first): ragged blocks
#: (rows and reductions not multiples of 16 or 8, so MASKED), square blocks that run in
#: place, several groups along a and d, and the paper's bottleneck.
PAIRS = [[(2, 9, 30, 2), (3, 20, 12, 2)], [(3, 20, 20, 1), (1, 20, 20, 3)],
         [(1, 40, 66, 3), (2, 33, 17, 3)], [(1, 32, 32, 8), (4, 8, 8, 8)],
         [(1, 192, 48, 2), (2, 48, 192, 1)], [(1, 32, 32, 16), (16, 32, 32, 1)]]
#: (columns, warps, row tiles) of the segments tried besides make_pair_segment's choice
SHAPES = [(8, 8, 1), (64, 8, 2), (16, 16, 2), (32, 4, 1)]


def _segments(chain, layout):
    factors = tuple(K.factor for K in reversed(chain.factors))
    chosen = ks_pair.make_pair_segment(factors, numpy.float32, layout)
    assert chosen is not None
    return [chosen] + [ks_pair.PairSegment(factors, layout, *shape) for shape in SHAPES
                       if ks_pair.pair_layout(tuple(f.pattern for f in factors), shape[0],
                                              layout, shape[2]).bytes <= ks_pair.SMEM_MAX]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("patterns", PAIRS, ids=str)
def test_pair_against_oracle(poisoned, rng, patterns, layout, transposed):
    chain = gpu_chain(patterns, numpy.float32, seed=11)
    chain = chain.T if transposed else chain
    D = chain_oracle(chain)
    M, N = chain.shape
    for B in BATCHES:
        X = random_array(rng, (N, B) if layout == "bsl" else (B, N), numpy.float32)
        ref = D @ X if layout == "bsl" else X @ D.T
        for segment in _segments(chain, layout):
            for precision, tol in (("default", 4 * RTOL[numpy.dtype(numpy.float32)]),
                                   ("tf32", 5e-3)):
                Y = segment.prepare(cupy.asarray(X), layout, precision)(cupy.asarray(X))
                assert Y.dtype == numpy.float32 and Y.shape == ref.shape
                err = rel_err(Y, ref)
                assert err < tol, (B, segment.describe(), precision, err)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_pair_operands_of_any_stride(poisoned, rng, layout):
    """A strided operand (copied to C order), one 4 bytes off 16-byte alignment (copies of
    one element), and an infinity in one input feature, which must reach only the outputs
    that depend on it (MASKED: a reduction of 12 reads no other group's inputs)."""
    chain = gpu_chain(PAIRS[0], numpy.float32, seed=5)
    D = chain_oracle(chain)
    M, N = chain.shape
    B = 257
    segment = ks_pair.make_pair_segment(tuple(K.factor for K in reversed(chain.factors)),
                                        numpy.float32, layout)
    assert segment.masked
    wide = random_array(rng, (N, 2 * B + 1) if layout == "bsl" else (B, 2 * N + 1),
                        numpy.float32)
    along = B if layout == "bsl" else N              # the contiguous axis's length
    for columns in (slice(1, None, 2), slice(1, along + 1)):
        host, device = wide[:, columns], cupy.asarray(wide)[:, columns]
        ref = D @ host if layout == "bsl" else host @ D.T
        assert rel_err(segment.prepare(device, layout)(device), ref) < 4e-5
    Xi = cupy.asarray(random_array(rng, (N, B) if layout == "bsl" else (B, N), numpy.float32))
    if layout == "bsl":
        Xi[0, :] = numpy.inf
    else:
        Xi[:, 0] = numpy.inf
    Y = cupy.asnumpy(segment.prepare(Xi, layout)(Xi))
    reached = numpy.abs(D[:, 0]) > 0
    finite = numpy.isfinite(Y if layout == "bsl" else Y.T).all(axis=1)
    assert reached.any() and not reached.all()
    assert not finite[reached].any() and finite[~reached].all()


def test_planner_runs_a_pair(poisoned, rng, monkeypatch):
    """A chain whose plan holds a pair (the model's price of pairs made zero) gives the
    oracle's result through the plan's prepared run."""
    chain = gpu_chain(PAIRS[4], numpy.float32, seed=3)
    monkeypatch.setattr(gpu_costs, "pair_seconds", lambda *args: 0.0)
    D = chain_oracle(chain)
    for layout in ("bsl", "bsf"):
        for B in (3, 4099):
            X = random_array(rng, (chain.shape[1], B) if layout == "bsl"
                             else (B, chain.shape[1]), numpy.float32)
            plan = planner.plan(chain.factor_chain, layout, numpy.float32, B)
            assert any(isinstance(s, ks_pair.PairSegment) for s in plan.steps), plan.describe()
            Y = plan.prepare(cupy.asarray(X), layout)(cupy.asarray(X))
            ref = D @ X if layout == "bsl" else X @ D.T
            assert rel_err(Y, ref) < 4e-5


def test_one_instantiation_for_several_layouts(poisoned, rng):
    """Two pairs of the same instantiation whose tiles take different shared memory
    (Monarch(1024) and Monarch(512), 32 columns: 128 and 66 KiB): preparing the smaller
    after the larger must leave the larger launchable (CuPy hands out one CUfunction per
    source and name, whose shared-memory limit the second preparation once lowered)."""
    runs = []
    for n in (1024, 512):
        chain = ks.monarch(n, dtype=numpy.float32, xp=cupy, seed=n)
        factors = tuple(K.factor for K in reversed(chain.factors))
        segment = ks_pair.PairSegment(factors, "bsf", 32, 8, 2)
        X = random_array(rng, (100, n), numpy.float32)
        runs.append((segment.prepare(cupy.asarray(X), "bsf"), X, chain_oracle(chain)))
    assert len({run[0].launch._function for run in runs}) == 1
    for run, X, D in runs:
        assert rel_err(run(cupy.asarray(X)), X @ D.T) < 4e-5
