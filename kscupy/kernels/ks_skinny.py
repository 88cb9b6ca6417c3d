"""The small-batch kernel family (``kernels_cu/ks_skinny.cu``): configuration, heuristic and
variations, the instantiation name and the launch.

At a small batch the weights are the traffic: a team of ``lanes`` lanes streams one block
row in 16-byte loads and reduces it against ``nb`` batch columns at a time, the team's
partial sums added with warp shuffles. Where neighbouring ``l`` of X are not adjacent in
memory the group's slice of X is first staged in shared memory (``ks_skinny_staged``, see
:func:`staged`). Any pattern, dtype, layout and batch size (wider batches run in passes of
``nb`` columns, which is why ``auto`` keeps it for small ones).
"""
from __future__ import annotations

import dataclasses

import numpy

from ..core.problem import Problem, pow2_at_least
from . import nvrtc
from .launcher import KernelRun, Launcher
from .operands import copying_odd_strides, geometry

__all__ = ["SkinnyConfig", "THREADS", "heuristic_config", "candidate_configs", "prepare",
           "vector_width", "staged"]

#: Threads per block (SKINNY_THREADS in ks_skinny.cu).
THREADS = 256
#: Batch columns a lane sums at once, at most (more would spill registers).
MAX_NB = 8
#: The widest batch ``auto`` runs on this kernel (kscupy.engine.registry).
AUTO_MAX_BATCH = 64
#: Shared memory the staged kernel may use for its slice of X (no opt-in above 48 KiB).
STAGE_LIMIT = 48 * 1024
#: Row sets (of 32 / lanes rows) per warp in a staged work item: the staging is paid once
#: per item, so items long enough to amortise it ...
STAGED_ROWSETS_PER_WARP = 4
#: ... and short enough that there are this many items (blocks) at least, where the rows
#: allow: a few dozen items leave most of a large GPU's SMs idle.
STAGED_MIN_ITEMS = 512


@dataclasses.dataclass(frozen=True)
class SkinnyConfig:
    """Template arguments of ``ks::ks_skinny`` besides the scalar and vector width."""
    nb: int       # batch columns per pass (1, 2, 4 or 8)
    lanes: int    # lanes per block row (a power of two dividing 32)

    def __post_init__(self):
        if self.nb not in (1, 2, 4, 8) or self.lanes not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"nb must be 1, 2, 4 or 8 and lanes a power of two up to 32: "
                             f"{self}")

    def name(self, dtype, v: int, staged: bool = False) -> str:
        """The instantiation ``ks::ks_skinny<T, NB, LANES, V>`` (``ks_skinny_staged``)."""
        kernel = "ks_skinny_staged" if staged else "ks_skinny"
        return f"ks::{kernel}<{nvrtc.scalar_name(dtype)}, {self.nb}, {self.lanes}, {v}>"

    def staged_smem(self, dtype, c: int) -> int:
        """Shared memory of the staged kernel: ``c x nb`` values of the compute type (float
        for float16)."""
        return c * self.nb * max(4, numpy.dtype(dtype).itemsize)

    def as_tuple(self):
        return dataclasses.astuple(self)


def vector_width(itemsize: int, c: int, nb: int, address: int = 0) -> int:
    """Elements per weight load: the widest of 16 bytes and below that divides a block row
    (``c`` elements) and the storage's address, so every row starts aligned, and meets at
    most 32 X values in a pass of ``nb`` columns (16 for float16, whose widening takes
    registers too): more spill registers (ptxas, sm_90)."""
    v = min(max(1, 16 // itemsize), max(1, (16 if itemsize == 2 else 32) // nb))
    while v > 1 and (c % v or (address // itemsize) % v):
        v //= 2
    return v


def staged(config: SkinnyConfig, dtype, d: int, sx_f: int, c: int) -> bool:
    """Whether to stage X: where its ``l``-neighbours are not adjacent (``d * sx_f != 1``)
    each lane of a team that splits a row (4 lanes or more) would load its own line, once per
    row; staged, the slice is loaded once per work item. Teams of 1 or 2 lanes cover 16 or
    more rows per warp, which share their X or read adjacent groups'; those and slices
    larger than :data:`STAGE_LIMIT` read X where it lies."""
    return d * sx_f != 1 and config.lanes >= 4 and config.staged_smem(dtype, c) <= STAGE_LIMIT


def _lanes(c: int, v: int) -> int:
    """Lanes per row: about two vector loads per lane over a row of ``c`` elements."""
    per_row = -(-c // v)
    return min(32, max(1, 1 << max(0, (per_row // 2).bit_length() - 1)))


def heuristic_config(problem: Problem) -> SkinnyConfig:
    """All the batch in one pass up to :data:`MAX_NB` columns; lanes by row length."""
    c = problem.pattern.c
    nb = min(MAX_NB, pow2_at_least(problem.batch))
    return SkinnyConfig(nb=nb, lanes=_lanes(c, vector_width(problem.itemsize, c, nb)))


def candidate_configs(problem: Problem):
    """Configurations the autotuner times: the heuristic one, then other lanes per row and
    narrower passes."""
    base = heuristic_config(problem)
    out = [base]
    for lanes in (base.lanes // 2, base.lanes * 2, base.lanes // 4, base.lanes * 4):
        if 1 <= lanes <= 32:
            out.append(SkinnyConfig(base.nb, lanes))
    for nb in (1, 2, 4, 8):
        if nb < base.nb:
            out.append(SkinnyConfig(nb, base.lanes))
    return out


@copying_odd_strides
def prepare(factor, X, layout, config: SkinnyConfig):
    """``run(X) -> Y`` computing ``K @ X`` (``layout="bsl"``, X ``(N, B)``) or ``X @ K.T``
    (``"bsf"``, X ``(B, N)``) for the :class:`~kscupy.core.factor.Factor` ``factor``, for operands
    with ``X``'s shape, strides and dtype: kernel, grid and arguments found here once.

    ``factor.dtype == X.dtype`` is required. A transposed factor reads its blocks from a
    row-major copy kept in its cache (:meth:`~kscupy.core.factor.Factor.row_major`). ``run``
    launches on CuPy's current stream and returns a new C-contiguous result.
    """
    import cupy
    dtype = X.dtype
    if factor.dtype != dtype:
        raise TypeError(f"kernel operands must share a dtype, got {factor.dtype} and {dtype}")
    a, b, c, d = factor.pattern
    B, (sx_f, sx_b, sy_f, sy_b), y_shape = geometry(X, layout, factor.shape[0])
    W = factor.row_major()
    v = vector_width(dtype.itemsize, c, config.nb, W.data.ptr)
    i32, i64 = numpy.int32, numpy.int64
    arguments = (W, i32(a * d), i32(b), i32(c), i32(d), i64(B), i64(sx_f), i64(sx_b),
                 i64(sy_f), i64(sy_b), i32(factor.conjugated))
    device = cupy.cuda.Device().id
    if staged(config, dtype, d, sx_f, c):
        rowset, warps = 32 // config.lanes, THREADS // 32
        passes = -(-B // config.nb)
        kb = min(b, warps * STAGED_ROWSETS_PER_WARP * rowset)    # rows per work item
        while kb > warps * rowset and a * d * -(-b // kb) * passes < STAGED_MIN_ITEMS:
            kb = max(warps * rowset, kb // 2)
        items = a * d * -(-b // kb) * passes                    # (row chunk, group, pass)
        smem = config.staged_smem(dtype, c)
        fn = nvrtc.function("ks_skinny.cu", config.name(dtype, v, staged=True), smem, device)
        launch = Launcher(fn, (min(items, 2**31 - 1),), (THREADS,), smem,
                          arguments + (i32(kb),))
    else:
        rowsets = -(-a * d * b // (32 // config.lanes))     # work items: (row set, pass)
        items = rowsets * -(-B // config.nb)
        blocks = min(-(-items // (THREADS // 32)), 2**31 - 1)   # the kernel strides beyond
        fn = nvrtc.function("ks_skinny.cu", config.name(dtype, v), 0, device)
        launch = Launcher(fn, (blocks,), (THREADS,), 0, arguments)
    return KernelRun(launch, y_shape, dtype)
