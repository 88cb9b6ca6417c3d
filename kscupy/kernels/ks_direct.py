"""The direct kernel (``kernels_cu/ks_direct.cu``): one thread per output element, the sum
over the block row read straight from global memory.

It is what ``auto`` runs while the tuned kernel of a problem compiles in the background
(:mod:`kscupy.kernels.nvrtc`): one instantiation per dtype, with the pattern, the batch and
the strides as run-time arguments, which NVRTC compiles several times faster than a tuned
instantiation. Any pattern, dtype, layout, strided operand and view
(transposed, conjugated); slow for wide blocks and batches (no tiling, no data reuse on
chip), which is why ``auto`` never chooses it for its own sake.
"""
from __future__ import annotations

import numpy

from . import nvrtc
from .launcher import KernelRun, Launcher
from .operands import copying_odd_strides, geometry

__all__ = ["prepare", "compile_ahead", "THREADS", "name"]

#: Threads per block.
THREADS = 256
#: Blocks of a launch, at most (the kernel strides over the rest).
MAX_BLOCKS = 65536


def name(dtype) -> str:
    """The instantiation for ``dtype``."""
    return f"ks::ks_direct<{nvrtc.scalar_name(dtype)}>"


def compile_ahead(dtype, device_id: int):
    """Start compiling the instantiation for ``dtype`` in the background (see
    :func:`kscupy.kernels.nvrtc.compile_ahead`): a KSMatrix on the GPU asks for it when it is
    made, so that the first product of a new kernel rarely waits for the direct one."""
    nvrtc.compile_ahead("ks_direct.cu", name(dtype), 0, device_id)


@copying_odd_strides
def prepare(factor, X, layout, config=None, *, x_rows=None, y_rows=None):
    """``run(X) -> Y`` computing ``K @ X`` (``layout="bsl"``, X ``(N, B)``) or ``X @ K.T``
    (``"bsf"``, X ``(B, N)``) for the :class:`~kscupy.core.factor.Factor` ``factor`` and operands
    with ``X``'s shape, strides and dtype (``factor.dtype == X.dtype``). ``config`` is unused
    (the kernel has no tiles). ``run`` launches on CuPy's current stream and returns a new
    C-contiguous result without synchronising.

    ``x_rows`` (int32, ``N``): read input feature ``f`` from feature ``x_rows[f]`` of X (a
    gather folded into the reads); ``y_rows`` (int32, ``M``): write output feature ``r`` to
    feature ``y_rows[r]`` of Y (a scatter folded into the writes); CuPy arrays or None."""
    import cupy
    dtype = X.dtype
    if factor.dtype != dtype:
        raise TypeError(f"kernel operands must share a dtype, got {factor.dtype} and {dtype}")
    a, b, c, d = factor.pattern
    M = factor.shape[0]
    B, (sx_f, sx_b, sy_f, sy_b), y_shape = geometry(X, layout, M)
    w_sk, w_sl = factor.weight_strides
    fn = nvrtc.function("ks_direct.cu", name(dtype), 0, cupy.cuda.Device().id)
    blocks = min(-(-M * B // THREADS), MAX_BLOCKS)
    i32, i64 = numpy.int32, numpy.int64
    launch = Launcher(fn, (blocks,), (THREADS,), 0,
                      (factor.tiles, x_rows, y_rows, i32(b), i32(c), i32(d), i64(M), i64(B),
                       i64(sx_f), i64(sx_b), i64(sy_f), i64(sy_b), i32(w_sk), i32(w_sl),
                       i32(factor.conjugated), i32(sy_b == 1)))
    return KernelRun(launch, y_shape, dtype)
