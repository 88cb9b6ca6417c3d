"""The tensor-core kernel family (``kernels_cu/ks_mma.cu``, and ``kernels_cu/ks_mma_group.cu`` for
float32's group order in 64-column pieces): tile configuration, heuristic and variations, the
shared-memory layout, the instantiation name and the launch.

A block computes, for ``slots`` consecutive groups, a ``bm × bn`` tile (output rows ``k`` ×
batch columns ``n``) reducing over ``l < c`` in chunks of ``bk`` through ``stages``
cp.async buffers; ``wm × wn`` warps per group each own a ``bm/wm × bn/wn`` piece, covered by
MMA tiles (16×8×8 TF32 for float32 and complex64, 16×8×8 DMMA for float64 and complex128,
16×8×16 for float16 with float32 accumulators).

Precision (a launch argument, chosen by the backend name, never by a tile configuration):
``"default"`` keeps float32-grade accuracy (3xTF32 products for float32 and complex64; DMMA
is exact for float64 and complex128; float16 products are exact, summed in float32 and
rounded once to float16); ``"tf32"`` is one TF32 product per term (about 1e-3
relative error; float32 and complex64 only), an explicit opt-in.
"""
from __future__ import annotations

import dataclasses

import numpy

from ..core import device as devices
from ..core import arrays
from ..core.arrays import runs_at
from ..core.device import DeviceFacts
from ..core.problem import Problem, pow2_at_least
from . import nvrtc
from .operands import copying_odd_strides, geometry, tile_launcher

__all__ = ["MmaConfig", "PRECISIONS", "ORDER_BATCH", "ORDER_GROUP", "ORDER_INGROUP",
           "ORDER_NAMES", "W_STORED", "W_TRANSPOSED", "W_PACKED", "heuristic_config",
           "candidate_configs", "packed_weights", "prepare", "prepare_batch_last",
           "SMEM_LIMIT", "supports", "copy_vector"]

#: ORDER in ks_mma.cu: the axis the global copies walk (see the kernel's header).
ORDER_BATCH, ORDER_GROUP, ORDER_INGROUP = 0, 1, 2
#: Their names (the cost model's keys).
ORDER_NAMES = {ORDER_BATCH: "batch", ORDER_GROUP: "group", ORDER_INGROUP: "ingroup"}
#: WT in ks_mma.cu and ks_mma_group.cu: how the kernel reads W. The stored blocks, a transposed
#: view of them, the blocks packed in the order the group order's chunks read them
#: (packed_weights), or packed with unpadded, swizzled rows that ks_mma_group.cu copies a
#: step's tile of by one bulk copy.
W_STORED, W_TRANSPOSED, W_PACKED, W_BULK = 0, 1, 2, 3
#: Precision names (``arrays.PRECISIONS``) and their PRECISION template argument.
PRECISIONS = {"default": 0, "tf32": 1}
#: The most dynamic shared memory a block may ask for (less where the device allows less:
#: DeviceFacts.smem_per_block).
SMEM_LIMIT = 200 * 1024
#: Bytes of a row of a W chunk that ks_mma_group.cu copies in bulk (W_BULK): 8 floats, or 16
#: float16 or bfloat16 values.
BULK_ROW_BYTES = 32
#: Whether the group order runs its own kernel (MmaConfig.lean_group); False runs
#: ks_mma.cu's general template instead (an A/B switch for probes).
GROUP_KERNEL = True
#: Steps ahead of their regrouping that ks_mma_group.cu copies 16-bit X into its ring of
#: chunks after the stages (X_LEAD there; MmaConfig.x_lead), where the ring fits; 0 regroups
#: X from registers loaded one step ahead.
X_LEAD_HALF = 1


def mma_shape(dtype) -> tuple:
    """``(M, N, K)`` of the MMA tile for ``dtype``'s real type (MmaShape in ks_tensor_core.cuh):
    16 x 8 x 16 for the 16-bit dtypes, 16 x 8 x 8 for the others."""
    return (16, 8, 16) if arrays.is_half(dtype) else (16, 8, 8)


def supports(dtype, precision: str = "default") -> bool:
    """Whether the tensor-core kernel runs ``dtype`` at ``precision``: every supported dtype
    and precision (``arrays.runs_at``)."""
    return runs_at(dtype, precision)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


@dataclasses.dataclass(frozen=True)
class MmaConfig:
    """Tile template arguments of ``ks::ks_mma`` (names as in the kernel, lower case)."""
    slots: int
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int
    order: int
    #: blocks per SM the kernel's registers must allow (``__launch_bounds__``): 2 caps a
    #: 256-thread block at 128 registers a thread, 4 a 128-thread block
    min_blocks: int = 1

    def __post_init__(self):
        if min(self.slots, self.bm, self.bn, self.bk, self.wm, self.wn) < 1 or self.stages < 2:
            raise ValueError(f"tile sizes must be positive and stages >= 2: {self}")
        if self.bm % self.wm or self.bn % self.wn:
            raise ValueError(f"warps must divide the tile: {self}")
        if self.order not in (ORDER_BATCH, ORDER_GROUP, ORDER_INGROUP):
            raise ValueError(f"order must be 0, 1 or 2: {self}")
        if self.min_blocks not in (1, 2, 4):
            raise ValueError(f"min_blocks must be 1, 2 or 4: {self}")
        if not 32 <= self.threads <= 1024:
            raise ValueError(f"{self.threads} threads per block: {self}")

    @property
    def threads(self) -> int:
        return 32 * self.slots * self.wm * self.wn

    def valid_for(self, dtype) -> bool:
        """Whether the warp pieces are whole MMA tiles for ``dtype`` (for float16, an even
        number of column tiles: one ldmatrix loads two)."""
        m, n, k = mma_shape(dtype)
        if numpy.dtype(dtype).itemsize == 2:
            n *= 2
        return (self.bm // self.wm) % m == 0 and (self.bn // self.wn) % n == 0 and self.bk % k == 0

    @staticmethod
    def _pads(itemsize) -> tuple:
        """``(PAD_K, PAD_MN)`` of ``MmaLayout`` in elements: K-major rows by 4 elements, rows
        along k or n by 32 bytes; float16 rows (read by ldmatrix) both by 16 bytes."""
        return (8, 8) if itemsize == 2 else (4, 32 // itemsize)

    def _x_ld(self, itemsize):
        """``MmaLayout::XS_LD``: the row length of an X chunk in shared memory, padded."""
        pad_k, pad_mn = self._pads(itemsize)
        return self.bk + pad_k if self.order != ORDER_BATCH else self.bn + pad_mn

    def weights(self, dtype, transposed: bool) -> int:
        """WT of the kernel for ``dtype`` and a factor view that is ``transposed`` or not.

        The group order reads packed weights (:func:`packed_weights`; in shared memory the
        layout of stored blocks) for transposed views, whose W would otherwise arrive
        M-major and be read without ldmatrix, and for every dtype but float32, where they
        were measured as fast or faster. Stored float32 blocks keep the storage as it is:
        packed, they were slower once their copies were spread over the products. The
        group order's own kernel (:meth:`lean_group`) reads every view's weights by bulk
        copies (W_BULK) in rows of 32 bytes (float32 chunks of 8, which were faster than
        cp.async copies of the stored blocks on most patterns; float16 and bfloat16 chunks
        of 16, the only ones its 16-bit path takes)."""
        if self.lean_group(dtype) and self.bk * numpy.dtype(dtype).itemsize == BULK_ROW_BYTES:
            return W_BULK
        if self.order == ORDER_GROUP and (transposed or numpy.dtype(dtype) != numpy.float32):
            return W_PACKED
        return W_TRANSPOSED if transposed else W_STORED

    def _w_transposed(self, transposed) -> bool:
        """Whether shared memory holds W M-major (WT 1): a transposed view read as it is."""
        return transposed and self.order != ORDER_GROUP

    def _w_ld(self, itemsize, transposed):
        pad_k, pad_mn = self._pads(itemsize)
        return self.bk + pad_k if not self._w_transposed(transposed) else self.bm + pad_mn

    def fits(self, itemsize: int, transposed: bool = False,
             device: DeviceFacts | None = None) -> bool:
        """Whether ``min_blocks`` blocks of this configuration fit one SM's shared memory on
        ``device`` (default: the current GPU's facts), each within :data:`SMEM_LIMIT`."""
        device = devices.current() if device is None else device
        smem = self.smem_bytes(itemsize, transposed)
        per_block = device.smem_per_sm // self.min_blocks - device.smem_reserved_per_block
        return smem <= min(SMEM_LIMIT, device.smem_per_block, per_block)

    def smem_bytes(self, itemsize: int, transposed: bool = False) -> int:
        """``MmaLayout::SMEM_BYTES``: ``stages`` stages of X and W chunks (rows padded as in
        the kernel, each buffer rounded to 16 bytes); in the group order at least the output
        tile, which its epilogue passes through shared memory."""
        align = max(1, 16 // itemsize)
        x_rows = self.bn if self.order != ORDER_BATCH else self.bk
        w_rows = self.bm if not self._w_transposed(transposed) else self.bk
        xs = _round_up(self.slots * x_rows * self._x_ld(itemsize), align)
        ws = _round_up(self.slots * w_rows * self._w_ld(itemsize, transposed), align)
        ys = self.slots * self.bm * self.bn if self.order == ORDER_GROUP else 0
        # ks_mma_group.cu's bulk copies of W (WT 3) count on an mbarrier per stage, after the
        # area (its element sizes: float32's, and float16's for both 16-bit dtypes)
        lean_dtype = {4: numpy.float32, 2: numpy.float16}.get(itemsize)
        barriers = 8 * self.stages if lean_dtype is not None \
            and self.weights(lean_dtype, transposed) == W_BULK else 0
        return max(self.stages * (xs + ws), ys) * itemsize + barriers

    def x_lead(self, itemsize: int, vx: int, device: DeviceFacts | None = None) -> int:
        """ks_mma_group.cu's X_LEAD: :data:`X_LEAD_HALF` for the 16-bit dtypes'
        configurations of that kernel copying X in vectors of ``vx >= 2`` groups (cp.async
        has no 2-byte copy: single values would be loaded synchronously) where its ring of
        ``X_LEAD_HALF + 1`` X chunks fits beside :meth:`smem_bytes` in one block's shared
        memory, else 0."""
        if itemsize != 2 or vx < 2 or X_LEAD_HALF == 0 or not self.lean_group(numpy.float16):
            return 0
        device = devices.current() if device is None else device
        ring = self._with_ring(self.smem_bytes(itemsize), itemsize, X_LEAD_HALF)
        per_block = device.smem_per_sm // self.min_blocks - device.smem_reserved_per_block
        return X_LEAD_HALF if ring <= min(SMEM_LIMIT, device.smem_per_block, per_block) else 0

    def launch_smem_bytes(self, itemsize: int, transposed: bool, vx: int) -> int:
        """The dynamic shared memory of a launch copying X in vectors of ``vx`` groups:
        :meth:`smem_bytes`, and X's ring after it (16 bytes aligned) where :meth:`x_lead` is
        positive."""
        return self._with_ring(self.smem_bytes(itemsize, transposed), itemsize,
                               self.x_lead(itemsize, vx))

    def _with_ring(self, smem: int, itemsize: int, lead: int) -> int:
        """``smem`` bytes and, where ``lead > 0``, X's ring of ``lead + 1`` chunks after them
        (16 bytes aligned; RING_AT and X_CHUNK_BYTES in ks_mma_group.cu)."""
        if lead == 0:
            return smem
        return _round_up(smem, 16) + (lead + 1) * self.slots * self.bn * self.bk * itemsize

    def layout(self, itemsize: int, transposed: bool = False) -> tuple:
        """``(SMEM_BYTES, NT, XS_LD, WS_LD)`` of ``MmaLayout``, as this module computes them."""
        return (self.smem_bytes(itemsize, transposed), self.threads, self._x_ld(itemsize),
                self._w_ld(itemsize, transposed))

    def _tile_arguments(self) -> str:
        return (f"{self.slots}, {self.bm}, {self.bn}, {self.bk}, {self.wm}, {self.wn}, "
                f"{self.stages}, {self.order}")

    def lean_group(self, dtype) -> bool:
        """Whether this configuration runs ``kernels_cu/ks_mma_group.cu``, the group order's
        own kernel for float32, float16 and bfloat16: one warp per group (``wm = wn = 1``),
        pieces of 64 or more batch columns, one block per SM, on a GPU with bulk copies (the
        TMA, sm_90 on: it copies W by them); the 16-bit dtypes in chunks of 16, the only
        ones their bulk copies take. Every other configuration runs ``ks_mma.cu``."""
        dtype = numpy.dtype(dtype)
        element = dtype == numpy.float32 or (
            arrays.is_half(dtype) and self.bk * dtype.itemsize == BULK_ROW_BYTES)
        return (GROUP_KERNEL and self.order == ORDER_GROUP and element
                and self.wm == 1 and self.wn == 1 and self.bn >= 64 and self.min_blocks == 1
                and devices.current().tma)

    def x_async(self, dtype, vx: int) -> bool:
        """Whether ks_mma_group.cu copies X by cp.async into shared memory in global memory's
        order (X_ASYNC there) rather than through registers: for float32's four-group vectors
        in 48-row tiles of eight slots (b = 48 or 96), where it was faster (see the kernel);
        16-bit values are regrouped through registers."""
        return numpy.dtype(dtype) == numpy.float32 and vx == 4 and self.bm == 48 \
            and self.slots == 8

    def source(self, dtype, precision: str, transposed: bool, vx: int, vw: int) -> tuple:
        """``(file, instantiation)`` in ``kernels_cu/`` for a factor view that is
        ``transposed`` or not: ``ks::ks_mma_group<T, PRECISION, SLOTS, BM, BN, BK, STAGES,
        WT, VX, VW, X_ASYNC, X_LEAD>`` where :meth:`lean_group`, else ``ks::ks_mma<T,
        PRECISION, SLOTS, BM, BN, BK, WM, WN, STAGES, ORDER, WT, VX, VW, MIN_BLOCKS>``."""
        wt = self.weights(dtype, transposed)
        if self.lean_group(dtype):
            x_async = "true" if self.x_async(dtype, vx) else "false"
            return "ks_mma_group.cu", (
                f"ks::ks_mma_group<{nvrtc.scalar_name(dtype)}, {PRECISIONS[precision]}, "
                f"{self.slots}, {self.bm}, {self.bn}, {self.bk}, {self.stages}, {wt}, {vx}, "
                f"{vw}, {x_async}, {self.x_lead(numpy.dtype(dtype).itemsize, vx)}>")
        return "ks_mma.cu", (f"ks::ks_mma<{nvrtc.scalar_name(dtype)}, {PRECISIONS[precision]}, "
                             f"{self._tile_arguments()}, {wt}, {vx}, {vw}, {self.min_blocks}>")

    def name(self, dtype, precision: str, transposed: bool, vx: int, vw: int) -> str:
        """The instantiation of :meth:`source`."""
        return self.source(dtype, precision, transposed, vx, vw)[1]

    def layout_probe_name(self, dtype, transposed: bool) -> str:
        """``ks::ks_mma_layout<...>``, which reports :meth:`layout` as the kernel sees it."""
        return (f"ks::ks_mma_layout<{nvrtc.scalar_name(dtype)}, {self._tile_arguments()}, "
                f"{self.weights(dtype, transposed)}>")

    def as_tuple(self):
        return dataclasses.astuple(self)


# -- heuristic ----------------------------------------------------------------------------------
def _warp_tile(dtype) -> tuple:
    """A warp's piece ``(rows, columns)``: 32 to 64 accumulator registers per lane (float32
    in the group order takes 64 columns for long batches: heuristic_config)."""
    if arrays.is_half(dtype):
        return 64, 32
    return {numpy.dtype(numpy.float32): (64, 32), numpy.dtype(numpy.float64): (32, 32),
            numpy.dtype(numpy.complex64): (32, 32),
            numpy.dtype(numpy.complex128): (16, 32)}[numpy.dtype(dtype)]


#: The shortest batch that heuristic_config treats as long for float32: group-order tiles
#: take 64-column warp pieces (128 batch tiles of 64 or more), batch-order tiles with
#: 32 < c <= 128 chunks of 16.
_LONG_BATCH = 8192


def _chunk(dtype) -> int:
    """Reduction chunk: 128 bytes of a row of W per stage."""
    return 128 // numpy.dtype(dtype).itemsize


def _row_tile(b: int, wtm: int, mma_m: int, max_warps: int = 2, lone_rows: int = 0) -> tuple:
    """``(bm, wm)``: rows per tile and warps along them, wasting the fewest padded rows of
    ``b`` (larger tiles on ties); a warp covers at most ``wtm`` rows, or ``lone_rows`` when
    it is the tile's only warp along them."""
    options = [(lone_rows, 1)] if lone_rows else []
    for wm in range(1, max_warps + 1):
        for rows in range(mma_m, wtm + 1, mma_m):
            options.append((wm * rows, wm))
    return min(options, key=lambda o: (-(-b // o[0]) * o[0], -o[0], o[1]))


def _lone_warp_rows(dtype) -> int:
    """Taller warp pieces a tile of one warp along its rows may take: 48 rows for float64,
    so that ``b = 48`` or ``96`` is one or two tiles instead of three of 16 or 32 rows (each
    re-reads X). Not for complex128 (twice the accumulator registers)."""
    return 48 if numpy.dtype(dtype) == numpy.float64 else 0


def heuristic_config(problem: Problem) -> MmaConfig:
    """A tile configuration for ``problem`` from its shape alone (the rules follow the
    fastest configurations of ``benchmarks/probe_mma.py`` on Hopper).

    Batch-size-last with a contiguous batch walks the batch (ORDER_BATCH); batch-size-first
    with ``d == 1`` walks the in-group index (ORDER_INGROUP); otherwise blocks take several
    adjacent groups and walk them (ORDER_GROUP). Rows per tile waste the fewest padded rows.
    Up to eight warps per block; four where the reduction is at most two chunks long, so
    that more, smaller blocks overlap their short pipelines, and for complex64 in the batch
    order. In the group order, small
    blocks (``b < 128`` or a short reduction) take up to eight groups of one warp each;
    large blocks two groups of 2 x 2 warps, whose wider tiles reuse each W tile longer;
    float32 always takes up to eight groups of one warp tile each, and for long batches
    64-column tiles, fewer groups where more than an eighth of the slots would be empty
    (blocks of 32768 values or more), and two stages where a block has four groups or
    fewer; float16 and bfloat16 take the same tiles, slots and stages for long batches on
    GPUs with bulk copies (ks_mma_group.cu), in chunks of 16, but keep every slot (float32's
    rule for empty slots was measured on float32 alone); in the batch order, float32 takes chunks of 16 where 32 < c <= 128 and the batch
    is long.
    DMMA dtypes (float64, complex128) aim at 16 warps per SM: two blocks per SM where row
    tiles are at least 64 tall, or four float64 groups per block in the group order.
    """
    a, b, c, d = problem.pattern
    dtype = problem.dtype
    stages = 3
    wtm, wtn = _warp_tile(dtype)
    mma_m = mma_shape(dtype)[0]
    chunk = _chunk(dtype)
    short = c <= 2 * chunk
    # DMMA's 64-bit fragments take twice the shared-memory loads per product: 16 warps per
    # SM hide their latency better than 8. Two blocks per SM for tall tiles, or in the group
    # order four float64 groups per block (four complex128 groups leave room for only two
    # stages). Not for row tiles below 64: capped at 128 registers they spill.
    dmma = numpy.dtype(dtype) in (numpy.float64, numpy.complex128)
    if problem.access == "bsl":
        order, slots = ORDER_BATCH, 1
    elif d == 1:
        order, slots = ORDER_INGROUP, 1
    else:
        order = ORDER_GROUP
        slots = min(1 << (d.bit_length() - 1), pow2_at_least(a * d))
    if order == ORDER_GROUP and dtype == numpy.float32:
        # one warp per group, its piece one warp tile (faster on the paper's grid than the
        # two-group 2 x 2-warp tiles of large blocks and the wider batch tiles of d = 4).
        # For long batches the piece is 64 columns wide, which the kernel's row sums leave
        # registers for: each W tile then serves twice the batch, with chunks of 8 where
        # there are several slots (halved below: X copies of 16 staged 32 registers a
        # thread and spilled; one slot copies X by cp.async, unstaged, and keeps 16).
        # Shorter batches, where halving the batch tiles costs parallelism, keep the 64 x 32
        # pieces.
        slots = min(slots, 8)
        if problem.batch >= _LONG_BATCH:
            wtn, chunk = 64, 16
            # Slots that divide the groups, for long batches and blocks of 32768 values or
            # more, where more than an eighth of the slots would be empty: with a = 1 and
            # d = 3, 6, 12 the last tile of each run of groups held empty slots, a quarter of
            # the work; the largest power of two dividing a * d leaves none. Smaller blocks
            # (whose fewer groups a block then leave it short of work) and tiles without
            # empty slots keep theirs. Measured with a = 1 only.
            groups = a * d
            empty = -(-groups // slots) * slots - groups
            if b * c >= 32768 and 8 * empty > groups:
                slots = groups & -groups
            # blocks of four groups or fewer: two stages, whose smaller footprint lets more
            # blocks share an SM (with eight groups the third stage pays for itself).
            if slots <= 4:
                stages = 2
        bm, wm = _row_tile(b, wtm, mma_m, max_warps=1)
        wn = 1
    elif order == ORDER_GROUP and arrays.is_half(dtype) and problem.batch >= _LONG_BATCH \
            and GROUP_KERNEL and devices.current().tma:
        # ks_mma_group.cu's 16-bit path (lean_group): float32's long-batch tiles, one warp
        # per group and 64 x 64 pieces, W in chunks of 16 (the chunk is halved below for
        # several slots), two stages where a block has four groups or fewer.
        slots = min(slots, 8)
        wtn, chunk = 64, 2 * BULK_ROW_BYTES // dtype.itemsize
        if slots <= 4:
            stages = 2
        bm, wm = _row_tile(b, wtm, mma_m, max_warps=1)
        wn = 1
    elif order == ORDER_GROUP and (b < 128 or short):
        slots = min(slots, 8)
        bm, wm = _row_tile(b, wtm, mma_m, max_warps=1, lone_rows=_lone_warp_rows(dtype))
        wn = max(1, 8 // slots)
    elif order == ORDER_GROUP:
        slots = min(slots, 4 if dmma and dtype.kind != "c" else 2)
        bm, wm = _row_tile(b, wtm, mma_m, lone_rows=_lone_warp_rows(dtype))
        wn = 2
    else:
        bm, wm = _row_tile(b, wtm, mma_m, lone_rows=_lone_warp_rows(dtype))
        # tall lone warps hold 1.5x the accumulators: four along the batch. complex64 in
        # the batch order: four warps a block, two blocks an SM, whose barriers do not hold
        # each other up.
        four = short or bm // wm > wtm or (order == ORDER_BATCH and dtype == numpy.complex64)
        wn = max(1, (4 if four else 8) // wm)
    bn = wn * wtn
    while bn > max(wtn, pow2_at_least(problem.batch)) and wn > 1:   # thin batch: narrower
        wn //= 2
        bn //= 2
    # several groups per block hold several W tiles: halve the chunk
    bk = chunk // (2 if slots > 1 else 1)
    # float32 in the batch order with a short reduction (32 < c <= 128) and a long batch:
    # chunks of 16, half the shared memory a stage, so more stages fit (c = 32 would take
    # two chunks for one, and c >= 192 gains nothing). Shorter batches, where each chunk's
    # latency shows, keep 32.
    if (order == ORDER_BATCH and dtype == numpy.float32 and 32 < c <= 128
            and problem.batch >= _LONG_BATCH):
        bk = 16
    config = MmaConfig(slots=slots, bm=bm, bn=bn, bk=max(bk, mma_shape(dtype)[2]), wm=wm,
                       wn=wn, stages=stages, order=order,
                       min_blocks=2 if dmma and bm >= 64 and 32 * slots * wm * wn <= 256 else 1)
    return _fit(config, problem)


def _fit(config: MmaConfig, problem: Problem) -> MmaConfig:
    """Fewer stages, then fewer groups per block, until ``min_blocks`` blocks fit an SM;
    then, on devices with less shared memory than Hopper's, one block per SM and narrower
    batch tiles until one fits."""
    def fits(cfg):
        return cfg.fits(problem.itemsize, problem.transposed)
    while not fits(config) and config.stages > 2:
        config = dataclasses.replace(config, stages=config.stages - 1)
    while not fits(config) and config.slots > 1:
        config = dataclasses.replace(config, slots=config.slots // 2)
    if not fits(config) and config.min_blocks > 1:
        config = dataclasses.replace(config, min_blocks=1)
    while not fits(config) and config.wn > 1:
        config = dataclasses.replace(config, wn=config.wn // 2, bn=config.bn // 2)
    return config


def candidate_configs(problem: Problem):
    """Configurations the autotuner times: the heuristic one and variations of its tiles."""
    base = heuristic_config(problem)
    seen, out = set(), []

    def add(**changes):
        try:
            cfg = dataclasses.replace(base, **changes)
        except ValueError:
            return
        if cfg.min_blocks > 1:
            cfg = _fit(cfg, problem)
        if (cfg not in seen and cfg.valid_for(problem.dtype)
                and cfg.fits(problem.itemsize, problem.transposed)):
            seen.add(cfg)
            out.append(cfg)

    add()
    for stages in (2, 3, 4):
        add(stages=stages)
    add(bk=base.bk // 2)
    add(bk=base.bk * 2, stages=2)
    add(bk=base.bk * 2, stages=3)
    for wn in (1, 2, 4):
        add(wn=wn, bn=base.bn // base.wn * wn)
    add(wm=base.wm * 2, bm=base.bm * 2)
    if base.wm > 1:
        add(wm=base.wm // 2, bm=base.bm // 2)
    # two blocks per SM: half-height warp pieces fit 128 registers; one block's copies then
    # overlap the other's products, which pays where the reduction is short
    add(min_blocks=2)
    if arrays.is_half(problem.dtype) and base.threads == 128 and base.order != ORDER_GROUP:
        # four 128-thread blocks an SM, at 128 registers (fewer stages where four do not fit
        # the shared memory): the heuristic's 16-bit blocks in the batch and in-group orders
        # take about 170 registers, so three share an SM, and a short product's tiles run
        # in more waves. ptxas fits those in 128 without spills (tests/
        # test_kernel_resources.py); the 3xTF32, DMMA and complex tiles and the group order
        # spill there.
        add(min_blocks=4)
    wn = max(1, base.wn // 2)
    add(wm=base.wm * 2, wn=wn, bn=base.bn // base.wn * wn, min_blocks=2)
    if base.order == ORDER_GROUP:
        for slots in (1, 2, 4, 8):
            add(slots=slots)
        if problem.dtype == numpy.float32:
            # the other width of float32's warp pieces (heuristic_config), 32 or 64 columns
            for wtn, bk in ((32, 16), (64, 8)):
                add(bn=wtn * base.wn, bk=bk)
        # fewer groups, wider tiles: more reuse of each W tile along the batch
        wtm, wtn = base.bm // base.wm, base.bn // base.wn
        for slots, wm, wn in ((8, 1, 1), (4, 1, 2), (2, 2, 2), (2, 1, 4), (1, 2, 4)):
            add(slots=slots, wm=wm, wn=wn, bm=wm * wtm, bn=wn * wtn, bk=2 * base.bk // slots
                if slots < 2 else base.bk)
    return out


# -- launch -------------------------------------------------------------------------------------
def copy_vector(itemsize: int, contiguous: bool, *divisible) -> int:
    """Elements per copy: the most (a power of two, at most 16 bytes' worth) that divides
    every offset along the copied axis (``divisible``: extents, strides, the base address in
    elements) when that axis is contiguous; else one element."""
    v = max(1, 16 // itemsize)
    if not contiguous:
        return 1
    while v > 1 and any(x % v for x in divisible):
        v //= 2
    return v


def copy_vectors(config: MmaConfig, factor, X, strides, B) -> tuple:
    """``(VX, VW)`` for a launch: the widest copies that every tile of this operand allows
    (``strides``: ``(sx_f, sx_b, sy_f, sy_b)`` as :func:`~.operands.geometry` returns them; Y is a new
    C-contiguous array, so its base is aligned)."""
    isz = X.dtype.itemsize
    sx_f, sx_b, sy_f, sy_b = strides
    a, b, c, d = factor.pattern
    x_ptr = X.data.ptr // isz if X.data.ptr % isz == 0 else 1
    if config.order == ORDER_BATCH:
        vx = copy_vector(isz, sx_b == 1, B, sx_f, x_ptr)
    elif config.order == ORDER_INGROUP:
        vx = copy_vector(isz, sx_f == 1 and d == 1, c, sx_b, x_ptr)
    else:   # adjacent groups of one block, never across a run of d (slots | g0, vx | d);
        # the epilogue stores Y with the same vectors, so Y's groups must be adjacent too
        vx = copy_vector(isz, sx_f == 1 and sy_f == 1, d, sx_b, sy_b, x_ptr)
    vx = min(vx, {ORDER_BATCH: config.bn, ORDER_INGROUP: config.bk,
                  ORDER_GROUP: config.slots}[config.order])
    wt = config.weights(X.dtype, factor.transposed)
    if wt in (W_PACKED, W_BULK):   # chunks of bk values a row, from a new (aligned) array
        return vx, copy_vector(isz, True, config.bk)
    w_ptr = factor.tiles.data.ptr // isz if factor.tiles.data.ptr % isz == 0 else 1
    vw = copy_vector(isz, True, b if wt == W_TRANSPOSED else c, w_ptr)
    return vx, min(vw, config.bm if wt == W_TRANSPOSED else config.bk)


#: Packed layouts a factor's cache keeps (views and configurations in use at once, e.g. ``K``
#: and ``K.T`` of a forward and backward pass); the least recently used goes first.
PACKED_LAYOUTS = 4


def packed_weights(factor, config: MmaConfig):
    """The blocks of ``factor`` (a view: transposed or not; a conjugated view's values are
    conjugated by the kernel) as ``config``'s group-order chunks read them, ``W_PACKED`` in
    ks_mma.cu: an array ``(gtiles, ktiles, chunks, slots, bm, bk)`` whose element ``(gt, kt, t,
    s, k, l)`` is element ``(kt*bm + k, t*bk + l)`` of group ``gt*slots + s``'s block, zero
    beyond the groups, rows and reduction. Each chunk of a tile is then one contiguous run,
    which the kernel copies at offsets known when it is compiled and without bounds checks
    (the general copies work out a 64-bit origin per vector, in registers that the
    ``cp.async``s in flight still read). For ``W_BULK`` (``config.weights``) the two 16-byte
    halves of each row ``k`` with ``k // 4`` odd are swapped: ks_mma_group.cu copies a chunk
    into shared memory as it is, rows unpadded, and this keeps its ``ldmatrix`` reads free of
    bank conflicts.

    It costs a copy of the weights, padded to whole tiles (and as much again while it is
    made; :func:`~kscupy.core.memory.check_fits` first). The factor's shared cache keeps up to
    :data:`PACKED_LAYOUTS` of them, and a prepared run holds on to its own. Made with the
    factor's array module (CuPy for a launch; NumPy too, for tests)."""
    from ..core.memory import check_fits
    bulk = config.weights(factor.dtype, factor.transposed) == W_BULK
    key = (factor.transposed, config.slots, config.bm, config.bk, bulk)
    held = factor.cache.setdefault("packed weights", {})
    if key in held:
        held[key] = held.pop(key)           # now the most recently used
        return held[key]
    a, b, c, d = factor.pattern
    groups = a * d
    gtiles, ktiles, chunks = (-(-groups // config.slots), -(-b // config.bm),
                              -(-c // config.bk))
    shape = (gtiles * config.slots, ktiles * config.bm, chunks * config.bk)
    xp = factor.xp
    check_fits(2 * int(numpy.prod(shape)) * factor.tiles.itemsize, xp,
               f"the packed weights of a {factor.pattern} factor")
    tiles = factor.tiles.swapaxes(-1, -2) if factor.transposed else factor.tiles
    padded = xp.zeros(shape, factor.tiles.dtype)
    padded[:groups, :b, :c] = tiles.reshape(groups, b, c)
    packed = xp.ascontiguousarray(
        padded.reshape(gtiles, config.slots, ktiles, config.bm, chunks, config.bk)
        .transpose(0, 2, 4, 1, 3, 5))
    if bulk:   # rows' 16-byte halves swapped where (k / 4) is odd (W_BULK in ks_mma_group.cu)
        # k = 8 k8 + 4 kh + k4, l = (bk / 2) lh + lq: reverse lh where kh = 1
        halves = packed.reshape(*packed.shape[:4], config.bm // 8, 2, 4, 2, config.bk // 2)
        halves[:, :, :, :, :, 1] = halves[:, :, :, :, :, 1, :, ::-1].copy()
    while len(held) >= PACKED_LAYOUTS:
        held.pop(next(iter(held)))
    held[key] = packed
    return packed


@copying_odd_strides
def prepare(factor, X, layout, config: MmaConfig, precision: str = "default"):
    """``run(X) -> Y`` computing ``K @ X`` (``layout="bsl"``, X ``(N, B)``) or ``X @ K.T``
    (``"bsf"``, X ``(B, N)``) for the :class:`~kscupy.core.factor.Factor` ``factor`` on the tensor
    cores, for operands with ``X``'s shape, strides, dtype and 16-byte alignment (the copy
    widths depend on it): the kernel, grid and arguments are found here once.

    ``factor.dtype == X.dtype`` is required; ``precision`` is ``"default"`` or ``"tf32"``
    (float32 and complex64 only). ``run`` launches on CuPy's current stream and returns a
    new C-contiguous result without synchronising.
    """
    import cupy
    dtype = X.dtype
    if factor.dtype != dtype:
        raise TypeError(f"kernel operands must share a dtype, got {factor.dtype} and {dtype}")
    if not supports(dtype, precision):
        raise TypeError(f"the tensor-core kernel does not run {dtype} at precision "
                        f"{precision!r}")
    if not config.valid_for(dtype):
        raise ValueError(f"{config} does not split into {mma_shape(dtype)} MMA tiles")
    B, strides, y_shape = geometry(X, layout, factor.shape[0])
    vx, vw = copy_vectors(config, factor, X, strides, B)
    smem = config.launch_smem_bytes(dtype.itemsize, factor.transposed, vx)
    filename, name = config.source(dtype, precision, factor.transposed, vx, vw)
    fn = nvrtc.function(filename, name, smem, cupy.cuda.Device().id)
    # Runs of tiles per block pay in the batch order (each block's copy pipeline stays
    # full across its tiles); in the group order they cost the L2 reuse between
    # neighbouring blocks, which read the same W tiles; the in-group order was not measured
    # with them.
    weights = (packed_weights(factor, config)
               if config.weights(dtype, factor.transposed) in (W_PACKED, W_BULK) else None)
    return tile_launcher(fn, factor, B, strides, y_shape, dtype, bm=config.bm, bn=config.bn,
                         slots=config.slots, threads=config.threads, smem=smem,
                         runs=config.order == ORDER_BATCH, weights=weights)


@copying_odd_strides
def prepare_batch_last(factor, X, layout, config: MmaConfig, precision: str = "default"):
    """``run(X) -> Y`` as :func:`prepare`, with the kernel in its batch order whatever the
    layout: a batch-size-first ``X`` ``(B, N)`` is transposed to ``(N, B)``
    (:mod:`~kscupy.kernels.transpose`), multiplied batch-size-last, and the ``(M, B)`` result
    transposed back, two extra passes over X and Y that pay where the batch order's speed
    outweighs them (large blocks). ``config`` is a configuration for the batch-size-last
    problem (:meth:`~kscupy.core.problem.Problem.in_batch_last`). Batch-size-last operands run
    :func:`prepare` as they are."""
    from . import transpose
    if layout == "bsl":
        return prepare(factor, X, layout, config, precision)
    return transpose.around(
        X, lambda XT: prepare(factor, XT, "bsl", config, precision),
        (factor.shape[0], X.shape[0]))
