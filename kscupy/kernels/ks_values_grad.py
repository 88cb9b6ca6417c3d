"""The values' gradient of one factor on the tensor cores (``kernels_cu/ks_values_grad.cu``).

Per group ``g = i*d + j`` the batch sum ``dW_g = G_g X_gᴴ`` (``G_g``: the group's ``b``
rows of the product's gradient, ``X_g``: its ``c`` rows of the operand), a GEMM whose
reduction runs over the batch. A block owns a ``bm × bn`` tile of one group's ``b × c``
gradient and reduces it over one split of the batch; where the groups' tiles alone would
leave the GPU idle, the batch is split (:func:`splits`) and the last block of each tile
adds the splits' slices in order (one launch, deterministic, unlike atomic adds). Operands
are read where they lie: batch-size-last rows along the batch, batch-size-first rows along
the features when ``d == 1`` (batch-size-first operands with ``d > 1`` are transposed
first, as the cuBLAS path does). The gradient comes out in the values' canonical order.

Precision: float32 and complex64 in 3xTF32 (float32-grade), float64 and complex128 in DMMA,
float16 and bfloat16 with float32 sums, returned in float32 (the caller rounds once).
"""
from __future__ import annotations

import functools

import numpy

from ..core import arrays, device as devices
from . import nvrtc
from .ks_mma import ORDER_BATCH, ORDER_INGROUP, MmaConfig, copy_vector

__all__ = ["config", "tile_for", "name", "smem_bytes", "smem_probe_name", "splits",
           "values_gradient", "values_gradient_run", "LAYOUTS", "TILES"]

#: LAYOUT in the kernel: 0 batch-size-last, 1 batch-size-first with d == 1.
LAYOUTS = {"bsl": 0, "bsf": 1}
#: Blocks a launch aims for per multiprocessor before it splits the batch no further.
BLOCKS_PER_SM = 4
#: A split spans at least this many chunks of the batch (the pipeline's refills and the
#: slices' sum stay small against the products).
MIN_CHUNKS_PER_SPLIT = 16
#: The most splits (gridDim.y).
MAX_SPLITS = 65535
_INT32_MAX = 2**31 - 1


#: The tiles: "small" (64 × 64 outputs per block on four warps of 32 × 32), and for the
#: 16-bit dtypes also "large" (128 × 128 on eight warps of 64 × 32, which reuse each chunk
#: more). See :func:`tile_for`.
TILES = ("small", "large")


@functools.lru_cache(maxsize=None)
def config(dtype, layout: str, tile: str = "small") -> MmaConfig:
    """The ``tile`` of ``dtype`` in ``layout``: chunks of 128 bytes of batch columns, three
    stages (:data:`TILES`; dtypes other than the 16-bit ones have the small tile only). As
    ks_mma's tiles: G is its W (stored K-major in bsl, M-major in bsf) and X its X (the
    in-group order's K-major tile in bsl, the batch order's N-major one in bsf)."""
    if tile not in TILES:
        raise ValueError(f"tile must be one of {TILES}, got {tile!r}")
    itemsize = numpy.dtype(dtype).itemsize
    order = ORDER_INGROUP if layout == "bsl" else ORDER_BATCH
    if arrays.is_half(dtype) and tile == "large":
        return MmaConfig(slots=1, bm=128, bn=128, bk=128 // itemsize, wm=2, wn=4, stages=3,
                         order=order)
    return MmaConfig(slots=1, bm=64, bn=64, bk=128 // itemsize, wm=2, wn=2, stages=3,
                     order=order)


def tile_for(pattern, dtype, sms: int) -> str:
    """The tile of a gradient of ``pattern``: for the 16-bit dtypes the large one where its
    tiles alone fill the ``sms`` multiprocessors and ``b`` and ``c`` waste at most a tenth
    of them in padding; the small one elsewhere (the large tile's eight warps take a whole
    multiprocessor's registers, and with few or ragged tiles it leaves the GPU idle:
    ``benchmarks/probe_values_grad_tiles.py``)."""
    if not arrays.is_half(dtype):
        return "small"
    a, b, c, d = pattern
    large = config(dtype, "bsl", "large")
    tiles_k, tiles_l = -(-b // large.bm), -(-c // large.bn)
    filled = b * c / (tiles_k * large.bm * tiles_l * large.bn)
    return "large" if a * d * tiles_k * tiles_l >= sms and filled >= 0.9 else "small"


def smem_bytes(dtype, layout: str, tile: str = "small") -> int:
    """Dynamic shared memory of a launch (the kernel's ``MmaLayout::SMEM_BYTES``)."""
    return config(dtype, layout, tile).smem_bytes(numpy.dtype(dtype).itemsize,
                                                  transposed=layout == "bsf")


def name(dtype, layout: str, vector: int, precision: str = "default",
         tile: str = "small") -> str:
    """The instantiation for ``dtype`` in ``layout`` and ``tile``, copying ``vector``
    elements at once."""
    cfg = config(dtype, layout, tile)
    return (f"ks::ks_values_grad<{nvrtc.scalar_name(dtype)}, {0 if precision == 'default' else 1}, "
            f"{cfg.bm}, {cfg.bn}, {cfg.bk}, {cfg.wm}, {cfg.wn}, {cfg.stages}, "
            f"{LAYOUTS[layout]}, {vector}>")


def smem_probe_name(dtype, layout: str, tile: str = "small") -> str:
    """The kernel that reports :func:`smem_bytes` as the source computes it (a GPU test
    compares the two)."""
    cfg = config(dtype, layout, tile)
    return (f"ks::ks_values_grad_smem<{nvrtc.scalar_name(dtype)}, {cfg.bm}, {cfg.bn}, "
            f"{cfg.bk}, {cfg.wm}, {cfg.wn}, {cfg.stages}, {LAYOUTS[layout]}>")


def splits(pattern, B: int, dtype, layout: str, sms: int) -> tuple:
    """``(splits, span)``: the batch of ``B`` columns cut into ``splits`` runs of ``span``
    columns (a whole number of chunks; the last run may be shorter), enough for
    :data:`BLOCKS_PER_SM` blocks per multiprocessor with at least
    :data:`MIN_CHUNKS_PER_SPLIT` chunks each."""
    a, b, c, d = pattern
    cfg = config(dtype, layout, tile_for(pattern, dtype, sms))
    tiles = a * d * -(-b // cfg.bm) * -(-c // cfg.bn)
    chunks = -(-B // cfg.bk)
    wanted = -(-BLOCKS_PER_SM * sms // tiles)
    count = max(1, min(wanted, chunks // MIN_CHUNKS_PER_SPLIT, MAX_SPLITS))
    span = -(-chunks // count) * cfg.bk
    return -(-B // span), span


def values_gradient(G, X, pattern, layout: str, sms: int | None = None):
    """The gradient blocks ``dW[i, k, l, j]`` (the canonical ``(a, b, c, d)`` order of the
    values) of ``dW_g = G_g X_gᴴ`` for CuPy operands of one dtype: ``X`` ``(N, B)`` and ``G``
    ``(M, B)`` in ``"bsl"``, ``(B, N)`` and ``(B, M)`` in ``"bsf"``. The 16-bit dtypes give
    float32 sums. None where the kernel does not apply: a device without tensor cores
    (:attr:`DeviceFacts.tensor_cores`) or sizes beyond its 32-bit indices (the caller then
    takes cuBLAS's path). ``sms``: the multiprocessors the batch split plans for (default:
    the current device's). The launch for operands like these is prepared once
    (:func:`_plan`) and kept for the process."""
    import cupy
    from . import transpose
    facts = devices.current()
    if not facts.tensor_cores:
        return None
    if G.dtype != X.dtype:
        raise TypeError(f"values_gradient takes G and X of one dtype, got {G.dtype} and "
                        f"{X.dtype}")
    a, b, c, d = pattern
    B = X.shape[1] if layout == "bsl" else X.shape[0]
    if B == 0:
        return cupy.zeros(pattern, _gradient_dtype(X.dtype))
    if layout == "bsf" and d > 1:
        return values_gradient(transpose.transpose(G), transpose.transpose(X), pattern, "bsl",
                               sms)
    X, G = (A if _addressed(A, layout) else cupy.ascontiguousarray(A) for A in (X, G))
    run = values_gradient_run(G, X, pattern, layout, sms)
    return None if run is None else run(G, X)


def values_gradient_run(G, X, pattern, layout: str, sms: int | None = None):
    """``run(G, X)``: :func:`values_gradient` prepared now for operands shaped, strided and
    aligned like these, each call the launch; None where it would copy or transpose them
    first, or does not apply (or the batch is empty)."""
    import cupy
    facts = devices.current()
    B = X.shape[1] if layout == "bsl" else X.shape[0]
    if not facts.tensor_cores or G.dtype != X.dtype or B == 0 or \
            (layout == "bsf" and pattern[3] > 1) or \
            not (_addressed(G, layout) and _addressed(X, layout)):
        return None
    return _plan(tuple(pattern), layout, X.dtype, G.strides, X.shape, X.strides,
                 G.data.ptr & 15, X.data.ptr & 15, facts.sms if sms is None else sms,
                 cupy.cuda.runtime.getDevice())


def _addressed(A, layout: str) -> bool:
    """Whether the kernel reads ``A`` where it lies. Its copies run along ``A``'s second axis
    (the batch in bsl, the features in bsf), which must be its unit stride: in bsl any row
    stride of whole elements; in bsf C order, the only operands that layout has been run on
    (the kernel takes a batch stride, but views reach it copied)."""
    isz = A.dtype.itemsize
    if layout == "bsf":
        return A.flags.c_contiguous
    return A.strides[1] == isz and not any(s % isz for s in A.strides)


def _gradient_dtype(dtype) -> numpy.dtype:
    """The gradient's dtype for operands of ``dtype``: float32 sums for the 16-bit dtypes."""
    return numpy.dtype(numpy.float32) if arrays.is_half(dtype) else numpy.dtype(dtype)


class _Run:
    """``run(G, X) -> dW`` for operands like those :func:`_plan` was given: allocates the
    gradient (and, with several splits, the slices and the tiles' arrival counters, zeroed)
    and launches on the current stream."""
    __slots__ = ("launch", "shape", "dtype", "work_bytes", "counter_bytes")

    def __init__(self, launch, shape, dtype, work_bytes, counter_bytes):
        self.launch, self.shape, self.dtype = launch, shape, dtype
        self.work_bytes, self.counter_bytes = work_bytes, counter_bytes

    def __call__(self, G, X):
        import cupy
        dW = cupy.ndarray(self.shape, self.dtype)
        if not self.work_bytes:
            self.launch.with_pointers(G.data.ptr, X.data.ptr, dW.data.ptr, 0, 0)
            return dW
        scratch = cupy.ndarray((self.work_bytes + self.counter_bytes,), numpy.uint8)
        work = scratch.data.ptr
        cupy.cuda.runtime.memsetAsync(work + self.work_bytes, 0, self.counter_bytes,
                                      cupy.cuda.get_current_stream().ptr)
        self.launch.with_pointers(G.data.ptr, X.data.ptr, dW.data.ptr, work,
                                  work + self.work_bytes)
        return dW


@functools.lru_cache(maxsize=256)
def _plan(pattern, layout, dtype, g_strides, x_shape, x_strides, g_align, x_align, sms,
          device_id):
    """The :class:`_Run` for operands of these strides (bytes; the contiguous axis checked
    by the caller), dtype and addresses modulo 16 bytes, ``X`` of this shape (``G``'s
    follows from it and the pattern), on device ``device_id`` planning for ``sms``
    multiprocessors; None beyond the kernel's 32-bit indices."""
    from .launcher import Launcher
    a, b, c, d = pattern
    tile = tile_for(pattern, dtype, sms)
    cfg = config(dtype, layout, tile)
    tiles_k, tiles_l = -(-b // cfg.bm), -(-c // cfg.bn)
    blocks = a * d * tiles_k * tiles_l
    if max(b, c) > _INT32_MAX // 2 or blocks > _INT32_MAX:
        return None
    isz = dtype.itemsize
    B = x_shape[1] if layout == "bsl" else x_shape[0]
    (sx_f, sx_b), (sg_f, sg_b) = ((s // isz for s in x_strides), (s // isz for s in g_strides))
    if layout == "bsf":
        sx_f, sx_b, sg_f, sg_b = sx_b, sx_f, sg_b, sg_f
    count, span = splits(pattern, B, dtype, layout, sms)
    # a copy's first element: its offset from an aligned address, in elements (or, off
    # the elements' own alignment, one that forbids vectors)
    addresses = (g_align // isz, x_align // isz) if (g_align | x_align) % isz == 0 else (1,)
    if layout == "bsl":     # a vector along the batch: rows, the split and the batch agree
        vector = copy_vector(isz, True, sg_f, sx_f, span, B, *addresses)
    else:                   # along the features: rows of b and c, and both batch strides
        vector = copy_vector(isz, True, b, c, sg_b, sx_b, *addresses)
    smem = smem_bytes(dtype, layout, tile)
    fn = nvrtc.function("ks_values_grad.cu", name(dtype, layout, vector, tile=tile), smem,
                        device_id)
    i32, i64 = numpy.int32, numpy.int64
    launch = Launcher(fn, (blocks, count), (cfg.threads,), smem,
                      (i32(a), i32(b), i32(c), i32(d), i64(B), i64(span), i64(sg_f),
                       i64(sg_b), i64(sx_f), i64(sx_b), i32(tiles_k), i32(tiles_l)),
                      pointers=5)
    out_dtype = _gradient_dtype(dtype)
    work_bytes = blocks * count * cfg.bm * cfg.bn * out_dtype.itemsize if count > 1 else 0
    return _Run(launch, pattern, out_dtype, work_bytes, 4 * blocks if count > 1 else 0)
