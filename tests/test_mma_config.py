"""CPU tests of the tensor-core kernel's configurations (kscupy/kernels/ks_mma.py): every
configuration the heuristic or the tuner can pick is launchable, and the names and layout
arithmetic follow the kernel's template."""
import dataclasses
import itertools

import numpy
import pytest

from kscupy import KSPattern
from kscupy.kernels import ks_mma
from kscupy.kernels.ks_mma import MmaConfig
from kscupy.core.problem import Problem

DTYPES = [numpy.float32, numpy.float64, numpy.complex64, numpy.complex128]


def _problem(pattern, B, dtype, layout="bsl", contiguous=True, transposed=False):
    return Problem(KSPattern(*pattern), B, numpy.dtype(dtype), layout, contiguous, transposed)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_picked_configuration_is_launchable(dtype):
    sizes = [1, 3, 16, 48, 100, 1024]
    for (a, b, c, d), B, (layout, contiguous), transposed in itertools.product(
            itertools.product([1, 5], sizes, sizes, [1, 2, 3, 64]), [1, 127, 25088],
            [("bsl", True), ("bsf", False), ("bsl", False)], (False, True)):
        p = _problem((a, b, c, d), B, dtype, layout, contiguous, transposed)
        for cfg in [ks_mma.heuristic_config(p)] + ks_mma.candidate_configs(p):
            assert cfg.valid_for(dtype), (p, cfg)
            assert cfg.fits(p.itemsize, transposed), (p, cfg)
            assert 32 <= cfg.threads <= 1024


def test_heuristic_walks_the_contiguous_axis():
    assert ks_mma.heuristic_config(_problem((1, 256, 256, 1), 25088, "float32")).order == 0
    assert ks_mma.heuristic_config(_problem((1, 256, 256, 1), 25088, "float32", "bsf",
                                            False)).order == 2
    group = ks_mma.heuristic_config(_problem((4, 64, 64, 16), 25088, "float32", "bsf", False))
    assert group.order == 1 and group.slots == 8
    # rows per tile waste the fewest padded rows
    assert ks_mma.heuristic_config(_problem((1, 48, 48, 1), 25088, "float32")).bm == 48
    assert ks_mma.heuristic_config(_problem((1, 1024, 1024, 1), 25088, "float32")).bm == 128
    # float64 takes one 48-row warp where it saves tiles (b = 48: one tile, not three of 16),
    # never where 64-row tiles waste nothing
    tall = ks_mma.heuristic_config(_problem((1, 48, 192, 128), 8192, "float64"))
    assert (tall.bm, tall.wm, tall.wn) == (48, 1, 4)
    assert ks_mma.heuristic_config(_problem((1, 192, 768, 4), 8192, "float64")).bm == 64
    assert ks_mma.heuristic_config(_problem((1, 48, 192, 128), 8192, "complex128")).bm == 16


def test_float32_group_order_widens_its_warp_pieces_for_long_batches():
    """64-column warp pieces (the kernel's row sums, NTL >= 8) from _LONG_BATCH on,
    with chunks of 8; the 64 x 32 pieces with chunks of 16 below it and for other dtypes;
    the tuner tries the other width either way."""
    for B, width, chunk in ((ks_mma._LONG_BATCH, 64, 8),
                            (ks_mma._LONG_BATCH - 1, 32, 16)):
        p = _problem((1, 256, 256, 16), B, "float32", "bsf", False)
        cfg = ks_mma.heuristic_config(p)
        assert (cfg.order, cfg.bn // cfg.wn, cfg.bk) == (1, width, chunk)
        widths = {(c.bn // c.wn, c.bk) for c in ks_mma.candidate_configs(p) if c.slots == 8}
        assert {(32, 16), (64, 8)} <= widths
    p = _problem((1, 256, 256, 16), 25088, "complex64", "bsf", False)
    assert ks_mma.heuristic_config(p).bn // ks_mma.heuristic_config(p).wn == 32


def test_small_16_bit_blocks_are_also_tried_four_to_an_sm():
    """The tuner tries the 16-bit 128-thread blocks of the batch and in-group orders with
    launch bounds of four blocks per SM (128 registers a thread; the heuristic's take more,
    and three share an SM), with stages cut until four fit the shared memory; no other
    block (their tiles spill at 128 registers: tests/test_kernel_resources.py)."""
    tried = 0
    for pattern, layout in [((1, 96, 96, 2), "bsl"), ((1, 64, 64, 3), "bsl"),
                            ((2, 48, 40, 1), "bsf"), ((1, 64, 64, 3), "bsf"),
                            ((1, 1024, 1024, 1), "bsl")]:
        for dtype in (numpy.float16, numpy.float32):
            p = _problem(pattern, 25088, dtype, layout, contiguous=layout == "bsl")
            base = ks_mma.heuristic_config(p)
            four = [c for c in ks_mma.candidate_configs(p) if c.min_blocks == 4]
            expected = dtype == numpy.float16 and base.threads == 128 and \
                base.order != ks_mma.ORDER_GROUP
            assert bool(four) == expected, (pattern, layout, dtype, base)
            tried += len(four)
            for cfg in four:
                assert cfg.threads == 128 and cfg.fits(p.itemsize), (pattern, cfg)
                assert cfg.name(dtype, "default", False, 1, 1).endswith(", 4>")
    assert tried >= 2


def test_config_validation_and_names():
    with pytest.raises(ValueError, match="divide"):
        MmaConfig(1, 100, 128, 32, 3, 4, 3, 0)
    with pytest.raises(ValueError, match="threads"):
        MmaConfig(8, 128, 128, 32, 2, 4, 3, 1)
    with pytest.raises(ValueError, match="order"):
        MmaConfig(1, 64, 64, 32, 1, 2, 3, 5)
    with pytest.raises(ValueError, match="stages"):
        MmaConfig(1, 64, 64, 32, 1, 2, 1, 0)
    with pytest.raises(ValueError, match="min_blocks"):
        MmaConfig(1, 64, 64, 32, 1, 2, 3, 0, min_blocks=3)
    cfg = MmaConfig(1, 128, 128, 32, 2, 4, 3, 0)
    assert cfg.threads == 256
    assert cfg.name(numpy.float32, "default", False, 4, 4) == \
        "ks::ks_mma<float, 0, 1, 128, 128, 32, 2, 4, 3, 0, 0, 4, 4, 1>"
    assert cfg.name(numpy.complex64, "tf32", True, 1, 2) == \
        "ks::ks_mma<ks::cplx<float>, 1, 1, 128, 128, 32, 2, 4, 3, 0, 1, 1, 2, 1>"
    assert cfg.layout_probe_name(numpy.float64, True) == \
        "ks::ks_mma_layout<double, 1, 128, 128, 32, 2, 4, 3, 0, 1>"
    # 16 x 8 x 8 TF32 and DMMA tiles do not split an 8-row warp piece; 16 rows they do
    thin = MmaConfig(1, 8, 32, 16, 1, 1, 2, 0)
    assert not thin.valid_for(numpy.float32) and not thin.valid_for(numpy.float64)
    assert MmaConfig(1, 16, 32, 16, 1, 1, 2, 0).valid_for(numpy.float64)


def test_weights_are_packed_in_the_group_order_but_for_stored_float32():
    """WT: ks_mma.cu's group order reads packed weights for transposed views and every dtype
    but float32, whose stored blocks it reads as they are; the other orders read the storage
    as it is. Packed weights sit in shared memory as stored blocks do. The float32 group
    order's own kernel (ks_mma_group.cu: one warp per group, 64 or more batch columns) reads
    every view by bulk copies of packed weights, in chunks of 8."""
    group = MmaConfig(8, 64, 32, 8, 1, 1, 3, ks_mma.ORDER_GROUP)
    batch = MmaConfig(1, 128, 128, 32, 2, 4, 3, ks_mma.ORDER_BATCH)
    assert group.weights(numpy.float32, False) == ks_mma.W_STORED
    for dtype, transposed in itertools.product(DTYPES, (False, True)):
        if dtype != numpy.float32 or transposed:
            assert group.weights(dtype, transposed) == ks_mma.W_PACKED, (dtype, transposed)
        assert batch.weights(dtype, transposed) == (ks_mma.W_TRANSPOSED if transposed
                                                    else ks_mma.W_STORED)
        assert group.smem_bytes(numpy.dtype(dtype).itemsize, transposed) == \
            group.smem_bytes(numpy.dtype(dtype).itemsize, False)
    assert group.name(numpy.float32, "default", False, 4, 4) == \
        "ks::ks_mma<float, 0, 8, 64, 32, 8, 1, 1, 3, 1, 0, 4, 4, 1>"
    assert group.layout_probe_name(numpy.float64, False).endswith(", 1, 2>")
    lean = dataclasses.replace(group, bn=64)
    for transposed in (False, True):
        assert lean.weights(numpy.float32, transposed) == ks_mma.W_BULK
        assert lean.source(numpy.float32, "default", transposed, 4, 4) == \
            ("ks_mma_group.cu", "ks::ks_mma_group<float, 0, 8, 64, 64, 8, 3, 3, 4, 4, false, 0>")
    # X by cp.async in 48-row tiles of eight slots with four-group vectors (float32 only)
    assert dataclasses.replace(lean, bm=48).name(numpy.float32, "tf32", False, 4, 4) == \
        "ks::ks_mma_group<float, 1, 8, 48, 64, 8, 3, 3, 4, 4, true, 0>"
    assert dataclasses.replace(lean, bm=48).name(numpy.float32, "tf32", False, 2, 4) == \
        "ks::ks_mma_group<float, 1, 8, 48, 64, 8, 3, 3, 2, 4, false, 0>"
    # float16: the group kernel in chunks of 16 (bulk W, 32-byte rows; X through the ring a
    # step ahead, X_LEAD_HALF), ks_mma.cu in others
    lean16 = dataclasses.replace(lean, bk=16)
    for transposed in (False, True):
        assert lean16.weights(numpy.float16, transposed) == ks_mma.W_BULK
        assert lean16.name(numpy.float16, "default", transposed, 4, 8) == \
            "ks::ks_mma_group<ks::float16, 0, 8, 64, 64, 16, 3, 3, 4, 8, false, 1>"
    assert dataclasses.replace(lean16, bm=48).name(numpy.float16, "default", False, 4, 8) == \
        "ks::ks_mma_group<ks::float16, 0, 8, 48, 64, 16, 3, 3, 4, 8, false, 1>"
    assert not lean.lean_group(numpy.float16) and lean.weights(numpy.float16, False) == \
        ks_mma.W_PACKED
    assert lean.source(numpy.float16, "default", False, 4, 8)[0] == "ks_mma.cu"
    assert lean.source(numpy.float64, "default", True, 2, 2) == \
        ("ks_mma.cu", "ks::ks_mma<double, 0, 8, 64, 64, 8, 1, 1, 3, 1, 2, 2, 2, 1>")
    # packed weights are copied bk values a row from a new array, whatever the storage's
    # alignment (a misaligned float64 storage narrows the stored weights' copies to 1)
    factor, X = _launch_operands((2, 64, 64, 16), numpy.float64)
    factor.tiles.data.ptr += 8
    M, N = KSPattern(2, 64, 64, 16).shape
    assert ks_mma.copy_vectors(group, factor, X, (1, N, 1, M), 1000)[1] == 2
    stored = MmaConfig(1, 64, 128, 16, 1, 4, 3, ks_mma.ORDER_BATCH)
    assert ks_mma.copy_vectors(stored, factor, X, (1000, 1, 1000, 1), 1000)[1] == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_packed_weights_follow_their_definition(dtype):
    """ks_mma.packed_weights (NumPy factors; the GPU suite compares CuPy's with these)
    against its definition, element by element: element (gt, kt, t, s, k, l) is element
    (kt*bm + k, t*bk + l) of group gt*slots + s's block of the view (stored or transposed; a
    conjugated view's values unconjugated), zero beyond the groups, rows and reduction. The
    factor's cache keeps the most recently used PACKED_LAYOUTS layouts."""
    import dataclasses
    import kscupy as ks
    rng = numpy.random.default_rng(5)
    config = MmaConfig(slots=4, bm=16, bn=32, bk=8, wm=1, wn=1, stages=2,
                       order=ks_mma.ORDER_GROUP)
    for pattern in ((3, 20, 12, 2), (1, 64, 48, 5)):
        a, d = pattern[0], pattern[3]
        values = rng.standard_normal(pattern)
        if numpy.dtype(dtype).kind == "c":
            values = values + 1j * rng.standard_normal(pattern)
        values = values.astype(dtype)
        K = ks.KSMatrix(values)
        stored = values.transpose(0, 3, 1, 2)           # (a, d, b0, c0): group (i, j)'s block
        for view, blocks in ((K, stored), (K.T, stored.swapaxes(-1, -2)),
                             (K.H, stored.swapaxes(-1, -2))):
            got = ks_mma.packed_weights(view.factor, config)
            groups, b, c = a * d, blocks.shape[2], blocks.shape[3]
            assert got.shape == (-(-groups // 4), -(-b // 16), -(-c // 8), 4, 16, 8)
            expected = numpy.zeros(got.shape, dtype)
            for g, k, l in itertools.product(range(groups), range(b), range(c)):
                expected[g // 4, k // 16, l // 8, g % 4, k % 16, l % 8] = \
                    blocks[g // d, g % d, k, l]
            assert numpy.array_equal(got, expected), (pattern, view.shape)
            assert ks_mma.packed_weights(view.factor, config) is got   # kept
        held = K.factor.cache["packed weights"]
        oldest = next(iter(held))
        for bk in (16, 24, 32, 40):
            ks_mma.packed_weights(K.factor, dataclasses.replace(config, bk=bk))
        assert len(held) == ks_mma.PACKED_LAYOUTS and oldest not in held


def test_bulk_packed_weights_swap_the_halves_of_rows():
    """W_BULK (ks_mma_group.cu's bulk copies, tiles of 64 batch columns and rows of 32 bytes:
    float32 chunks of 8, float16 chunks of 16): the packed layout with the two 16-byte halves
    of row k swapped where k // 4 is odd, element by element; the other dtypes and chunks
    keep W_PACKED's layout."""
    import kscupy as ks
    rng = numpy.random.default_rng(9)
    bulk = MmaConfig(slots=4, bm=16, bn=64, bk=8, wm=1, wn=1, stages=2, order=ks_mma.ORDER_GROUP)
    values = rng.standard_normal((2, 20, 12, 3)).astype(numpy.float32)
    K = ks.KSMatrix(values)
    for view in (K, K.T):
        assert bulk.weights(numpy.float32, view.factor.transposed) == ks_mma.W_BULK
        got = ks_mma.packed_weights(view.factor, bulk)
        plain = ks_mma.packed_weights(view.factor, dataclasses.replace(bulk, bn=32))
        assert got.shape == plain.shape and got is not plain
        for k, l in itertools.product(range(16), range(8)):
            swapped = l ^ 4 if (k // 4) % 2 else l
            assert numpy.array_equal(got[..., k, swapped], plain[..., k, l]), (k, l)
    assert bulk.weights(numpy.float64, False) == ks_mma.W_PACKED
    assert dataclasses.replace(bulk, bk=16).weights(numpy.float32, False) == ks_mma.W_STORED
    # two stages of X [4][64][8 + 4] and W [4][16][8 + 4], then an mbarrier per stage
    assert bulk.smem_bytes(4) == 2 * 4 * (4 * 64 * 12 + 4 * 16 * 12) + 2 * 8
    # float16 in chunks of 16: the two 8-element halves of each 32-byte row
    bulk16 = dataclasses.replace(bulk, bk=16)
    K16 = ks.KSMatrix(values.astype(numpy.float16))
    for view in (K16, K16.T):
        assert bulk16.weights(numpy.float16, view.factor.transposed) == ks_mma.W_BULK
        got = ks_mma.packed_weights(view.factor, bulk16)
        plain = ks_mma.packed_weights(view.factor, dataclasses.replace(bulk16, bn=32))
        assert got.shape == plain.shape and got.dtype == numpy.float16
        for k, l in itertools.product(range(16), range(16)):
            swapped = l ^ 8 if (k // 4) % 2 else l
            assert numpy.array_equal(got[..., k, swapped], plain[..., k, l]), (k, l)
    # two stages of X [4][64][16 + 8] and W [4][16][16 + 8] float16, an mbarrier per stage
    assert bulk16.smem_bytes(2) == 2 * 2 * (4 * 64 * 24 + 4 * 16 * 24) + 2 * 8


def test_layout_arithmetic():
    """SMEM_BYTES by hand for one configuration: 3 stages of X [32][128 + 8] and
    W [128][32 + 4] float32 (batch-size-last, stored weights)."""
    cfg = MmaConfig(1, 128, 128, 32, 2, 4, 3, 0)
    assert cfg.smem_bytes(4) == 3 * 4 * (32 * 136 + 128 * 36)
    # transposed weights: W [32][128 + 8]; complex128 pads rows by 2 elements
    assert cfg.smem_bytes(4, transposed=True) == 3 * 4 * (32 * 136 + 32 * 136)
    assert cfg.layout(16) == (3 * 16 * (32 * 130 + 128 * 36), 256, 130, 36)


def test_supports():
    assert ks_mma.supports(numpy.float32) and ks_mma.supports(numpy.complex128)
    assert ks_mma.supports(numpy.complex64, "tf32")
    assert not ks_mma.supports(numpy.float64, "tf32")
    assert ks_mma.supports(numpy.float16) and not ks_mma.supports(numpy.float16, "tf32")
    assert not ks_mma.supports(numpy.int32)


def _launch_operands(pattern, dtype, x_offset=0, transposed=False):
    """Stand-ins for a Factor and an X with the attributes copy_vectors reads."""
    from types import SimpleNamespace
    itemsize = numpy.dtype(dtype).itemsize
    factor = SimpleNamespace(pattern=KSPattern(*pattern), transposed=transposed,
                             tiles=SimpleNamespace(data=SimpleNamespace(ptr=1 << 20)))
    X = SimpleNamespace(dtype=numpy.dtype(dtype),
                        data=SimpleNamespace(ptr=(1 << 20) + x_offset * itemsize))
    return factor, X


def test_copy_vectors_follow_alignment_and_contiguity():
    group = MmaConfig(8, 64, 32, 16, 1, 1, 3, ks_mma.ORDER_GROUP)
    pattern = (2, 64, 64, 16)
    M, N = KSPattern(*pattern).shape
    factor, X = _launch_operands(pattern, numpy.float32)
    # batch-size-first, C-contiguous: four adjacent groups per 16-byte copy
    assert ks_mma.copy_vectors(group, factor, X, (1, N, 1, M), 1000) == (4, 4)
    # the same order for a batch-size-last X in Fortran order: Y's groups are not adjacent
    # (sy_f = B), so the staged epilogue may not store vectors
    assert ks_mma.copy_vectors(group, factor, X, (1, N, 1000, 1), 1000)[0] == 1
    # a misaligned base or a run of groups not divisible by the vector narrows it
    _, shifted = _launch_operands(pattern, numpy.float32, x_offset=2)
    assert ks_mma.copy_vectors(group, factor, shifted, (1, N, 1, M), 1000)[0] == 2
    odd = (2, 64, 64, 6)
    factor6, X6 = _launch_operands(odd, numpy.float32)
    M6, N6 = KSPattern(*odd).shape
    assert ks_mma.copy_vectors(group, factor6, X6, (1, N6, 1, M6), 1000)[0] == 2
    # never more groups than the block holds
    two = MmaConfig(2, 64, 64, 16, 1, 2, 3, ks_mma.ORDER_GROUP)
    assert ks_mma.copy_vectors(two, factor, X, (1, N, 1, M), 1000)[0] == 2
    # batch order: along the batch, only when it is contiguous
    batch = MmaConfig(1, 64, 128, 32, 1, 4, 3, ks_mma.ORDER_BATCH)
    assert ks_mma.copy_vectors(batch, factor, X, (1000, 1, 1000, 1), 1000)[0] == 4
    assert ks_mma.copy_vectors(batch, factor, X, (1000, 1, 1000, 1), 1001)[0] == 1
    assert ks_mma.copy_vectors(batch, factor, X, (1, N, 1000, 1), 1000)[0] == 1


def test_division_magic():
    """The kernels' division by d (Divider, ks_tiles.cuh): the high 64 bits of n * m are
    n // d for every n < 2^32, d = 1 passing n through."""
    from kscupy.kernels.operands import division_magic
    rng = numpy.random.default_rng(5)
    divisors = [1, 2, 3, 5, 7, 48, 64, 96, 1000, 2**20 + 1, 2**31 - 1] + \
        [int(v) for v in rng.integers(2, 2**31, 200)]
    for d in divisors:
        m = division_magic(d)
        for n in [0, 1, d - 1, d, d + 1, 2**31 - 1, 2**32 - 1] + \
                [int(v) for v in rng.integers(0, 2**32, 50)]:
            q = n if d == 1 else (n * m) >> 64
            assert q == n // d, (n, d)


def test_float32_group_order_slots_and_stages():
    """float32 in the group order, batch-size-first: for batches of 8192 and more and blocks
    of 32768 values or more, no more than an eighth of a block's slots are empty (where the
    power of two below d would leave more, the largest power of two dividing a * d is
    taken), and blocks of four groups or fewer take two stages; elsewhere the slots are the
    power of two below d (at most 8 and a * d rounded up) and three stages."""
    def default_slots(a, d):
        return min(1 << (d.bit_length() - 1), 1 << max(0, a * d - 1).bit_length(), 8)

    seen = set()
    for a, (b, c), d, B in itertools.product([1, 2, 3, 7, 63], [(1024, 256), (256, 64), (48, 48),
                                                                (128, 256), (96, 384)],
                                             [2, 3, 4, 6, 7, 12, 16, 24], [4096, 8191, 8192, 25088]):
        p = _problem((a, b, c, d), B, numpy.float32, "bsf", False)
        cfg = ks_mma.heuristic_config(p)
        groups, long_batch = a * d, B >= 8192
        empty = -(-groups // cfg.slots) * cfg.slots - groups
        if long_batch and b * c >= 32768:
            assert 8 * empty <= groups, (a, b, c, d, B, cfg)
            assert cfg.slots in (default_slots(a, d), groups & -groups)
        else:
            assert cfg.slots == default_slots(a, d), (a, b, c, d, B, cfg)
        assert cfg.stages == (2 if long_batch and cfg.slots <= 4 else 3), (a, b, c, d, B, cfg)
        seen.add(cfg.slots != default_slots(a, d))
    assert seen == {True, False}          # the sweep reaches both sides of the rule
    # the measured cases: a = 1 with d = 3, 6, 12 at B = 25088
    for pattern, slots in [((1, 1024, 256, 3), 1), ((1, 512, 512, 6), 2), ((1, 384, 384, 12), 4),
                           ((1, 256, 64, 3), 2), ((63, 128, 256, 3), 2)]:
        cfg = ks_mma.heuristic_config(_problem(pattern, 25088, numpy.float32, "bsf", False))
        assert cfg.slots == slots, (pattern, cfg)
    # other dtypes and layouts keep their own rules
    p = _problem((1, 1024, 256, 3), 25088, numpy.complex64, "bsf", False)
    assert ks_mma.heuristic_config(p).stages == 3
    p = _problem((1, 1024, 256, 3), 25088, numpy.float32, "bsl", True)
    assert ks_mma.heuristic_config(p).order == ks_mma.ORDER_BATCH
