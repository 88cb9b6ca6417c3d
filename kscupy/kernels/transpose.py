"""Out-of-place transpose of a 2-D CuPy array (``kernels_cu/transpose.cu``): a new C-order
``A.T``, tiled through shared memory.

CuPy's ``cupy.ascontiguousarray(A.T)`` is an elementwise copy whose reads or writes stride
across rows, at a fraction of a copy's bandwidth (float16 most of all). The tensor-core
kernel's batch-size-first path through the batch order (:func:`kscupy.kernels.ks_mma.
prepare_batch_last`) and a chain planned in the other layout (``planner.Relayout``) run
between two of them (:func:`around`).
"""
from __future__ import annotations

import numpy

from . import nvrtc
from .launcher import KernelRun, Launcher

__all__ = ["prepare", "transpose", "around", "name", "few_rows_name", "few_rows"]

#: Threads per block (8 warps; the kernel's WARPS).
THREADS = 256
#: Blocks of a launch, at most (the kernel strides over the rest).
MAX_BLOCKS = 1 << 20


def name(dtype, vector: int) -> str:
    """The tiled instantiation for ``dtype`` moving ``vector`` elements per access."""
    return f"ks::transpose<{nvrtc.scalar_name(dtype)}, {vector}>"


def few_rows_name(dtype) -> str:
    """The instantiation for ``dtype`` of arrays with few rows (:func:`few_rows`)."""
    return f"ks::transpose_few_rows<{nvrtc.scalar_name(dtype)}>"


def few_rows(R: int, vector: int) -> bool:
    """Whether ``R`` rows fill less than a quarter of the tiled kernel's tile (``32 *
    vector`` rows): then one thread an element of the result moves them faster (the
    kernel's comment says why)."""
    return 4 * R < 32 * vector


def _vector(A, s_r, s_c) -> int:
    """Elements per access: up to 8 bytes' worth (4 float16s, 2 floats), the most that
    divides both extents and the row stride and keeps the address aligned, where the rows
    are contiguous; else one."""
    R, C = A.shape
    v = max(1, 8 // A.dtype.itemsize)
    while v > 1 and (s_c != 1 or A.data.ptr % (v * A.dtype.itemsize)
                     or R % v or C % v or s_r % v):
        v //= 2
    return v


def prepare(A):
    """``run(A) -> A.T`` as a new C-contiguous array, for arrays with ``A``'s shape, strides,
    dtype and alignment. ``run`` launches on CuPy's current stream without synchronising.
    Strides must be whole elements (the kernel addresses elements)."""
    import cupy
    itemsize = A.dtype.itemsize
    if A.ndim != 2 or any(s % itemsize for s in A.strides):
        raise ValueError(f"transpose takes a 2-D array with strides of whole elements, got "
                         f"shape {A.shape}, strides {A.strides}")
    R, C = A.shape
    s_r, s_c = (s // itemsize for s in A.strides)
    v = _vector(A, s_r, s_c)
    device = cupy.cuda.Device().id
    i64 = numpy.int64
    if few_rows(R, v):
        fn = nvrtc.function("transpose.cu", few_rows_name(A.dtype), 0, device)
        total = R * C
        launch = Launcher(fn, (max(1, min(-(-total // THREADS), MAX_BLOCKS)),), (THREADS,), 0,
                          (i64(R), i64(s_r), i64(s_c), i64(total)))
        return KernelRun(launch, (C, R), A.dtype)
    tile = 32 * v
    col_tiles = -(-C // tile)
    tiles = -(-R // tile) * col_tiles
    fn = nvrtc.function("transpose.cu", name(A.dtype, v), 0, device)
    launch = Launcher(fn, (max(1, min(tiles, MAX_BLOCKS)),), (THREADS,), 0,
                      (i64(R), i64(C), i64(s_r), i64(s_c), i64(col_tiles), i64(tiles)))
    return KernelRun(launch, (C, R), A.dtype)


def transpose(A):
    """``A.T`` as a new C-contiguous array, through the run :func:`prepare` made for arrays
    like ``A`` (shape, strides, dtype, alignment, current device), kept for the process:
    preparing costs the host more than a small transpose takes on the GPU."""
    import cupy
    key = (A.shape, A.strides, A.dtype, A.data.ptr & 15, cupy.cuda.runtime.getDevice())
    run = _KEPT.get(key)
    if run is None:
        if len(_KEPT) >= MAX_KEPT:
            _KEPT.clear()
        run = _KEPT[key] = prepare(A)
    return run(A)


#: The runs :func:`transpose` keeps, by what they were prepared for; at most MAX_KEPT, all
#: dropped when a new one would exceed it.
_KEPT: dict = {}
MAX_KEPT = 128


def around(X, prepare_inner, result_shape):
    """``run(X) -> inner(X.T).T`` for operands like the 2-D ``X``: X transposed, the run that
    ``prepare_inner(XT)`` returns for the transposed operand (its result of shape
    ``result_shape``), the result transposed back. The three compile together
    (:func:`kscupy.kernels.nvrtc.prepare_all`); ``prepare_inner`` sees a new, uninitialised
    array shaped, strided and aligned like the transposes it will get."""
    import cupy
    there, inner, back = nvrtc.prepare_all(
        lambda: prepare(X),
        lambda: prepare_inner(cupy.empty(X.shape[::-1], X.dtype)),
        lambda: prepare(cupy.empty(result_shape, X.dtype)))
    return lambda X: back(inner(there(X)))
