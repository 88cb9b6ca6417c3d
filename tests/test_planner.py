"""Chain planning on the CPU: merging against dense products and plan structure."""
import dataclasses

import numpy
import pytest

import kscupy as ks
from conftest import dense_oracle, to_numpy
from kscupy.core.pattern import super_group_lengths, super_pattern
from kscupy.core import device
from kscupy.engine import algebra, planner, steps
from kscupy.kernels import ks_rows
from kscupy.kernels.ks_chain import SMEM_BUDGET, FusedSegment
from kscupy.kernels.ks_rows import RowSegment

RATES = dataclasses.replace(device.H200, bandwidth=4e12, flops32=6.7e13, flops64=3.4e13,
                            name="test",
                            max_cluster=1)


def _dense(chain_factors):
    D = dense_oracle(chain_factors[0].values)
    for f in chain_factors[1:]:
        D = D @ dense_oracle(f.values)
    return D


@pytest.mark.parametrize("pair", [((1, 2, 2, 8), (2, 2, 2, 4)), ((4, 2, 2, 1), (2, 2, 2, 2)),
                                  ((1, 2, 2, 6), (2, 2, 2, 3)), ((1, 3, 2, 2), (2, 1, 1, 2))])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_merge_equals_the_product(pair, dtype):
    left, right = (ks.KSMatrix.random(p, dtype=dtype, seed=i) for i, p in enumerate(pair))
    merged = algebra.merge(left.factor, right.factor)
    assert merged is not None and merged.dtype == dtype
    assert merged.pattern.nnz <= left.nnz + right.nnz
    ref = dense_oracle(left.values) @ dense_oracle(right.values)
    tol = 1e-6 if dtype == numpy.float32 else 1e-13
    assert numpy.abs(merged.todense() - ref).max() <= tol * numpy.abs(ref).max()


@pytest.mark.parametrize("host_elements", [0, 1 << 16], ids=["on_device", "on_host"])
def test_merge_on_either_side(xp, monkeypatch, host_elements):
    # small factors are merged on the host, larger ones in their own module: both give the
    # product, in the factors' module
    from kscupy.core import arrays
    monkeypatch.setattr(arrays, "HOST_ELEMENTS", host_elements)
    left = ks.KSMatrix.random((1, 2, 2, 8), dtype=numpy.complex64, xp=xp, seed=1).H
    right = ks.KSMatrix.random((2, 2, 2, 4), dtype=numpy.complex64, xp=xp, seed=2)
    merged = ks.KSMatrix.of_factor(algebra.merge(left.factor, right.factor))
    assert merged.xp is xp and merged.dtype == numpy.complex64
    ref = dense_oracle(to_numpy(left.values)) @ dense_oracle(to_numpy(right.values))
    assert numpy.abs(to_numpy(merged.todense()) - ref).max() < 1e-5


def test_merge_of_views():
    left = ks.KSMatrix.random((2, 2, 2, 2), dtype=numpy.complex64, seed=1).H
    right = ks.KSMatrix.random((1, 2, 2, 4), dtype=numpy.complex64, seed=2).T
    merged = algebra.merge(left.factor, right.factor)
    ref = dense_oracle(left.values) @ dense_oracle(right.values)
    assert numpy.abs(merged.todense() - ref).max() < 1e-5


def test_merge_refuses_what_would_add_work():
    big = (ks.KSMatrix.random((1, 4, 4, 4)), ks.KSMatrix.random((4, 4, 4, 1)))   # dense 16 x 16
    assert algebra.merge(*(K.factor for K in big)) is None
    wide = (ks.KSMatrix.random((1, 8, 2, 1)), ks.KSMatrix.random((1, 2, 8, 1)))  # low rank
    assert algebra.merge(*(K.factor for K in wide)) is None


def test_merge_all_keeps_the_dft():
    F = ks.dft(64, dtype=numpy.complex128)
    merged = [ks.KSMatrix.of_factor(f) for f in algebra.merge_all([K.factor for K in F.factors])]
    assert [tuple(f.pattern) for f in merged] == [(1, 4, 4, 16), (4, 4, 4, 4), (16, 4, 4, 1)]
    assert numpy.abs(_dense(merged) - _dense(list(F.factors))).max() < 1e-12


def test_super_pattern_and_lengths():
    patterns = [ks.KSPattern(4, 2, 2, 6), ks.KSPattern(6, 2, 2, 4)]
    assert super_pattern(patterns) == (2, 2)
    # (6, 3, 2, 4) inside (AS, DS) = (2, 2): 3 sub-blocks x 2 inner x c = 2 in, b = 3 out
    assert super_group_lengths(ks.KSPattern(6, 3, 2, 4), 2, 2) == (12, 18)


@pytest.mark.parametrize("n, passes", [(256, (3, 3, 2)), (1024, (3, 3, 3, 1)),
                                      (4096, (3, 3, 3, 3)), (16384, (4, 4, 4, 2))])
def test_dft_plans_computed_stages(n, passes):
    """A DFT from ks.dft declares its stages (DFTStage): up to 16384 complex64 features it
    is one whole-vector launch of unmerged radix-2 stages computed from their twiddles, the
    digit reversal folded into its loads; three stages to a pass where three blocks share an
    SM (their registers), four for a lone block."""
    F = ks.dft(n, dtype=numpy.complex64)
    plan = planner.plan(F.factor_chain, "bsf", numpy.complex64, 2**26 // n, device=RATES)
    assert plan.launches == 1 and isinstance(plan.steps[0], RowSegment), plan.describe()
    seg = plan.steps[0]
    assert seg.src is not None and seg.dst is None
    assert seg.passes == passes
    assert seg.stages[0] == (ks_rows.HADAMARD_STAGE, False)      # d = 1: all twiddles are 1
    assert all(st == (ks_rows.TWIDDLED_STAGE, False) for st in seg.stages[1:])


def test_hadamard_plans_computed_stages():
    H = ks.hadamard(1024, normalized=True, dtype=numpy.float32)
    seg = planner.plan(H.factor_chain, "bsl", numpy.float32, 65536, device=RATES).steps[0]
    assert isinstance(seg, RowSegment) and seg.passes == (5, 5)     # bsl: passes of 32
    seg = planner.plan(H.factor_chain, "bsf", numpy.float32, 65536, device=RATES).steps[0]
    assert isinstance(seg, RowSegment) and seg.passes == (4, 4, 2)
    assert all(st == (ks_rows.HADAMARD_STAGE, True) for st in seg.stages)


def _without_structure(chain):
    return ks.KSChain([ks.KSMatrix(K.values) for K in chain.factors],
                      input_permutation=chain.input_permutation)


@pytest.mark.parametrize("n", [256, 1024])
def test_dft_plans_whole_vectors(n):
    """A DFT chain without declared stages, up to 1024 complex64 features: one whole-vector
    launch of merged radix-4 stages, nested two (or one) to a pass, the digit reversal
    folded into its loads."""
    F = _without_structure(ks.dft(n, dtype=numpy.complex64))
    plan = planner.plan(F.factor_chain, "bsf", numpy.complex64, 2**26 // n, device=RATES)
    assert plan.launches == 1 and isinstance(plan.steps[0], RowSegment), plan.describe()
    seg = plan.steps[0]
    assert seg.src is not None and seg.dst is None
    assert [tuple(p) for p in seg.patterns] == [
        tuple(p) for p in algebra.merge_all([K.factor for K in F.factors])[::-1]
        for p in [p.pattern]]
    assert all(count <= 2 for count in seg.passes) and sum(seg.passes) == len(seg.factors)
    assert seg.smem_bytes(8) <= ks_rows.SMEM_MAX


@pytest.mark.parametrize("n, segments", [(256, 1), (1024, 1), (16384, 2)])
def test_dft_plans(n, segments):
    """Without the whole-vector kernel, DFTs go to fused shared-memory segments."""
    F = ks.dft(n, dtype=numpy.complex64)
    plan = planner.plan(F.factor_chain, "bsf", numpy.complex64, 2**26 // n, device=RATES, rows=False)
    fused = [s for s in plan.steps if isinstance(s, FusedSegment)]
    assert len(fused) == segments == plan.launches, plan.describe()
    assert fused[0].src is not None                  # the digit reversal is folded
    assert sum(len(s.factors) for s in fused) == (len(F) + 1) // 2   # radix-4 stages
    for seg in fused:
        assert seg.smem_bytes(8) <= SMEM_BUDGET
    if segments > 1:
        assert fused[0].gorder is not None           # tiles walk the reversed input in lines


def test_plan_modes():
    F = ks.dft(1024, dtype=numpy.complex64)
    never = planner.plan(F.factor_chain, "bsl", numpy.complex64, 4096, fuse="never", device=RATES)
    assert isinstance(never.steps[0], steps.Gather)
    assert all(isinstance(s, steps.FactorStep) for s in never.steps[1:])
    assert never.launches == len(F) + 1
    always = planner.plan(F.factor_chain, "bsl", numpy.complex64, 4096, fuse="always", device=RATES)
    assert always.launches == 1
    with pytest.raises(ValueError, match="fuse"):
        planner.plan(F.factor_chain, "bsl", numpy.complex64, 4096, fuse="sometimes", device=RATES)


@pytest.mark.parametrize("patterns", [((1, 64, 256, 16), (64, 64, 64, 1)),
                                      ((1, 192, 48, 2), (2, 48, 192, 1))])
def test_big_blocks_stay_per_factor_under_auto(patterns):
    """Large blocks are fused only on request (fuse="always")."""
    C = ks.KSChain([ks.KSMatrix.random(p) for p in patterns])
    for layout in ("bsl", "bsf"):
        plan = planner.plan(C.factor_chain, layout, numpy.float32, 25088, device=RATES)
        assert all(isinstance(s, steps.FactorStep) for s in plan.steps)
        forced = planner.plan(C.factor_chain, layout, numpy.float32, 25088, fuse="always", device=RATES)
        assert forced.launches == 1


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_product_of_three_factors(dtype):
    """planner.product of a run (left to right) against the product of dense oracles,
    for a product that keeps super-groups (AS = 2, DS = 2) and for a dense one."""
    for patterns in [((2, 3, 4, 2), (4, 2, 2, 2), (2, 2, 3, 4)),
                     ((2, 5, 6, 1), (1, 6, 3, 2), (2, 3, 7, 1))]:
        factors = [ks.KSMatrix.random(p, dtype=dtype, seed=i) for i, p in enumerate(patterns)]
        P = algebra.product([K.factor for K in factors])
        assert P.dtype == dtype and P.pattern == algebra.product_pattern(
            [K.factor for K in factors])
        ref = _dense(factors)
        tol = 1e-6 if dtype == numpy.float32 else 1e-13
        assert numpy.abs(P.todense() - ref).max() <= tol * numpy.abs(ref).max()


def _chain_oracle(chain, perms=(None, None)):
    """The chain's dense matrix by its definition: y = (K1 ... KL x[src])[out], columns by
    applying it to the identity."""
    src, out = perms
    K = _dense(list(chain.factors))
    X = numpy.eye(chain.shape[1])
    Z = K @ (X if src is None else X[src])
    return Z if out is None else Z[out]


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_bottleneck_chain_is_applied_as_its_dense_product(layout):
    """(2,48,192,1)·(1,192,48,2) maps 96 features through 384 back to 96: its 96 x 96
    product costs cuBLAS less than the two factors, and the plan forms it, the chain's
    permutations folded into its rows and columns (no gather left)."""
    rng = numpy.random.default_rng(5)
    base = [ks.KSMatrix.random(p, seed=i) for i, p in enumerate([(2, 48, 192, 1),
                                                                 (1, 192, 48, 2)])]
    src, out = rng.permutation(96), rng.permutation(96)
    for perms in [(None, None), (src, out), (src, None)]:
        C = ks.KSChain(base, input_permutation=perms[0], output_permutation=perms[1])
        plan = planner.plan(C.factor_chain, layout, numpy.float32, 25088, device=RATES)
        assert len(plan.steps) == 1 and isinstance(plan.steps[0], steps.ProductStep), \
            plan.describe()
        step = plan.steps[0]
        assert step.count == 2 and tuple(step.factor.pattern) == (1, 96, 96, 1)
        ref = _chain_oracle(C, perms)
        assert numpy.abs(step.factor.todense() - ref).max() <= 1e-5 * numpy.abs(ref).max()
        # only auto forms products
        for fuse in ("never", "always"):
            assert not any(isinstance(s, steps.ProductStep) for s in planner.plan(
                C.factor_chain, layout, numpy.float32, 25088, fuse=fuse, device=RATES).steps)


def test_product_keeps_gathers_where_not_dense():
    """A product with super-groups (here AS = 4) cannot absorb a permutation: the plan
    gathers before it, and the steps still give the chain."""
    rng = numpy.random.default_rng(2)
    base = [ks.KSMatrix.random(p, seed=i) for i, p in enumerate([(4, 16, 64, 1),
                                                                 (4, 64, 16, 1)])]
    src = rng.permutation(64)
    C = ks.KSChain(base, input_permutation=src)
    plan = planner.plan(C.factor_chain, "bsf", numpy.float32, 25088, device=RATES)
    assert [type(s) for s in plan.steps] == [steps.Gather, steps.ProductStep], \
        plan.describe()
    X = rng.standard_normal((3, 64))
    Y = X[:, src] @ plan.steps[1].factor.todense().T
    ref = X @ _chain_oracle(C, (src, None)).T
    assert numpy.abs(Y - ref).max() <= 1e-5 * numpy.abs(ref).max()


def test_no_product_larger_than_the_limit(monkeypatch):
    C = ks.KSChain([ks.KSMatrix.random(p) for p in [(2, 48, 192, 1), (1, 192, 48, 2)]])
    monkeypatch.setattr(algebra, "PRODUCT_MAX_ENTRIES", 96 * 384 - 1)
    plan = planner.plan(C.factor_chain, "bsl", numpy.float32, 25088, device=RATES)
    assert not any(isinstance(s, steps.ProductStep) for s in plan.steps)


def test_long_dft_in_batch_size_last_is_planned_batch_size_first():
    """DFT(16384) in bsl: tiles of two vectors read 16-byte runs of each feature; the plan
    runs the bsf whole-vector launch between two transposes (Relayout), never under
    fuse="never"."""
    F = ks.dft(16384, dtype=numpy.complex64)
    plan = planner.plan(F.factor_chain, "bsl", numpy.complex64, 4096, device=RATES)
    assert len(plan.steps) == 1 and isinstance(plan.steps[0], steps.Relayout), \
        plan.describe()
    step = plan.steps[0]
    assert step.layout == "bsf" and step.shape == (16384, 16384) and plan.launches == 3
    assert isinstance(step.plan.steps[0], RowSegment)
    assert plan.describe().startswith("transpose to bsf")
    never = planner.plan(F.factor_chain, "bsl", numpy.complex64, 4096, fuse="never", device=RATES)
    assert not any(isinstance(s, steps.Relayout) for s in never.steps)


def test_output_permutation_becomes_a_scatter_table():
    rng = numpy.random.default_rng(0)
    base = ks.hadamard(16, dtype=numpy.float32)
    out = rng.permutation(16)
    C = ks.KSChain(base.factors, output_permutation=out)
    seg = planner.plan(C.factor_chain, "bsf", numpy.float32, 100, fuse="always", device=RATES,
                       rows=False).steps[-1]
    assert isinstance(seg, FusedSegment)
    assert (seg.dst[out] == numpy.arange(16)).all()      # y[dst[p]] = z[p]  <=>  y = z[out]
    rows = planner.plan(C.factor_chain, "bsf", numpy.float32, 100, fuse="always", device=RATES).steps[-1]
    assert isinstance(rows, RowSegment)
    assert (rows.out_map == out).all()           # output column t is tile element out[t]
    assert rows.in_map is None
    bsl = planner.plan(C.factor_chain, "bsl", numpy.float32, 100, fuse="always", device=RATES).steps[-1]
    assert isinstance(bsl, RowSegment) and bsl.in_map is None
    assert (bsl.out_map[out] == numpy.arange(16)).all()   # element p goes to column dst[p]


@pytest.mark.parametrize("patterns, passes", [
    # radix-2 stages in application order (d ascending) nest four to a pass of 16
    ([(8, 2, 2, 1), (4, 2, 2, 2), (2, 2, 2, 4), (1, 2, 2, 8)], (4,)),
    ([(32, 2, 2, 1), (16, 2, 2, 2), (8, 2, 2, 4), (4, 2, 2, 8), (2, 2, 2, 16), (1, 2, 2, 32)],
     (4, 2)),
    # descending strides nest as well; mixed radices by their product
    ([(1, 4, 4, 4), (4, 4, 4, 1)], (2,)),
    ([(1, 3, 3, 4), (3, 2, 2, 2), (6, 2, 2, 1)], (3,)),      # mixed radices, 12 elements
    ([(1, 2, 2, 8), (2, 2, 2, 4), (4, 2, 2, 2), (8, 2, 2, 1), (16, 1, 1, 1)], (4, 1)),
    ([(2, 2, 2, 2), (2, 2, 2, 2)], (1, 1)),                  # the same digit twice
    ([(1, 2, 2, 4), (4, 2, 2, 1)], (1, 1)),                  # a gap: strides 4 and 1
])
def test_group_passes(patterns, passes):
    assert ks_rows.group_passes([ks.KSPattern(*p) for p in patterns], 16) == passes


def test_fused_is_no_backend():
    """The segment kernel for every run of factors, whatever their blocks, is no named
    choice: under auto the planner takes it where it pays."""
    for op in (ks.dft(8), ks.KSMatrix.random((1, 2, 2, 1), dtype=numpy.complex128)):
        assert "fused" not in op.backends()
        with pytest.raises(ValueError, match="backend must be one of"):
            op.matmul(numpy.ones((op.shape[1], 2), dtype=numpy.complex128), backend="fused")


@pytest.mark.parametrize("dtype, n, rows, blocks", [
    (numpy.float32, 256, 32, 6),        # 128-byte runs, six 128-thread blocks per SM
    (numpy.complex64, 256, 16, 6),
    (numpy.float32, 1024, 16, 3),       # 64-byte runs, three blocks
    (numpy.float32, 4096, 8, 1),        # a lone block rather than runs below a sector
    (numpy.complex64, 4096, 4, 1),
    (numpy.float32, 8192, 4, 1),        # a lone tile of 8 rows does not fit
])
def test_bsl_tiles_keep_runs_of_whole_sectors(dtype, n, rows, blocks):
    """A batch-size-last tile wants 128-byte runs of each feature (a warp's access one
    line); with fewer rows for several blocks per SM, but not below a 32-byte sector while a
    lone tile fits. Its layout keeps the rows of a feature side by side."""
    H = ks.hadamard(n, dtype=dtype)
    seg = ks_rows.make_row_segment([K.factor for K in reversed(H.factors)], dtype, "bsl",
                                   65536, max_cluster=1, device=RATES)
    isz = numpy.dtype(dtype).itemsize
    assert (seg.rows, seg.blocks_per_sm(isz, RATES), seg.cluster) == (rows, blocks, 1)
    assert seg.smem_bytes(isz) == rows * n * isz
    smem, stride, spread = seg.tile_layout(isz)
    assert stride == rows and spread == max(1, 128 // (rows * isz))
    assert seg.threads == (512 if blocks == 1 else 128 if blocks == 6 else 256)
    assert ks_rows.make_row_segment([K.factor for K in reversed(H.factors)], dtype, "bsl",
                                    3, max_cluster=1, device=RATES).rows == 4   # no more rows than the batch


@pytest.mark.parametrize("dtype, n, shape", [
    (numpy.float32, 4096, (4, 512, 2)),     # long float32 vectors of stored blocks: 2 x 512
    (numpy.float32, 8192, (2, 512, 2)),
    (numpy.float32, 1024, (16, 256, 3)),    # more rows than WIDE_BLOCK_MAX_ROWS
    (numpy.complex64, 4096, (2, 256, 3)),   # its items need 72 registers
    (numpy.complex128, 1024, (4, 256, 3)),  # other dtypes were not measured
])
def test_bsf_long_stored_tiles_take_wide_blocks(dtype, n, shape):
    """Batch-size-first float32 tiles of a butterfly's stored blocks with at most
    WIDE_BLOCK_MAX_ROWS rows take two 512-thread blocks an SM; other dtypes and taller tiles
    keep three of 256, and so do computed stages (Hadamard) and batch-size-last tiles."""
    C = ks.butterfly(n, dtype=dtype, seed=1)
    factors = [K.factor for K in reversed(C.factors)]
    seg = ks_rows.make_row_segment(factors, dtype, "bsf", 1000, device=RATES)
    assert (seg.rows, seg.threads, seg.min_blocks) == shape
    H = ks.hadamard(n, dtype=dtype)
    computed = ks_rows.make_row_segment([K.factor for K in reversed(H.factors)], dtype, "bsf",
                                        1000, device=RATES)
    assert (computed.threads, computed.min_blocks) != (512, 2)
    bsl = ks_rows.make_row_segment(factors, dtype, "bsl", 1000, max_cluster=1, device=RATES)
    assert (bsl.threads, bsl.min_blocks) != (512, 2)


@pytest.mark.parametrize("dtype, n, cluster, rows", [
    (numpy.float32, 256, 1, 32),        # whole runs at six blocks an SM already
    (numpy.float32, 1024, 2, 32),       # 64 KiB a block: three an SM
    (numpy.float32, 4096, 8, 32),
    (numpy.complex64, 4096, 8, 16),
    (numpy.float32, 8192, 8, 16),       # whole runs would take 16 blocks: half runs
    (numpy.complex64, 8192, 8, 8),
])
def test_bsl_tiles_spread_over_clusters(dtype, n, cluster, rows):
    """Where a GPU has thread-block clusters, a batch-size-last tile of whole 128-byte runs
    (else of 64-byte runs) that would leave fewer than three blocks an SM is spread over the
    smallest cluster that gives each block at most SMEM_TARGET; the rank bits are the top
    bits of the first pass's digits. batch-size-first tiles of computed stages never are."""
    H = ks.hadamard(n, dtype=dtype)
    factors = [K.factor for K in reversed(H.factors)]
    isz = numpy.dtype(dtype).itemsize
    seg = ks_rows.make_row_segment(factors, dtype, "bsl", 65536, max_cluster=8, device=RATES)
    assert (seg.cluster, seg.rows) == (cluster, rows), seg.describe()
    assert seg.smem_bytes(isz) == rows * n * isz // cluster
    # a cluster's block also holds the mbarrier of the first pass's st.async writes
    assert seg.launch_smem_bytes(isz) == seg.smem_bytes(isz) + (8 if cluster > 1 else 0)
    lo, hi = seg.first_pass_bits
    if cluster > 1:
        assert seg.rank_shift == hi - (cluster.bit_length() - 1) >= lo
        assert seg.smem_bytes(isz) <= ks_rows.SMEM_TARGET and seg.blocks_per_sm(isz, RATES) >= 3
        assert "ks_rows_cluster" in seg.name(dtype) and f"cluster={cluster}" in seg.describe()
        assert seg.layout_probe_name(dtype).startswith(
            f"ks::ks_rows_layout<{ks.kernels.nvrtc.scalar_name(dtype)}, {n // cluster},")
    assert ks_rows.make_row_segment(factors, dtype, "bsf", 65536, max_cluster=8, device=RATES).cluster == 1


def test_hopper_clusters_of_sixteen():
    """Where clusters of 16 are allowed (Hopper), n = 8192 float32 takes whole 128-byte
    runs on 16 blocks instead of half runs on 8; the name and layout follow."""
    H = ks.hadamard(8192, dtype=numpy.float32)
    factors = [K.factor for K in reversed(H.factors)]
    seg = ks_rows.make_row_segment(factors, numpy.float32, "bsl", 65536,
                                   max_cluster=ks_rows.MAX_CLUSTER, device=RATES)
    assert (seg.cluster, seg.rows, seg.smem_bytes(4)) == (16, 32, 32 * 8192 * 4 // 16)
    assert ", 16, " in seg.name(numpy.float32)
    assert seg.cluster > ks_rows.PORTABLE_CLUSTER


def test_no_cluster_where_a_later_pass_mixes_the_rank_bits():
    """ks_rows_cluster writes to other blocks in its first pass only: a chain whose later
    pass mixes the first pass's digits again keeps one block a tile."""
    pats = [(4**k, 4, 4, 4**(5 - k)) for k in range(6)] + [(1, 4, 4, 1024)]
    factors = [ks.KSMatrix.random(p, dtype=numpy.float32).factor for p in reversed(pats)]
    seg = ks_rows.make_row_segment(factors, numpy.float32, "bsl", 65536, max_cluster=16, device=RATES)
    bits = seg.pass_bits
    assert bits[0] == bits[-1] == (10, 12) and seg.cluster == 1, seg.describe()
    with pytest.raises(ValueError, match="no other pass"):
        dataclasses.replace(seg, cluster=4, rank_shift=10)
    with pytest.raises(ValueError, match="no other pass"):        # nor split with the last
        dataclasses.replace(seg, cluster=8, rank_shift=10, last_rank_bits=1)


def test_cluster_segments_are_checked():
    """A cluster needs its rank bits among the first pass's digits (batch-size-last), or
    t's top bits and no gathers (batch-size-first)."""
    H = ks.hadamard(4096, dtype=numpy.float32)
    factors = [K.factor for K in reversed(H.factors)]
    seg = ks_rows.make_row_segment(factors, numpy.float32, "bsl", 65536, max_cluster=1, device=RATES)
    lo, hi = seg.first_pass_bits
    assert (lo, hi) == (0, 5)                   # a first pass of 32 elements
    for bad in (dict(cluster=2, rank_shift=5), dict(cluster=3, rank_shift=0),
                dict(cluster=32, rank_shift=0), dict(cluster=2, rank_shift=-1)):
        with pytest.raises(ValueError, match="cluster"):
            dataclasses.replace(seg, **bad)
    bsf = ks_rows.make_row_segment(factors, numpy.float32, "bsf", 65536, max_cluster=1, device=RATES)
    with pytest.raises(ValueError, match="top bits"):
        dataclasses.replace(bsf, cluster=2, rank_shift=3)
    assert dataclasses.replace(bsf, cluster=2, rank_shift=11).cluster == 2
    with pytest.raises(ValueError, match="no gathers"):
        dataclasses.replace(bsf, cluster=2, rank_shift=11, src=numpy.arange(4096)[::-1])
    assert dataclasses.replace(seg, cluster=4, rank_shift=2).smem_bytes(4) == seg.rows * 1024 * 4


@pytest.mark.parametrize("dtype, n, cluster, rows, last_bits", [
    (numpy.float32, 4096, 8, 32, 1),    # 3 rank bits; the first pass's digits hold 2
    (numpy.complex64, 4096, 8, 16, 1),
    (numpy.float64, 4096, 8, 16, 1),
    (numpy.float32, 16384, 16, 16, 2),  # 64-byte runs: 128-byte ones take 128 KiB a block
    (numpy.float32, 1024, 2, 32, 0),    # the first pass's digits hold them all
])
def test_bsl_rank_bits_past_the_first_pass_go_to_the_last(dtype, n, cluster, rows, last_bits):
    """Batch-size-last stored butterflies whose cluster needs more rank bits than the first
    pass's digits hold (radix-4 passes: 2) put the rest at the top of the last pass's
    digits, so that the tile keeps 128-byte runs of a feature: the low rank bits are all of
    the first pass's digits, the kernel's name carries the count, and the segment checks."""
    chain = ks.butterfly(n, dtype=dtype, seed=1)
    factors = algebra.merge_all([K.factor for K in chain.factors])[::-1]   # application order
    isz = numpy.dtype(dtype).itemsize
    seg = ks_rows.make_row_segment(factors, dtype, "bsl", 2**26 // n, max_cluster=16, device=RATES)
    assert (seg.cluster, seg.rows, seg.last_rank_bits) == (cluster, rows, last_bits), \
        seg.describe()
    assert rows * isz in (ks_rows.BSL_RUN, ks_rows.BSL_RUN // 2)
    (lo, hi), (last_lo, last_hi) = seg.pass_bits[0], seg.pass_bits[-1]
    lcs = cluster.bit_length() - 1
    if last_bits:
        assert (seg.rank_shift, seg.rank_shift + lcs - last_bits) == (lo, hi)
        assert last_hi - last_bits >= last_lo and f"{last_bits} rank bits in the last pass" \
            in seg.describe()
    else:
        assert seg.rank_shift == hi - lcs >= lo
    assert f", {cluster}, {seg.rank_shift}, {last_bits}, ks::Pass<" in seg.name(dtype)
    assert seg.smem_bytes(isz) == rows * n * isz // cluster <= ks_rows.SMEM_TARGET
    # the rank bits elsewhere, or too many for the last pass, do not check
    bad = [dict(last_rank_bits=lcs), dict(rank_shift=hi)]
    if last_bits:
        bad.append(dict(last_rank_bits=0))
    for change in bad:
        with pytest.raises(ValueError, match="cluster"):
            dataclasses.replace(seg, **change)


def test_bsl_split_rank_bits_need_the_last_pass_above_the_first():
    """The rank's high bits lie at the top of the last pass's digits, above the low ones in
    the first pass's: a chain applied from its top digits down (the last pass's digits below
    the first's) keeps its rank bits in the first pass, and a middle pass whose digits hold
    the high bits rules the split out."""
    down = [(4**(5 - k), 4, 4, 4**k) for k in range(5, -1, -1)]   # application order: d falls
    up = down[::-1]
    for pats in (down, up):
        factors = [ks.KSMatrix.random(p, dtype=numpy.float32).factor for p in pats]
        seg = ks_rows.make_row_segment(factors, numpy.float32, "bsl", 2**14, max_cluster=16, device=RATES)
        bits = seg.pass_bits
        assert len(bits) == 6
        if pats is down:
            # 64-byte runs on 4 blocks, the rank bits the first pass's digits
            assert bits[0] == (10, 12) and bits[-1] == (0, 2)
            assert (seg.cluster, seg.rows, seg.rank_shift, seg.last_rank_bits) == (4, 16, 10, 0)
            with pytest.raises(ValueError, match="cluster"):
                dataclasses.replace(seg, cluster=8, rank_shift=10, last_rank_bits=1)
        else:
            assert seg.last_rank_bits == 1 and seg.cluster == 8
            # a middle pass mixes the last pass's digits too
            assert not ks_rows._cluster_fits("bsl", 4096, 8, bits[:-1] + ((10, 12),) * 2, 0, 1)
            assert ks_rows._cluster_fits("bsl", 4096, 8, bits, 0, 1)
            # two passes: the first and the last hold them
            assert ks_rows._cluster_fits("bsl", 4096, 8, ((0, 6), (6, 12)), 4, 1)
            assert not ks_rows._cluster_fits("bsl", 4096, 8, ((0, 6),), 4, 1)
    # batch-size-first keeps its rank bits in one place
    assert not ks_rows._cluster_fits("bsf", 4096, 8, ((0, 6), (6, 12)), 10, 1)


@pytest.mark.parametrize("dtype, n, cluster, rows", [
    (numpy.float32, 4096, 4, 16),       # one block: 4 rows
    (numpy.complex64, 4096, 4, 8),      # one block: 2 rows; 8 blocks would split two passes
    (numpy.float32, 8192, 4, 8),
    (numpy.complex64, 1024, 1, 8),      # one block keeps 8 rows already
    (numpy.float32, 1024, 1, 16),
])
def test_bsf_stored_tiles_of_few_rows_spread_over_clusters(dtype, n, cluster, rows):
    """A batch-size-first tile of stored blocks that keeps at most BSF_CLUSTER_MAX_ROWS rows
    on one block is spread over the smallest cluster whose tiles keep BSF_ROWS rows (else
    the one of the most rows), the rank bits t's top bits, all among the last pass's
    digits; not with a gather, nor for computed stages."""
    chain = ks.butterfly(n, dtype=dtype, seed=1)
    factors = algebra.merge_all([K.factor for K in chain.factors])[::-1]   # application order
    isz = numpy.dtype(dtype).itemsize
    seg = ks_rows.make_row_segment(factors, dtype, "bsf", 2**26 // n, max_cluster=16, device=RATES)
    assert (seg.cluster, seg.rows) == (cluster, rows), seg.describe()
    if cluster > 1:
        lcs = cluster.bit_length() - 1
        assert seg.rank_shift == n.bit_length() - 1 - lcs
        lo, hi = seg.pass_bits[-1]
        assert lo <= seg.rank_shift and hi == n.bit_length() - 1
        assert seg.smem_bytes(isz) == ks_rows.rows_smem(n // cluster, rows, isz, "bsf")
        assert seg.name(dtype).startswith(
            f"ks::ks_rows_cluster<{ks.kernels.nvrtc.scalar_name(dtype)}, {n}, {rows}, ")
        assert f", {cluster}, {seg.rank_shift}, 0, ks::Pass<" in seg.name(dtype)
        # each item walks every row of the tile (its block's items: 1 / cluster of them)
        assert seg.pass_patterns()[-1][2] == rows
        # the layout of a block's share: rows of n / cluster features (whole 128-byte lines
        # here) and one element
        assert seg.tile_layout(isz) == (seg.smem_bytes(isz), n // cluster + 1, 128 // isz)
    one = ks_rows.make_row_segment(factors, dtype, "bsf", 2**26 // n, max_cluster=1, device=RATES)
    assert one.cluster == 1 and (cluster == 1 or one.rows <= ks_rows.BSF_CLUSTER_MAX_ROWS)
    gathered = ks_rows.make_row_segment(factors, dtype, "bsf", 2**26 // n, max_cluster=16,
                                        src=numpy.arange(n)[::-1].copy(), device=RATES)
    assert gathered.cluster == 1
    H = ks.hadamard(n, dtype=dtype)
    computed = ks_rows.make_row_segment([K.factor for K in reversed(H.factors)], dtype, "bsf",
                                        2**26 // n, max_cluster=16, device=RATES)
    assert computed.cluster == 1


@pytest.mark.parametrize("n", [256, 1024, 4096])
def test_last_pass_writes_y_where_its_stores_are_whole_sectors(n):
    """bsf DFT and Hadamard segments (last pass: the largest strides) write Y from their
    last pass, one round trip through shared memory less; an output gather keeps
    store_tile; so does a last pass whose runs are shorter than a sector. A bsl segment's
    first pass reads X and its last writes Y, gathers or not."""
    F = ks.dft(n, dtype=numpy.complex64)
    factors = [K.factor for K in reversed(F.factors)]
    bsf = ks_rows.make_row_segment(factors, numpy.complex64, "bsf", 4096, src=F.input_permutation, device=RATES)
    assert bsf.to_y and bsf.tile_round_trips == len(bsf.passes)
    bsl = ks_rows.make_row_segment(factors, numpy.complex64, "bsl", 4096, src=F.input_permutation, device=RATES)
    assert bsl.to_y and bsl.tile_round_trips == len(bsl.passes) - 1
    perm = numpy.random.default_rng(n).permutation(n)
    scattered = ks_rows.make_row_segment(factors, numpy.complex64, "bsf", 4096, dst=perm, device=RATES)
    assert not scattered.to_y
    assert ks_rows.make_row_segment(factors, numpy.complex64, "bsl", 4096, dst=perm, device=RATES).to_y
    with pytest.raises(ValueError, match="writes Y"):
        dataclasses.replace(bsl, to_y=False)
    H = ks.hadamard(n, dtype=numpy.float32)
    assert ks_rows.make_row_segment([K.factor for K in reversed(H.factors)], numpy.float32,
                                    "bsf", 4096, device=RATES).to_y
    reversed_order = ks_rows.make_row_segment(factors[::-1], numpy.complex64, "bsf", 4096, device=RATES)
    assert not reversed_order.to_y                     # its last pass has d = 1: 8-byte runs
    assert ks_rows.writes_whole_sectors([ks.KSPattern(1, 2, 2, 4)], 8)
    assert not ks_rows.writes_whole_sectors([ks.KSPattern(1, 2, 2, 4)], 4)
    with pytest.raises(ValueError, match="output gather"):
        dataclasses.replace(scattered, to_y=True)


class _Step:
    """A plan step that records what it was prepared for and whether preparing ran it."""
    def __init__(self, features, says=True):
        self.features, self.prepared_for, self.calls = features, [], 0
        if says:
            self.result_features = features

    def prepare(self, X, layout):
        self.prepared_for.append((X.shape, X.dtype))

        def run(X):
            self.calls += 1
            B = X.shape[1] if layout == "bsl" else X.shape[0]
            shape = (self.features, B) if layout == "bsl" else (B, self.features)
            return numpy.full(shape, float(self.features), X.dtype)
        return run


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_a_plan_prepares_its_steps_without_running_them_where_they_say_their_result(
        monkeypatch, layout):
    """ChainPlan.prepare on GPU operands: a step that gives ``result_features`` is not run
    while the plan is prepared (the next one is prepared for an empty array of that shape);
    one that does not is run to meet its result. The prepared run applies every step."""
    from kscupy.engine import steps
    empties = []

    class Device:                                  # the GPU array module, stood in for
        @staticmethod
        def empty(shape, dtype):
            empties.append(shape)
            return numpy.empty(shape, dtype)
    monkeypatch.setattr(steps.arrays, "array_module", lambda X: Device)
    first, second, third = _Step(6), _Step(4, says=False), _Step(3)
    plan = steps.ChainPlan((first, second, third), float("nan"))
    X = numpy.ones((8, 5) if layout == "bsl" else (5, 8), numpy.float32)
    run = plan.prepare(X, layout)
    assert (first.calls, second.calls, third.calls) == (0, 1, 0)
    expected = [(6, 5), (4, 5)] if layout == "bsl" else [(5, 6), (5, 4)]
    assert [s.prepared_for[0][0] for s in (second, third)] == expected
    assert empties == [expected[0]]
    Y = run(X)
    assert Y.shape == ((3, 5) if layout == "bsl" else (5, 3)) and (Y == 3).all()
    assert (first.calls, second.calls, third.calls) == (1, 2, 1)


def test_a_plan_keeps_its_gpu_runs_for_every_copy_that_shares_it(monkeypatch):
    """ChainPlan.prepare keeps one run per operand signature and compiled kernels: a copy of
    a chain, handed the same plan by the planner's table, finds its first run prepared.
    Driven on the CPU with an operand that looks like a CuPy array to the plan."""
    import types
    from kscupy.kernels import nvrtc
    gpu = types.ModuleType("gpu")
    monkeypatch.setattr(steps.arrays, "array_module", lambda X: gpu)
    prepared = []

    class Step:
        def prepare(self, X, layout):
            prepared.append(layout)
            return lambda X: X

    def operand(ptr=256, device=0):
        return types.SimpleNamespace(shape=(8, 4), strides=(16, 4), dtype=numpy.dtype("f4"),
                                     data=types.SimpleNamespace(ptr=ptr),
                                     device=types.SimpleNamespace(id=device))
    plan = steps.ChainPlan((Step(),), float("nan"))
    run = plan.prepare(operand(), "bsl")
    assert plan.prepare(operand(512), "bsl") is run and len(prepared) == 1   # alike
    assert plan.prepare(operand(260), "bsl") is not run                      # other alignment
    assert plan.prepare(operand(), "bsf") is not run and len(prepared) == 3
    assert plan.prepare(operand(device=1), "bsl") is not run                 # another GPU
    kept = len(plan._runs)
    monkeypatch.setattr(nvrtc, "compiles_finished", nvrtc.compiles_finished + 1)
    assert plan.prepare(operand(), "bsl") is not run                          # a kernel compiled
    assert len(plan._runs) == kept                                           # in the old's place
    other = dataclasses.replace(plan)                                         # runs of its own
    other.prepare(operand(), "bsl")
    assert len(prepared) == 6
