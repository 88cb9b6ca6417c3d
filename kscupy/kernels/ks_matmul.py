"""The single-factor kernel family (``kernels_cu/ks_matmul.cu``): tile configuration, its
heuristic and variations, the shared-memory layout, the instantiation name and the launch.

A block computes a tile of ``slots`` consecutive groups × ``bm`` output rows (``k``) ×
``bn`` batch columns (``n``), reducing over ``l < c`` in chunks of ``bk``; each thread holds
``tm × tn`` outputs. ``order`` fixes the axis neighbouring threads walk in global memory.
"""
from __future__ import annotations

import dataclasses


from ..core.problem import Problem, pow2_at_least
from . import nvrtc
from .operands import copying_odd_strides, geometry, tile_launcher

__all__ = ["KernelConfig", "ORDER_BATCH", "ORDER_GROUP", "ORDER_INGROUP", "heuristic_config",
           "candidate_configs", "SMEM_LIMIT"]

#: Axis that neighbouring threads walk in global memory (ORDER in ks_matmul.cu): the batch
#: (batch-size-last), adjacent groups j (batch-size-first, d > 1), the in-group index
#: (batch-size-first, d == 1).
ORDER_BATCH, ORDER_GROUP, ORDER_INGROUP = 0, 1, 2

#: Shared memory a block may use without opting in to more.
SMEM_LIMIT = 48 * 1024


def _vec_width(itemsize: int, run: int) -> int:
    """``vec_width<T, RUN>``: the widest shared-memory vector (<= 16 bytes, <= 4 elements)
    that divides a thread's run of ``run`` adjacent rows or columns."""
    cap = min(4, 16 // itemsize)
    return cap if run % cap == 0 else (2 if run % 2 == 0 and cap >= 2 else 1)


def _round4(n: int) -> int:
    return (n + 3) // 4 * 4


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Template arguments of ``ks::ks_matmul`` (names as in the kernel, lower case)."""
    slots: int
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    order: int

    def __post_init__(self):
        if min(self.slots, self.bm, self.bn, self.bk, self.tm, self.tn) < 1:
            raise ValueError(f"tile sizes must be positive: {self}")
        if self.bm % self.tm or self.bn % self.tn:
            raise ValueError(f"micro-tile must divide the tile: {self}")
        if self.order not in (ORDER_BATCH, ORDER_GROUP, ORDER_INGROUP):
            raise ValueError(f"order must be 0, 1 or 2: {self}")
        if not 1 <= self.threads <= 1024:
            raise ValueError(f"{self.threads} threads per block: {self}")

    @property
    def threads(self) -> int:
        return self.slots * (self.bm // self.tm) * (self.bn // self.tn)

    def vector_widths(self, itemsize: int) -> tuple:
        """``(VM, VN)``: shared-memory vector widths along the rows and the batch."""
        return _vec_width(itemsize, self.tm), _vec_width(itemsize, self.tn)

    def smem_bytes(self, itemsize: int) -> int:
        """``MatmulLayout::SMEM_BYTES``: two int64 offset tables of ``slots`` entries, then
        two stages of X and W chunks, each row padded by one vector and each buffer rounded
        to 16 bytes."""
        vm, vn = self.vector_widths(itemsize)
        xs = self.slots * (self.bk * (self.bn + vn) + vn)
        ws = self.slots * (self.bk * (self.bm + vm) + vm)
        return 16 * self.slots + 2 * itemsize * (_round4(xs) + _round4(ws))

    def _tile_arguments(self, dtype) -> str:
        return (f"{nvrtc.scalar_name(dtype)}, {self.slots}, {self.bm}, {self.bn}, {self.bk}, "
                f"{self.tm}, {self.tn}")

    def name(self, dtype) -> str:
        """The instantiation ``ks::ks_matmul<T, SLOTS, BM, BN, BK, TM, TN, ORDER>``."""
        return f"ks::ks_matmul<{self._tile_arguments(dtype)}, {self.order}>"

    def layout_probe_name(self, dtype) -> str:
        """``ks::ks_matmul_layout<...>``, which reports :meth:`layout` as the kernel sees it."""
        return f"ks::ks_matmul_layout<{self._tile_arguments(dtype)}>"

    def layout(self, itemsize: int) -> tuple:
        """``(SMEM_BYTES, NT, VM, VN)`` of ``MatmulLayout``, as this module computes them."""
        return (self.smem_bytes(itemsize), self.threads) + self.vector_widths(itemsize)

    def as_tuple(self):
        return dataclasses.astuple(self)


# -- heuristic ----------------------------------------------------------------------------------
# Group tiles for ORDER_GROUP (powers of two keep the number of compiled variants small; a
# tile that straddles two values of i is still correct, just less contiguous).
_GROUP_TILES = (32, 16, 8, 4, 2, 1)


def _accumulator_budget(itemsize: int) -> int:
    """Outputs one thread may accumulate: 64 float32 registers' worth."""
    return max(4, 256 // itemsize)


def _largest_divisor(n: int, at_most: int) -> int:
    return max(t for t in range(1, min(n, at_most) + 1) if n % t == 0)


def _row_tile(b: int, at_most: int) -> int:
    """Rows per tile, from a short menu (few compiled variants): a power of two covering a
    small ``b``, else the tile that wastes fewest padded rows, larger on ties."""
    if b <= 16 and pow2_at_least(b) <= at_most:
        return pow2_at_least(b)
    tiles = [t for t in (128, 96, 64, 48, 32, 16, 8, 4, 2, 1) if t <= at_most]
    return min(tiles, key=lambda t: (-(-b // t) * t, -t))


def heuristic_config(problem: Problem) -> KernelConfig:
    """A good tile configuration for ``problem`` from its shape alone (no table).

    The rules follow the autotuner's winners on Hopper (benchmarks/tune_report.py):

    * batch-size-last with a contiguous batch of at least 32 (ORDER_BATCH, threads walk
      the batch): large blocks take 128 x 64 tiles with 8 x 4 outputs per thread; blocks of
      up to 16 rows take all rows and 1024 batch columns per block;
    * otherwise (batch-size-first, or a thin batch) threads walk the features. For ``d == 1``
      (ORDER_INGROUP) 64 x 128 tiles; for ``d > 1`` (ORDER_GROUP) eight adjacent groups per
      block when the blocks are small (so 32-byte runs of columns are read together), else
      one group per block in small tiles (32 x 32 when d >= 8, 64 x 64 below).
    """
    a, b, c, d = problem.pattern
    B = problem.batch
    budget = _accumulator_budget(problem.itemsize)
    # Power-of-two chunk and a short menu of row tiles: few compiled variants; tails masked.
    bk = min(pow2_at_least(c), 8 if problem.itemsize <= 8 else 4)
    if problem.batch_contiguous and B >= 32:
        order, slots = ORDER_BATCH, 1
        if b > 16:
            bm = _row_tile(b, 128)
            tm, threads_n, tn = max(1, bm // 16), 16, 4
        else:
            bm = tm = pow2_at_least(b)
            threads_n, tn = 256, 4
    elif d == 1:
        order, slots = ORDER_INGROUP, max(1, min(8, 32 // pow2_at_least(c)))
        bm = _row_tile(b, max(1, 64 // slots))
        tm = max(1, bm // 16) if bm >= 16 else bm
        threads_n, tn = max(1, 256 // (slots * (bm // tm))) // 8, 8
    elif b <= 8:
        order, slots = ORDER_GROUP, min(8, 1 << (d.bit_length() - 1))
        bm = tm = pow2_at_least(b)
        threads_n, tn = max(1, 256 // slots), 8
    elif b <= 64 and d >= 8:
        order, slots = ORDER_GROUP, 8
        bm = _row_tile(b, 32)
        tm, threads_n, tn = max(1, bm // 8), 4, 8
    else:
        order, slots = ORDER_GROUP, 1
        bm = _row_tile(b, 32 if d >= 8 else 64)
        tm, threads_n, tn = max(1, bm // 8), (4 if d >= 8 else 8), 8
    while bm % tm:
        tm -= 1
    while tm * tn > budget:                      # wide dtypes: fewer outputs per thread
        if tn > 1:
            tn //= 2
            threads_n *= 2
        else:
            tm = _largest_divisor(bm, tm - 1)
    bn = max(1, threads_n) * tn
    if bn > pow2_at_least(B):                     # thin batch: threads along the rows instead
        bn = pow2_at_least(B)
        tn = min(tn, bn)
        while slots * (bm // tm) * (bn // tn) < 128 and tm > 1:
            tm = _largest_divisor(bm, tm - 1)
    config = KernelConfig(slots=slots, bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, order=order)
    return _fit(config, problem.itemsize)


def _fit(config: KernelConfig, itemsize: int) -> KernelConfig:
    """Shrink the batch tile, then the reduction chunk, until the block fits the limits."""
    while config.smem_bytes(itemsize) > SMEM_LIMIT or config.threads > 1024:
        if config.bn > 1:
            bn = config.bn // 2
            config = dataclasses.replace(config, bn=bn, tn=min(config.tn, bn))
        elif config.bk > 1:
            config = dataclasses.replace(config, bk=config.bk // 2)
        else:
            break
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
        if cfg not in seen and cfg.smem_bytes(problem.itemsize) <= SMEM_LIMIT:
            seen.add(cfg)
            out.append(cfg)

    add()
    for bk in (4, 8, 16, 32):
        if bk <= max(problem.pattern.c, 4):
            add(bk=bk)
    for tn in (1, 2, 4, 8):
        add(tn=tn, bn=base.bn // base.tn * tn)
    for tm in (1, 2, 4, 8):
        add(tm=tm, bm=base.bm // base.tm * tm)
    if base.order == ORDER_BATCH:
        for bm, tm in ((128, 8), (64, 4), (64, 8), (32, 4), (32, 2)):
            add(bm=bm, tm=tm)
    else:
        for slots in _GROUP_TILES:
            if slots != base.slots:
                add(slots=slots)
    return out


# -- launch -------------------------------------------------------------------------------------
@copying_odd_strides
def prepare(factor, X, layout, config: KernelConfig):
    """``run(X) -> Y`` computing ``K @ X`` (``layout="bsl"``, X ``(N, B)``) or ``X @ K.T``
    (``"bsf"``, X ``(B, N)``) for the :class:`~kscupy.core.factor.Factor` ``factor``, for operands
    with ``X``'s shape, strides and dtype: the kernel, grid and arguments are found here once.

    ``factor.dtype == X.dtype`` is required (products promote at their entry). ``X`` may
    have any strides; views whose strides are not whole elements are copied on every call.
    ``run`` launches on CuPy's current stream and returns a new C-contiguous result without
    synchronising.
    """
    import cupy
    dtype = X.dtype
    if factor.dtype != dtype:
        raise TypeError(f"kernel operands must share a dtype, got {factor.dtype} and {dtype}")
    B, strides, y_shape = geometry(X, layout, factor.shape[0])
    smem = config.smem_bytes(dtype.itemsize)
    fn = nvrtc.function("ks_matmul.cu", config.name(dtype), smem, cupy.cuda.Device().id)
    return tile_launcher(fn, factor, B, strides, y_shape, dtype, bm=config.bm, bn=config.bn,
                         slots=config.slots, threads=config.threads, smem=smem)
