"""The fused pair kernel family (``kernels_cu/ks_pair.cu``): two consecutive factors of a
chain in one launch on the tensor cores, the intermediate kept in shared memory.

A :class:`PairSegment` is what a chain plan runs: its two factors (in application order),
the tile (``columns`` batch columns per block, with all the features of X, the intermediate
Z and Y), the warps of a block and the shared-memory layout (:class:`PairLayout`). It
applies to float32 factors (3xTF32 products, float32-grade accuracy, as the single-factor
tensor-core kernel) whose tile of 8 columns fits in shared memory
(:func:`make_pair_segment` returns None otherwise). Every block reads both factors' weights
from L2 once, so the pair pays where the weights are small next to the batch tile's data
(two-factor layers up to about 2048 features); :func:`kscupy.engine.costs.gpu.pair_seconds`
prices it for the planner.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy

from ..core import device as devices
from . import nvrtc
from .launcher import KernelRun, Launcher

__all__ = ["PairSegment", "PairLayout", "make_pair_segment", "pair_layout", "fragment_weights",
           "PRECISIONS", "SMEM_MAX", "COLUMNS"]

#: Shared memory a block may use (less where a block may have less:
#: DeviceFacts.smem_per_block).
SMEM_MAX = 200 * 1024
#: Batch columns a block may take (multiples of the MMA tile's 8), the most that fit first:
#: each block reads both factors' weights, so wider tiles read them less often, and one
#: block of 8 warps an SM was faster than two or three narrower ones, or than 16 warps.
COLUMNS = (64, 32, 16, 8)
#: Warps of a block.
WARPS = 8
#: Blocks with a side below this leave most of each 16 x 8 x 8 product padding; chains of
#: them (FFT, Hadamard, butterfly stages) run on the whole-vector kernel (ks_rows), and
#: weighing pairs of them only costs planning time.
MIN_BLOCK_SIDE = 8
#: Precision names and the kernel's PRECISION argument (ks_tensor_core.cuh).
PRECISIONS = {"default": 0, "tf32": 1}


@dataclasses.dataclass(frozen=True)
class PairLayout:
    """Shared memory of a block in elements: tile element (t, n) of X at ``t·x[0] + n·x[1]``,
    of Z at ``z_at + t·z[0] + n·z[1]``, of Y at ``t·y[0] + n·y[1]`` (Y over X: X is dead once
    Z is complete); ``elements`` in all."""
    x: tuple
    z_at: int
    z: tuple
    y: tuple
    elements: int

    @property
    def bytes(self) -> int:
        return 4 * self.elements


def _wavefronts(addresses) -> int:
    """Shared-memory wavefronts of one warp access of 4-byte words at ``addresses`` (one per
    lane): the most distinct words that fall on one of the 32 banks."""
    banks = {}
    for a in set(addresses):
        banks[a % 32] = banks.get(a % 32, 0) + 1
    return max(banks.values())


def _fragment_wavefronts(stride_t: int, stride_n: int, reads, writes) -> int:
    """Wavefronts of the fragment accesses of a tile with strides ``(stride_t, stride_n)``:
    the B fragments of the factors that read it (for each d in ``reads``: inputs ``l·d``
    apart, lanes ``l = lane % 4`` by ``n = lane / 4``) and the accumulators of those that
    write it (``writes``: outputs ``k·d`` apart, ``k = lane / 4`` by ``n = 2 (lane % 4)``)."""
    total = 0
    for d in reads:
        total += _wavefronts([(lane % 4) * d * stride_t + (lane // 4) * stride_n
                              for lane in range(32)])
    for d in writes:
        total += _wavefronts([(lane // 4) * d * stride_t + 2 * (lane % 4) * stride_n
                              for lane in range(32)])
    return total


def _tile(features: int, columns: int, layout: str, reads, writes) -> tuple:
    """``((stride_t, stride_n), elements)`` of one tile: rows of features (batch-size-first)
    or of batch columns (batch-size-last) as they lie in global memory, each padded to a
    multiple of 4 elements (16-byte copies) and then to the length, within 32 more, whose
    fragment accesses (:func:`_fragment_wavefronts`) take the fewest wavefronts."""
    base = features if layout == "bsf" else columns
    base = -(-base // 4) * 4

    def strides(row):
        return (1, row) if layout == "bsf" else (row, 1)
    row = min(range(base, base + 32, 4),
              key=lambda r: (_fragment_wavefronts(*strides(r), reads, writes), r))
    lines = columns if layout == "bsf" else features
    return strides(row), row * lines


def in_place(patterns, row_tiles: int) -> bool:
    """Whether both factors can write their outputs over their inputs (one tile for X, Z and
    Y): square blocks (a group's outputs take the places of its inputs) whose rows one unit
    of ``row_tiles`` row tiles covers (a unit writes after it has read all its group's
    inputs, and no other unit reads them)."""
    return all(p.b == p.c and p.b <= 16 * row_tiles for p in patterns)


@functools.lru_cache(maxsize=1024)
def pair_layout(patterns, columns: int, layout: str, row_tiles: int = 1) -> PairLayout:
    """The shared-memory layout of a block of ``columns`` batch columns for two factors of
    ``patterns`` (application order) in ``layout``, in units of ``row_tiles`` row tiles:
    one tile where both factors work :func:`in_place`, else X (and Y over it) and Z.
    (Cached: the planner asks for every pair of consecutive factors it weighs.)"""
    p1, p2 = patterns
    n1, m1 = p1.shape[1], p1.shape[0]
    m2 = p2.shape[0]
    if in_place(patterns, row_tiles):
        t, size = _tile(n1, columns, layout, (p1.d, p2.d), (p1.d, p2.d))
        return PairLayout(t, 0, t, t, size)
    x, x_size = _tile(n1, columns, layout, (p1.d,), ())
    z, z_size = _tile(m1, columns, layout, (p2.d,), (p1.d,))
    y, y_size = _tile(m2, columns, layout, (), (p2.d,))
    z_at = -(-max(x_size, y_size) // 4) * 4
    return PairLayout(x, z_at, z, y, z_at + z_size)


@dataclasses.dataclass(frozen=True, eq=False)
class PairSegment:
    """Two factors (:class:`~kscupy.core.factor.Factor`, in application order) applied by one
    launch of ``ks_pair.cu`` in ``layout``: ``columns`` batch columns a block (BN), ``warps``
    warps a block, units of ``row_tiles`` row tiles of 16 (MT)."""
    factors: tuple
    layout: str
    columns: int
    warps: int = WARPS
    row_tiles: int = 1
    launches = 1

    @property
    def patterns(self):
        return tuple(f.pattern for f in self.factors)

    @property
    def result_features(self) -> int:
        """The features of the new C-contiguous array a run returns (the second factor's
        rows: ``factors`` are in the order they apply)."""
        return self.factors[1].pattern.shape[0]

    @property
    def smem(self) -> PairLayout:
        return pair_layout(self.patterns, self.columns, self.layout, self.row_tiles)

    @property
    def masked(self) -> bool:
        """MASKED in ks_pair.cu: a reduction that is not whole steps of 8."""
        return any(p.c % 8 for p in self.patterns)

    def name(self, precision: str, vx: int, vy: int) -> str:
        """The instantiation ``ks::ks_pair<PRECISION, BN, WARPS, BSL, VX, VY, MT, MASKED>``."""
        flag = lambda b: "true" if b else "false"  # noqa: E731
        return (f"ks::ks_pair<{PRECISIONS[precision]}, {self.columns}, {self.warps}, "
                f"{flag(self.layout == 'bsl')}, {vx}, {vy}, {self.row_tiles}, "
                f"{flag(self.masked)}>")

    def __call__(self, X, layout):
        return self.prepare(X, layout)(X)

    def prepare(self, X, layout, precision: str = "default"):
        """``run(X) -> Y`` for operands like ``X``: see :func:`prepare`."""
        return prepare(self, X, layout, precision)

    def describe(self):
        pats = " ".join(str(tuple(p)) for p in self.patterns)
        return (f"pair [{pats}] on the tensor cores, {self.columns} columns a block, "
                f"{16 * self.row_tiles}-row units")


def make_pair_segment(factors, dtype, layout, device=None):
    """A :class:`PairSegment` applying two ``factors`` (application order) to float32
    batches in ``layout`` on ``device`` (default: the current GPU's facts); None where the
    family does not apply (another dtype or count of factors, a GPU without the sm_80
    tensor-core instructions, or no tile of 8 columns fits shared memory). Units of two row tiles where every block has 24 rows or more (a unit's
    B fragments then serve 32 rows), the most columns that fit."""
    if len(factors) != 2 or numpy.dtype(dtype) != numpy.float32:
        return None
    patterns = tuple(f.pattern for f in factors)
    if any(min(p.b, p.c) < MIN_BLOCK_SIDE for p in patterns):
        return None
    row_tiles = 2 if min(p.b for p in patterns) >= 24 else 1
    device = devices.current() if device is None else device
    if not device.tensor_cores:
        return None
    limit = min(SMEM_MAX, device.smem_per_block)
    for columns in COLUMNS:
        if pair_layout(patterns, columns, layout, row_tiles).bytes <= limit:
            return PairSegment(tuple(factors), layout, columns, WARPS, row_tiles)
    return None


def _tf32_parts(w, xp):
    """``(big, small)`` of float32 ``w`` as ks_tensor_core.cuh's Operand splits a value:
    big rounded to the nearest TF32 (half an ulp added to the magnitude, the 13 low mantissa
    bits cleared; NaN kept), small = w - big (exact in float32)."""
    bits = w.view(numpy.uint32)
    big = ((bits + numpy.uint32(0x1000)) & numpy.uint32(0xffffe000)).view(numpy.float32)
    big = xp.where(xp.isnan(w), w, big)
    return big, w - big


def fragment_weights(factor, row_tiles: int, precision: str):
    """The blocks of ``factor`` (a view: transposed or not) in the order ``ks_pair.cu``
    reads its A fragments at ``precision``, in units of ``row_tiles`` row tiles of 16: an
    array ``(units, steps, row_tiles, parts, 32, 4)`` whose element ``(u, s, m, p, lane,
    r)`` is part p (big, then small for 3xTF32; the TF32 value alone for ``"tf32"``) of
    element ``(16·(row_tiles·kt + m) + a_row(lane, r), 8·s + a_col(lane, r))`` of group g's
    block (``u = g·ktiles + kt``; ``a_row = lane / 4 + 8 (r % 2)``, ``a_col = lane % 4 + 4
    (r / 2)``, the m16n8k8 TF32 layout), zero beyond the block. Each 16-byte load of a warp
    is then one 512-byte run. Kept in the factor's cache (a padded copy of the weights, twice
    over for 3xTF32)."""
    key = (factor.transposed, row_tiles, precision)
    held = factor.cache.setdefault("pair fragments", {})
    if key in held:
        return held[key]
    from ..core.memory import check_fits
    a, b, c, d = factor.pattern
    xp = factor.xp
    rows = 16 * row_tiles
    ktiles, steps = -(-b // rows), -(-c // 8)
    parts = 2 if precision == "default" else 1
    padded_bytes = 4 * a * d * rows * ktiles * 8 * steps
    # the padded blocks, their parts and the packed copy at the peak
    check_fits((1 + 2 * parts) * padded_bytes, xp,
               f"the packed weights of a {tuple(factor.pattern)} factor")
    padded = xp.zeros((a * d, rows * ktiles, 8 * steps), numpy.float32)
    padded[:, :b, :c] = factor.blocks.reshape(a * d, b, c)
    split = _tf32_parts(padded, xp)[:parts]
    # rows rows·kt + 16 m + 8 h + lr, columns 8 s + 4 v + lc -> (g, kt, s, m, part, lr, lc,
    # v, h): lane = 4 lr + lc, register r = h + 2 v
    stacked = xp.stack(split, axis=0).reshape(parts, a * d, ktiles, row_tiles, 2, 8, steps, 2, 4)
    fragments = xp.ascontiguousarray(stacked.transpose(1, 2, 6, 3, 0, 5, 8, 7, 4))
    held[key] = fragments.reshape(a * d * ktiles, steps, row_tiles, parts, 32, 4)
    return held[key]


def _aligned(ptr: int, *extents) -> bool:
    return ptr % 16 == 0 and all(e % 4 == 0 for e in extents)


def prepare(segment: PairSegment, X, layout, precision: str = "default"):
    """``run(X) -> Y`` computing the pair's product for ``X`` (``(N, B)`` in ``"bsl"``,
    ``(B, N)`` in ``"bsf"``; float32): the kernel, grid and arguments are found here once.
    An operand whose contiguous axis (features in batch-size-first, the batch in
    batch-size-last) has a stride is copied to C order on every call. ``run`` launches on
    CuPy's current stream and returns a new C-contiguous result without synchronising."""
    import cupy
    if layout != segment.layout:
        raise ValueError(f"the segment was made for {segment.layout!r}, not {layout!r}")
    if X.dtype != numpy.float32:
        raise TypeError(f"the pair kernel runs float32 operands, got {X.dtype}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
    f1, f2 = segment.factors
    if any(f.dtype != numpy.float32 for f in (f1, f2)):
        raise TypeError("the pair kernel runs float32 factors")
    N1, M2 = f1.pattern.shape[1], f2.pattern.shape[0]
    if X.ndim != 2:
        raise ValueError(f"the pair kernel takes a 2-D operand, got shape {X.shape}")
    if X.strides[1] != X.itemsize or X.strides[0] % X.itemsize:
        run = prepare(segment, cupy.ascontiguousarray(X), layout, precision)
        return lambda X: run(cupy.ascontiguousarray(X))
    B = X.shape[0] if layout == "bsf" else X.shape[1]
    if X.shape != ((B, N1) if layout == "bsf" else (N1, B)):
        raise ValueError(f"X of shape {X.shape} does not match the pair's {N1} input features "
                         f"in {layout!r}")
    ldx = X.strides[0] // X.itemsize
    ldy = M2 if layout == "bsf" else B
    along_x, along_y = (N1, M2) if layout == "bsf" else (B, B)
    vx = 4 if _aligned(X.data.ptr, ldx, along_x) else 1
    vy = 4 if _aligned(0, ldy, along_y) else 1
    smem = segment.smem
    # one limit for every layout of an instantiation (its shared memory depends on the
    # patterns, not only on the template arguments)
    fn = nvrtc.function("ks_pair.cu", segment.name(precision, vx, vy), SMEM_MAX,
                        cupy.cuda.Device().id)
    i32, i64 = numpy.int32, numpy.int64

    def factor_arguments(f):
        a, b, c, d = f.pattern
        return (fragment_weights(f, segment.row_tiles, precision), i32(a), i32(b), i32(c),
                i32(d))
    launch = Launcher(fn, (max(1, -(-B // segment.columns)),), (32 * segment.warps,),
                      smem.bytes,
                      (*factor_arguments(f1), *factor_arguments(f2), i64(B), i64(ldx), i64(ldy),
                       i32(smem.x[0]), i32(smem.x[1]), i32(smem.z_at), i32(smem.z[0]),
                       i32(smem.z[1]), i32(smem.y[0]), i32(smem.y[1])))
    return KernelRun(launch, (B, M2) if layout == "bsf" else (M2, B), numpy.float32)
