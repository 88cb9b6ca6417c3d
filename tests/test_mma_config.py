"""CPU tests of the tensor-core kernel's configurations (kscupy/kernels/ks_mma.py): every
configuration the heuristic or the tuner can pick is launchable, and the names and layout
arithmetic follow the kernel's template."""
import itertools

import numpy
import pytest

from kscupy import KSPattern
from kscupy.kernels import ks_mma
from kscupy.kernels.ks_mma import MmaConfig
from kscupy.problem import Problem

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
    """64-column warp pieces (the kernel's row sums, NTL >= 8) from _WIDE_GROUP_BATCH on,
    with chunks of 8; the 64 x 32 pieces with chunks of 16 below it and for other dtypes;
    the tuner tries the other width either way."""
    for B, width, chunk in ((ks_mma._WIDE_GROUP_BATCH, 64, 8),
                            (ks_mma._WIDE_GROUP_BATCH - 1, 32, 16)):
        p = _problem((1, 256, 256, 16), B, "float32", "bsf", False)
        cfg = ks_mma.heuristic_config(p)
        assert (cfg.order, cfg.bn // cfg.wn, cfg.bk) == (1, width, chunk)
        widths = {(c.bn // c.wn, c.bk) for c in ks_mma.candidate_configs(p) if c.slots == 8}
        assert {(32, 16), (64, 8)} <= widths
    p = _problem((1, 256, 256, 16), 25088, "complex64", "bsf", False)
    assert ks_mma.heuristic_config(p).bn // ks_mma.heuristic_config(p).wn == 32


def test_config_validation_and_names():
    with pytest.raises(ValueError, match="divide"):
        MmaConfig(1, 100, 128, 32, 3, 4, 3, 0)
    with pytest.raises(ValueError, match="threads"):
        MmaConfig(8, 128, 128, 32, 2, 4, 3, 1)
    with pytest.raises(ValueError, match="order"):
        MmaConfig(1, 64, 64, 32, 1, 2, 3, 5)
    with pytest.raises(ValueError, match="stages"):
        MmaConfig(1, 64, 64, 32, 1, 2, 1, 0)
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


def test_float32_group_order_slots_divide_the_groups():
    """float32 in the group order takes as many adjacent groups a block as divide a * d (up
    to 8 and the power of two below d) where its blocks hold 32768 values or more, so that
    no tile holds empty slots; blocks of four groups or fewer take two stages for long
    batches."""
    for pattern, B, slots, stages in [((1, 1024, 256, 3), 25088, 1, 2),
                                      ((1, 256, 64, 3), 25088, 2, 2),
                                      ((1, 48, 48, 6), 25088, 4, 2),
                                      ((1, 512, 512, 6), 25088, 2, 2),
                                      ((1, 384, 384, 12), 25088, 4, 2),
                                      ((4, 256, 256, 12), 25088, 8, 3),
                                      ((1, 1024, 256, 32), 25088, 8, 3),
                                      ((6, 384, 96, 4), 25088, 4, 2),
                                      ((6, 384, 96, 4), 4096, 4, 3),
                                      ((3, 256, 128, 12), 4096, 4, 3),
                                      ((3, 128, 128, 12), 4096, 8, 3)]:
        p = _problem(pattern, B, numpy.float32, "bsf", False)
        cfg = ks_mma.heuristic_config(p)
        assert (cfg.slots, cfg.stages) == (slots, stages), (pattern, B, cfg)
        a, b, c, d = pattern
        assert a * d % cfg.slots == 0 or b * c < 32768
