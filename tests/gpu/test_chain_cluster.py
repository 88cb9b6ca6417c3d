"""Whole-vector segments held by thread-block clusters (``ks_rows_cluster``) against
float64 oracles on the GPU.

Each case takes the one-block segment of a chain (``make_row_segment(..., max_cluster=1)``)
and spreads its tile over every cluster size and every place of the rank bits that its
passes allow (batch-size-last: within the first pass's digits, some of them maybe at the top
of the last pass's; batch-size-first: t's top bits, within one pass's digits), so small
chains reach every kernel path cheaply; the last
tests check that the configuration takes clusters on its own for long vectors and that
``auto`` runs them. Oracles: dense complex128 products from the definition
(conftest.chain_oracle), the definition factor by factor, and scipy.linalg.hadamard; outputs
NaN-poisoned.
"""
import dataclasses

import numpy
import pytest
import scipy.linalg

import kscupy as ks
from conftest import (DTYPES, RTOL, chain_oracle, gpu_available, gpu_chain, random_array,
                      rel_err)
from kscupy.kernels import ks_rows
from kscupy.kernels.ks_rows import make_row_segment
from kscupy.core.shuffle import inverse_permutation

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402
from kscupy.core import device as devices  # noqa: E402


def _cluster_limit():
    """Most blocks of a cluster a tile may take on the current GPU: the device's
    ``max_cluster`` (16 on Hopper, the portable 8 on later GPUs, 1 before Hopper), at most
    ks_rows.MAX_CLUSTER (what make_row_segment allows by default)."""
    return min(ks_rows.MAX_CLUSTER, devices.current().max_cluster)


if _cluster_limit() < 2:
    pytest.skip("thread-block clusters need a Hopper GPU (sm_90) or later",
                allow_module_level=True)

from test_chain_rows import BATCHES, CHAINS as ROW_CHAINS, _factor_by_factor  # noqa: E402

# test_chain_rows's chains whose first pass (the last factor) has power-of-two digits:
# strides ascending and descending in application order, radix 4 and 16.
CHAINS = {name: ROW_CHAINS[name] for name in
          ("butterfly16", "butterfly_desc", "butterfly512", "radix4_64", "radix16")}


def _factors(chain, dtype):
    return [K.factor.in_dtype(dtype) for K in reversed(chain.factors)]


def _folds(chain):
    dst = None
    if chain.output_permutation is not None:
        dst = inverse_permutation(chain.output_permutation, cupy)
    return dict(src=chain.input_permutation, dst=dst)


def _clustered(chain, dtype, batch):
    """The chain's one-block batch-size-last segment spread over every cluster the first
    pass allows, with ``last`` of its rank bits (0 or more) at the top of the last pass's
    digits: (cluster, (rank_shift, last), segment) for each."""
    seg = make_row_segment(_factors(chain, dtype), dtype, "bsl", batch, max_cluster=1,
                           **_folds(chain))
    assert seg is not None and seg.cluster == 1
    lo, hi = seg.first_pass_bits
    out = []
    cluster = 2
    while cluster <= _cluster_limit():
        lcs = cluster.bit_length() - 1
        for last in range(lcs):
            for shift in range(lo, hi - (lcs - last) + 1):
                if ks_rows._cluster_fits("bsl", seg.n, cluster, seg.pass_bits, shift, last):
                    out.append((cluster, (shift, last), dataclasses.replace(
                        seg, cluster=cluster, rank_shift=shift, last_rank_bits=last)))
        cluster *= 2
    return out


def _tol(dtype, chain):
    return 20 * RTOL[numpy.dtype(dtype)] * len(chain)


def _batches(N):
    """BATCHES for vectors of length N, each capped so that the dense oracle stays cheap
    (still with a ragged last tile)."""
    return [B if B * N <= 2**22 else 2**22 // N + 1 for B in BATCHES]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_cluster_against_oracle(poisoned, rng, name, dtype):
    """Every cluster and rank-bit place (float32 and complex128; the smallest and largest
    cluster for the other dtypes) at B = 1000, the largest cluster at the other batches (each
    case is an instantiation of its own: NVRTC time). Places with rank bits in the last
    pass's digits (whose reads reach other blocks) are among them for every chain but
    butterfly_desc (its last pass's digits are below the first's)."""
    chain = gpu_chain(CHAINS[name], dtype, seed=len(name))
    D = chain_oracle(chain)
    N = chain.shape[1]
    every = numpy.dtype(dtype) in (numpy.float32, numpy.complex128)
    for B in _batches(N):
        cases = _clustered(chain, numpy.dtype(dtype), B)
        assert cases, "no cluster fits the chain's first pass"
        assert name == "butterfly_desc" or any(last for _, (_, last), _ in cases)
        if B != 1000:
            cases = cases[-1:]
        elif not every:
            cases = [cases[0], cases[-1]]
        X = random_array(rng, (N, B), dtype)
        ref = D @ X
        for cluster, shift, seg in cases:
            Y = seg(cupy.asarray(X), "bsl")
            assert Y.dtype == dtype and Y.shape == ref.shape
            assert rel_err(Y, ref) < _tol(dtype, chain), (B, cluster, shift, seg.describe())


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.complex128])
def test_cluster_permutations_folded(poisoned, rng, dtype):
    """Input and output gathers (tables) folded into the first pass's reads and the last
    pass's writes, around the cluster's scatter."""
    base = gpu_chain(CHAINS["butterfly512"], dtype, seed=7)
    N = base.shape[1]
    chain = ks.KSChain(base.factors, input_permutation=cupy.asarray(rng.permutation(N)),
                       output_permutation=cupy.asarray(rng.permutation(N)))
    D = chain_oracle(chain)
    X = random_array(rng, (N, 1000), dtype)
    for cluster, shift, seg in _clustered(chain, numpy.dtype(dtype), 1000):
        assert seg.in_map is not None and seg.out_map is not None
        assert rel_err(seg(cupy.asarray(X), "bsl"), D @ X) < _tol(dtype, chain), \
            (cluster, shift)


@pytest.mark.parametrize("dtype", [numpy.complex64, numpy.complex128])
def test_cluster_dft_stages(poisoned, rng, dtype):
    """Computed DFT stages (twiddles from the meta table) and the computed bit reversal."""
    chain = ks.dft(1024, dtype=dtype, xp=cupy)
    k = numpy.arange(1024)
    D = numpy.exp(-2j * numpy.pi * numpy.outer(k, k) / 1024)
    X = random_array(rng, (1024, 300), dtype)
    cases = _clustered(chain, numpy.dtype(dtype), 300)
    assert cases and cases[0][2].reversed_input
    for cluster, shift, seg in cases:
        assert rel_err(seg(cupy.asarray(X), "bsl"), D @ X) < _tol(dtype, chain), \
            (cluster, shift)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64])
@pytest.mark.parametrize("n, cluster", [(4096, 8), (16384, 16)])
def test_bsl_long_butterflies_split_the_rank_bits(poisoned, rng, n, cluster, dtype):
    """Random butterflies of 4096 and 16384, whose radix-4 first pass holds 2 of the rank
    bits, take clusters of 8 and 16 with the rest at the top of the last pass's digits (its
    reads reach the other blocks as it writes Y), and ``auto``'s plan runs them; checked
    against the definition factor by factor, ragged tiles included."""
    C = ks.butterfly(n, dtype=dtype, xp=cupy, seed=23)
    B = 1001 if n == 4096 else 77
    plan = C.plan("bsl", dtype, 2**26 // n)
    segs = [s for s in plan.steps if isinstance(s, ks_rows.RowSegment)]
    assert len(segs) == 1 and (segs[0].cluster, segs[0].last_rank_bits > 0) == (cluster, True), \
        plan.describe()
    X = random_array(rng, (n, B), dtype)
    ref = _factor_by_factor(C, X.T).T
    tol = RTOL[numpy.dtype(dtype)]
    assert rel_err(segs[0](cupy.asarray(X), "bsl"), ref) < tol
    assert rel_err(C.matmul(cupy.asarray(X), layout="bsl"), ref) < tol


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64])
@pytest.mark.parametrize("n", [1024, 4096, 8192])
def test_long_vectors_take_clusters(poisoned, rng, n, dtype):
    """Where a one-block tile of whole 128-byte runs does not fit three blocks an SM, the
    configuration spreads it over a cluster, and the planner's plan for ``auto`` holds it."""
    H = ks.hadamard(n, dtype=dtype, xp=cupy)
    ref_m = scipy.linalg.hadamard(n).astype(numpy.float64)
    B = 1037 if n < 8192 else 301            # (the float64 oracle's time)
    seg = make_row_segment(_factors(H, numpy.dtype(dtype)), numpy.dtype(dtype), "bsl", B)
    assert seg.cluster > 1 and seg.rows * numpy.dtype(dtype).itemsize >= ks_rows.BSL_RUN, \
        seg.describe()
    if n == 8192:      # 16 blocks: a cluster size the kernel must be allowed (Hopper)
        assert seg.cluster == 16 == _cluster_limit()
    X = random_array(rng, (n, B), dtype)
    assert rel_err(seg(cupy.asarray(X), "bsl"), ref_m @ X) < 1e-5
    assert rel_err(H.matmul(cupy.asarray(X), layout="bsl"), ref_m @ X) < 1e-5


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64])
def test_sanitizer_subset_cluster(poisoned, rng, dtype):
    """Small cases for compute-sanitizer: clusters of 2 and 4 with gathers and a ragged tile,
    and the largest cluster the configuration takes (16 on Hopper)."""
    base = gpu_chain(CHAINS["radix4_64"], dtype, seed=5)
    chain = ks.KSChain(base.factors, input_permutation=cupy.asarray(rng.permutation(64)),
                       output_permutation=cupy.asarray(rng.permutation(64)))
    D = chain_oracle(chain)
    X = random_array(rng, (64, 37), dtype)
    cases = _clustered(chain, numpy.dtype(dtype), 37)
    assert {cluster for cluster, _, _ in cases} >= {2, 4, 8, 16}
    assert any(last for _, (_, last), _ in cases)
    for cluster, shift, seg in cases:
        assert rel_err(seg(cupy.asarray(X), "bsl"), D @ X) < _tol(dtype, chain), \
            (cluster, shift)
    # the configuration's largest cluster (16 blocks on Hopper), a ragged tile
    H = ks.hadamard(8192, dtype=dtype, xp=cupy)
    seg = make_row_segment(_factors(H, numpy.dtype(dtype)), numpy.dtype(dtype), "bsl", 37)
    assert seg.cluster == _cluster_limit(), seg.describe()
    X = random_array(rng, (8192, 37), dtype)
    ref = scipy.linalg.hadamard(8192).astype(numpy.float64) @ X
    assert rel_err(seg(cupy.asarray(X), "bsl"), ref) < 1e-5


# -- batch-size-first ---------------------------------------------------------------------------
# Chains whose pass that holds the top bits (the one that reaches other blocks) comes in the
# middle (between two local passes, the tile stored at the end) or alone (writing Y itself).
BSF_CHAINS = {**CHAINS,
              "remote_middle": [(4, 4, 4, 4), (1, 4, 4, 16), (16, 4, 4, 1)],
              "remote_only": [(1, 4, 4, 16)]}


def _clustered_bsf(chain, dtype, batch):
    """The chain's one-block batch-size-first segment spread over every cluster whose rank
    bits (t's top bits) one pass's digits hold: (cluster, segment) for each."""
    seg = make_row_segment(_factors(chain, dtype), dtype, "bsf", batch, max_cluster=1)
    assert seg is not None and seg.cluster == 1
    out = []
    cluster = 2
    while cluster <= _cluster_limit():
        shift = seg.n.bit_length() - cluster.bit_length()
        if ks_rows._cluster_fits("bsf", seg.n, cluster, seg.pass_bits, shift):
            out.append((cluster, dataclasses.replace(seg, cluster=cluster, rank_shift=shift)))
        cluster *= 2
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BSF_CHAINS))
def test_bsf_cluster_against_oracle(poisoned, rng, name, dtype):
    """Batch-size-first tiles over every cluster the top bits allow at B = 1000, the largest
    at the other batches: the pass that reaches other blocks first (butterfly_desc, after
    the load), last (writing Y itself, or the tile before the store), in the middle
    (remote_middle) or alone (remote_only)."""
    chain = gpu_chain(BSF_CHAINS[name], dtype, seed=len(name) + 1)
    D = chain_oracle(chain)
    N = chain.shape[1]
    for B in _batches(N):
        cases = _clustered_bsf(chain, numpy.dtype(dtype), B)
        assert cases, "no pass holds the top bits alone"
        if B != 1000:
            cases = cases[-1:]
        X = random_array(rng, (B, N), dtype)
        ref = X @ D.T
        for cluster, seg in cases:
            Y = seg(cupy.asarray(X), "bsf")
            assert Y.dtype == dtype and Y.shape == ref.shape
            assert rel_err(Y, ref) < _tol(dtype, chain), (B, cluster, seg.describe())


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64])
def test_bsf_long_stored_tiles_take_clusters(poisoned, rng, dtype):
    """A random butterfly(4096), whose one-block batch-size-first tiles keep 4 rows (float32)
    or 2 (complex64), is spread over a cluster of 4 by the configuration, and ``auto``'s
    plan runs it; checked against the definition factor by factor, a ragged tile
    included."""
    C = ks.butterfly(4096, dtype=dtype, xp=cupy, seed=19)
    B = 1001
    plan = C.plan("bsf", dtype, B)
    segs = [s for s in plan.steps if isinstance(s, ks_rows.RowSegment)]
    assert len(segs) == 1 and segs[0].cluster == 4, plan.describe()
    X = random_array(rng, (B, 4096), dtype)
    ref = _factor_by_factor(C, X)
    tol = RTOL[numpy.dtype(dtype)]
    assert rel_err(segs[0](cupy.asarray(X), "bsf"), ref) < tol
    assert rel_err(C.matmul(cupy.asarray(X), layout="bsf"), ref) < tol


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64])
def test_sanitizer_subset_cluster_bsf(poisoned, rng, dtype):
    """Small batch-size-first cases for compute-sanitizer: every cluster of the top bits,
    ragged tiles, the pass that reaches other blocks first, last, in the middle and alone."""
    for name in ("butterfly16", "butterfly_desc", "radix16", "remote_middle", "remote_only"):
        chain = gpu_chain(BSF_CHAINS[name], dtype, seed=9)
        D = chain_oracle(chain)
        N = chain.shape[1]
        X = random_array(rng, (37, N), dtype)
        cases = _clustered_bsf(chain, numpy.dtype(dtype), 37)
        assert cases
        for cluster, seg in cases:
            assert rel_err(seg(cupy.asarray(X), "bsf"), X @ D.T) < _tol(dtype, chain), \
                (name, cluster)


# -- clusters that walk several tiles ---------------------------------------------------------
@pytest.mark.parametrize("layout, dtype, strided", [
    ("bsl", numpy.float32, False),    # the first pass's scatter by st.async: phases 0, 1, 0, ...
    ("bsl", numpy.float16, True),     # rows of one 2-byte element: the cluster barrier instead
    ("bsf", numpy.float32, False),
    ("bsf", numpy.complex64, False),
])
def test_clusters_walk_several_tiles(poisoned, rng, monkeypatch, layout, dtype, strided):
    """With two clusters for many tiles (ks_rows.MAX_GRID_BLOCKS lowered; a plan's grid has a
    cluster a tile) each cluster walks 8 tiles or more: the exchange's mbarrier phases
    alternate, and the barriers between tiles order one tile's accesses to a block against
    the next tile's. ``strided``: every other batch column, so that rows move one element
    at a time."""
    chain = gpu_chain(CHAINS["butterfly512"], dtype, seed=21)
    D = chain_oracle(chain)
    N, B = chain.shape[1], 1000
    if layout == "bsl":
        cases = [(c, s) for c, _, s in _clustered(chain, numpy.dtype(dtype), B)]
        full = random_array(rng, (N, 2 * B if strided else B), dtype)
        ref = D @ (full[:, ::2] if strided else full)
        Xd = cupy.asarray(full)[:, ::2] if strided else cupy.asarray(full)
    else:
        cases = _clustered_bsf(chain, numpy.dtype(dtype), B)
        X = random_array(rng, (B, N), dtype)
        ref = X @ D.T
        Xd = cupy.asarray(X)
    assert cases
    cluster, seg = cases[-1]
    assert -(-B // seg.rows) >= 2 * 8, seg.describe()
    monkeypatch.setattr(ks_rows, "MAX_GRID_BLOCKS", 2 * cluster)
    Y = seg(Xd, layout)
    assert rel_err(Y, ref) < _tol(dtype, chain), (cluster, seg.describe())
