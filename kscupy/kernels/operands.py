"""Operands and results of a kernel launch, in either layout, addressed by element strides,
and the launch of a single-factor tile kernel (the parameter list ks_matmul.cu and ks_mma.cu
share)."""
from __future__ import annotations

import functools

import numpy

from ..core import device as devices
from .launcher import KernelRun, Launcher

__all__ = ["geometry", "copying_odd_strides", "division_magic", "tile_launcher"]


def _element_strides(A):
    itemsize = A.dtype.itemsize
    if any(s % itemsize for s in A.strides):
        return None
    return tuple(s // itemsize for s in A.strides)


def geometry(X, layout, M):
    """``(B, (sx_f, sx_b, sy_f, sy_b), y_shape)`` of a product with ``M`` output features, or
    None when ``X``'s strides are not whole elements (see :func:`copying_odd_strides`).

    ``X`` is ``(N, B)`` in ``"bsl"`` and ``(B, N)`` in ``"bsf"``; the result ``Y`` is a new
    C-contiguous array of shape ``y_shape`` in the same layout. Strides are in elements
    along the feature (``f``) and batch (``b``) axes.
    """
    strides = _element_strides(X)
    if strides is None:
        return None
    if layout == "bsl":
        B = X.shape[1]
        return B, (strides[0], strides[1], B, 1), (M, B)
    B = X.shape[0]
    return B, (strides[1], strides[0], 1, M), (B, M)


def copying_odd_strides(prepare):
    """A kernel family's ``prepare(factor, X, layout, ...)`` made to accept operands whose
    strides are not whole elements (the kernels address elements): such an operand is
    copied to C order on every call, and the run is prepared for the copy."""
    @functools.wraps(prepare)
    def prepare_any(factor, X, layout, *args, **kwargs):
        if _element_strides(X) is not None:
            return prepare(factor, X, layout, *args, **kwargs)
        import cupy
        run = prepare(factor, cupy.ascontiguousarray(X), layout, *args, **kwargs)
        return lambda X: run(cupy.ascontiguousarray(X))
    return prepare_any


#: Most tiles a block of a run-walking kernel takes: enough to hide the refill of its copy
#: pipeline at tile boundaries (short reductions are little else), few enough that the last
#: wave stays short.
TILE_RUN = 8
#: Fewest waves of blocks that tile runs may leave.
RUN_WAVES = 4


def tile_run(tiles: int, resident: int) -> int:
    """Tiles a block of a run-walking kernel takes, for ``tiles`` tiles on a GPU that holds
    ``resident`` of its blocks at once: up to :data:`TILE_RUN` while that leaves at least
    :data:`RUN_WAVES` waves (``benchmarks/probe_tile_runs.py`` replaces this function to
    time other rules)."""
    return max(1, min(TILE_RUN, tiles // (RUN_WAVES * resident)))


def division_magic(d: int) -> int:
    """The multiplier with which the kernels divide by ``d`` (``Divider`` in
    ``kernels_cu/ks_tiles.cuh``): ``floor((2^64 - 1) / d) + 1``, or 0 for ``d = 1``."""
    return (2**64 - 1) // d + 1 if d > 1 else 0


def tile_launcher(fn, factor, B, strides, y_shape, dtype, *, bm, bn, slots, threads, smem,
                  runs=False, weights=None):
    """``run(X) -> Y``: the single-factor kernel ``fn`` over tiles of ``slots`` groups x
    ``bm`` rows x ``bn`` batch columns (``kernels_cu/ks_tiles.cuh``) for operands of this
    geometry (:func:`geometry`). Everything but the two pointers is computed here once
    (:class:`~.launcher.Launcher`), so a call allocates ``Y`` and launches on CuPy's current
    stream a 1-D grid of one block per tile, capped at 2^31 - 1 blocks.

    With ``runs`` (a kernel that walks a run of consecutive tiles per block, ``ks_mma``),
    blocks take :func:`tile_run` tiles each (the resident blocks: the GPU's SMs times the
    blocks of ``fn`` that fit one).
    ``weights``: the array the kernel reads W from, where not ``factor.tiles`` (the tensor-core
    kernel's packed weights, :func:`~.ks_mma.packed_weights`).
    """
    import cupy
    a, b, c, d = factor.pattern
    sx_f, sx_b, sy_f, sy_b = strides
    w_sk, w_sl = factor.weight_strides
    groups = a * d
    ktiles, ntiles, gtiles = -(-b // bm), -(-B // bn), -(-groups // slots)
    tiles = ktiles * ntiles * gtiles
    run = 1
    if runs:
        per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            fn.kernel.ptr, threads, smem)
        resident = max(1, per_sm) * devices.current().sms
        run = tile_run(tiles, resident)
    grid = min(-(-tiles // run), 2**31 - 1)
    i32, i64, u64 = numpy.int32, numpy.int64, numpy.uint64
    launch = Launcher(fn, (grid,), (threads,), smem,
                      (factor.tiles if weights is None else weights, i32(groups), i32(b),
                       i32(c), i32(d), i64(B),
                       i64(sx_f), i64(sx_b), i64(sy_f), i64(sy_b), i32(w_sk), i32(w_sl),
                       i32(factor.conjugated), i32(ktiles), i32(gtiles), i64(tiles),
                       u64(division_magic(d))))
    return KernelRun(launch, y_shape, dtype)
