"""Operands and results of a kernel launch, in either layout, addressed by element strides,
and the launch of a single-factor tile kernel (the parameter list ks_matmul.cu and ks_mma.cu
share)."""
from __future__ import annotations

import numpy

__all__ = ["operands", "launch_tiles"]


def _element_strides(A):
    itemsize = A.dtype.itemsize
    if any(s % itemsize for s in A.strides):
        return None
    return tuple(s // itemsize for s in A.strides)


def operands(X, layout, M):
    """``(X, Y, B, (sx_f, sx_b, sy_f, sy_b))`` for a product with ``M`` output features.

    ``X`` is ``(N, B)`` in ``"bsl"`` and ``(B, N)`` in ``"bsf"``, with any strides (copied
    once if they are not whole elements). ``Y`` is a new C-contiguous result of the same
    layout; the strides are in elements along the feature (``f``) and batch (``b``) axes.
    """
    import cupy
    strides = _element_strides(X)
    if strides is None:
        X = cupy.ascontiguousarray(X)
        strides = _element_strides(X)
    if layout == "bsl":
        B = X.shape[1]
        Y = cupy.empty((M, B), dtype=X.dtype)
        return X, Y, B, (strides[0], strides[1], B, 1)
    B = X.shape[0]
    Y = cupy.empty((B, M), dtype=X.dtype)
    return X, Y, B, (strides[1], strides[0], 1, M)


def launch_tiles(fn, factor, X, Y, B, strides, *, bm, bn, slots, threads, smem):
    """Launch the single-factor kernel ``fn`` over tiles of ``slots`` groups x ``bm`` rows x
    ``bn`` batch columns (``kernels_cu/ks_tiles.cuh``): a 1-D grid, capped at 2^31 - 1
    blocks (the kernels stride over tile ids beyond the grid), on CuPy's current stream."""
    a, b, c, d = factor.pattern
    sx_f, sx_b, sy_f, sy_b = strides
    w_sk, w_sl = factor.weight_strides
    groups = a * d
    ktiles, ntiles, gtiles = -(-b // bm), -(-B // bn), -(-groups // slots)
    tiles = ktiles * ntiles * gtiles
    i32, i64 = numpy.int32, numpy.int64
    fn((min(tiles, 2**31 - 1),), (threads,),
       (X, Y, factor.tiles, i32(groups), i32(b), i32(c), i32(d), i64(B),
        i64(sx_f), i64(sx_b), i64(sy_f), i64(sy_b), i32(w_sk), i32(w_sl),
        i32(factor.conjugated), i32(ktiles), i32(gtiles), i64(tiles)),
       shared_mem=smem)
