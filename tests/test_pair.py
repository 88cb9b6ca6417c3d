"""The fused pair of factors (kscupy/kernels/ks_pair.py) on the host: the order its weights
are packed in (against the definition of the m16n8k8 TF32 fragments, element by element),
its shared-memory layout, when it applies, and the planner's use of it. The kernel itself
runs in tests/gpu/test_chain_pair.py."""
import dataclasses

import numpy
import pytest

import kscupy as ks
from kscupy.core import device
from kscupy.engine import planner
from kscupy.engine.costs import gpu as gpu_costs
from kscupy.kernels import ks_pair
from kscupy.core.pattern import KSPattern

#: An H100's rates (132 SMs at 1.98 GHz, 3.35 TB/s)
H100 = dataclasses.replace(device.H200, bandwidth=3.35e12, flops32=6.69e13, flops64=3.35e13,
                         name="NVIDIA H100 80GB HBM3", cuda_runtime=13020, memory=80 * 2**30)


def _factor(pattern, transposed=False, seed=1):
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, seed=seed)
    return (K.T if transposed else K).factor


@pytest.mark.parametrize("precision", ["default", "tf32"])
@pytest.mark.parametrize("row_tiles", [1, 2])
@pytest.mark.parametrize("transposed", [False, True])
def test_fragment_weights_follow_the_mma_layout(precision, row_tiles, transposed):
    """Element (u, s, m, p, lane, r): part p of W[g](rows·kt + 16 m + lane / 4 + 8 (r % 2),
    8 s + lane % 4 + 4 (r / 2)), u = g·ktiles + kt, zero past the block; for 3xTF32 the big
    part a TF32 value (13 low bits clear) and big + small the weight exactly."""
    f = _factor((2, 20, 12, 3), transposed)
    F = ks_pair.fragment_weights(f, row_tiles, precision)
    a, b, c, d = f.pattern
    rows = 16 * row_tiles
    ktiles, steps = -(-b // rows), -(-c // 8)
    assert F.shape == (a * d * ktiles, steps, row_tiles, 2 if precision == "default" else 1, 32, 4)
    blocks = f.blocks.reshape(a * d, b, c)
    u, s, m, lane, r = numpy.meshgrid(numpy.arange(a * d * ktiles), numpy.arange(steps),
                                      numpy.arange(row_tiles), numpy.arange(32),
                                      numpy.arange(4), indexing="ij")
    g, kt = u // ktiles, u % ktiles
    k = rows * kt + 16 * m + lane // 4 + 8 * (r % 2)
    l = 8 * s + lane % 4 + 4 * (r // 2)
    inside = (k < b) & (l < c)
    want = numpy.where(inside, blocks[g, numpy.minimum(k, b - 1), numpy.minimum(l, c - 1)], 0)
    big = F[:, :, :, 0]
    if precision == "default":
        assert not (big.view(numpy.uint32) & 0x1fff).any()
        assert numpy.array_equal(big + F[:, :, :, 1], want)
    else:
        assert numpy.allclose(big, want, rtol=2**-10, atol=0)


def test_layouts_keep_the_tiles_apart():
    """Z never overlaps X or Y (Y goes over X, dead by then); square blocks that one unit
    covers share one tile; rows padded to 16 bytes; the fragment reads of a tile whose
    reduction runs along contiguous features spread over every bank."""
    bottleneck = (KSPattern(2, 48, 192, 1), KSPattern(1, 192, 48, 2))   # 384 -> 96 -> 384

    def extent(features, strides, columns=64):     # elements from a tile's start to its end
        return (features - 1) * strides[0] + (columns - 1) * strides[1] + 1
    for layout in ("bsf", "bsl"):
        L = ks_pair.pair_layout(bottleneck, 64, layout, 2)
        assert L.z_at >= max(extent(384, L.x), extent(384, L.y))
        assert L.elements >= L.z_at + extent(96, L.z)
        assert all(v % 4 == 0 or v == 1 for v in L.x + L.z + L.y)
    monarch = (KSPattern(32, 32, 32, 1), KSPattern(1, 32, 32, 32))
    assert ks_pair.in_place(monarch, 2) and not ks_pair.in_place(monarch, 1)
    assert not ks_pair.in_place(bottleneck, 2)
    L = ks_pair.pair_layout(monarch, 32, "bsf", 2)
    assert L.z_at == 0 and L.x == L.z == L.y
    assert ks_pair._fragment_wavefronts(*L.x, (1,), ()) == 1


def test_where_the_pair_applies():
    f = [_factor((32, 32, 32, 1)), _factor((1, 32, 32, 32))]
    segment = ks_pair.make_pair_segment(f, numpy.float32, "bsf")
    assert (segment.columns, segment.row_tiles, segment.warps) == (32, 2, 8)
    assert segment.smem.bytes <= ks_pair.SMEM_MAX
    assert segment.name("default", 4, 4) == "ks::ks_pair<0, 32, 8, false, 4, 4, 2, false>"
    assert ks_pair.make_pair_segment(f, numpy.float64, "bsf") is None
    assert ks_pair.make_pair_segment(f + [_factor((32, 32, 32, 1))], numpy.float32, "bsf") is None
    big = [_factor((64, 64, 64, 1)), _factor((1, 64, 64, 64))]       # no 8-column tile fits
    assert ks_pair.make_pair_segment(big, numpy.float32, "bsl") is None
    stages = [_factor((4, 2, 2, 8)), _factor((8, 2, 2, 4))]        # smaller than an MMA tile
    assert ks_pair.make_pair_segment(stages, numpy.float32, "bsf") is None
    ragged = [_factor((3, 20, 12, 2)), _factor((2, 9, 30, 2))]
    segment = ks_pair.make_pair_segment(ragged, numpy.float32, "bsl")
    assert segment.masked and segment.row_tiles == 1


def test_planner_weighs_pairs(monkeypatch):
    """The model plans Monarch(1024) in batch-size-first as one pair on an H100's rates, and
    a pair priced out of reach never."""
    M = ks.monarch(1024, dtype=numpy.float32, seed=2)
    plan = planner.plan(M.factor_chain, "bsf", numpy.float32, 25088, device=H100)
    assert [type(s) for s in plan.steps] == [ks_pair.PairSegment], plan.describe()
    assert "pair" in plan.describe()
    monkeypatch.setattr(gpu_costs, "pair_seconds", lambda *args: float("inf"))
    plan = planner.plan(M.factor_chain, "bsf", numpy.float32, 25088, device=H100)
    assert not any(isinstance(s, ks_pair.PairSegment) for s in plan.steps)
