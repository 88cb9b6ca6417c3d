"""The values' gradient of one factor on the tensor cores (``kernels_cu/ks_values_grad.cu``).

Per group ``g = i*d + j`` the batch sum ``dW_g = G_g X_gᴴ`` (``G_g``: the group's ``b``
rows of the product's gradient, ``X_g``: its ``c`` rows of the operand), a GEMM whose
reduction runs over the batch. A block owns a ``bm × bn`` tile of one group's ``b × c``
gradient and reduces it over one split of the batch; where the groups' tiles alone would
leave the GPU idle, the batch is split (:func:`splits`) and the splits' slices are added
afterwards (deterministic, unlike atomic adds). Operands are read where they lie:
batch-size-last rows along the batch, batch-size-first rows along the features when
``d == 1`` (batch-size-first operands with ``d > 1`` are transposed first, as the cuBLAS
path does).

Precision: float32 and complex64 in 3xTF32 (float32-grade), float64 and complex128 in DMMA,
float16 with float32 sums, returned in float32 (the caller rounds once).
"""
from __future__ import annotations

import functools

import numpy

from ..core import device as devices
from . import nvrtc
from .ks_mma import ORDER_BATCH, ORDER_INGROUP, MmaConfig, copy_vector

__all__ = ["config", "name", "smem_bytes", "smem_probe_name", "splits", "values_gradient",
           "LAYOUTS"]

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


@functools.lru_cache(maxsize=None)
def config(dtype, layout: str) -> MmaConfig:
    """The tile of ``dtype`` in ``layout``: 64 × 64 outputs per block on four warps of
    32 × 32, chunks of 128 bytes of batch columns, three stages. As ks_mma's tiles: G is its
    W (stored K-major in bsl, M-major in bsf) and X its X (the in-group order's K-major
    tile in bsl, the batch order's N-major one in bsf)."""
    itemsize = numpy.dtype(dtype).itemsize
    order = ORDER_INGROUP if layout == "bsl" else ORDER_BATCH
    return MmaConfig(slots=1, bm=64, bn=64, bk=128 // itemsize, wm=2, wn=2, stages=3,
                     order=order)


def smem_bytes(dtype, layout: str) -> int:
    """Dynamic shared memory of a launch (the kernel's ``MmaLayout::SMEM_BYTES``)."""
    return config(dtype, layout).smem_bytes(numpy.dtype(dtype).itemsize,
                                            transposed=layout == "bsf")


def name(dtype, layout: str, vector: int, precision: str = "default") -> str:
    """The instantiation for ``dtype`` in ``layout``, copying ``vector`` elements at once."""
    cfg = config(dtype, layout)
    return (f"ks::ks_values_grad<{nvrtc.scalar_name(dtype)}, {0 if precision == 'default' else 1}, "
            f"{cfg.bm}, {cfg.bn}, {cfg.bk}, {cfg.wm}, {cfg.wn}, {cfg.stages}, "
            f"{LAYOUTS[layout]}, {vector}>")


def smem_probe_name(dtype, layout: str) -> str:
    """The kernel that reports :func:`smem_bytes` as the source computes it (a GPU test
    compares the two)."""
    cfg = config(dtype, layout)
    return (f"ks::ks_values_grad_smem<{nvrtc.scalar_name(dtype)}, {cfg.bm}, {cfg.bn}, "
            f"{cfg.bk}, {cfg.wm}, {cfg.wn}, {cfg.stages}, {LAYOUTS[layout]}>")


def splits(pattern, B: int, dtype, layout: str, sms: int) -> tuple:
    """``(splits, span)``: the batch of ``B`` columns cut into ``splits`` runs of ``span``
    columns (a whole number of chunks; the last run may be shorter), enough for
    :data:`BLOCKS_PER_SM` blocks per multiprocessor with at least
    :data:`MIN_CHUNKS_PER_SPLIT` chunks each."""
    a, b, c, d = pattern
    cfg = config(dtype, layout)
    tiles = a * d * -(-b // cfg.bm) * -(-c // cfg.bn)
    chunks = -(-B // cfg.bk)
    wanted = -(-BLOCKS_PER_SM * sms // tiles)
    count = max(1, min(wanted, chunks // MIN_CHUNKS_PER_SPLIT, MAX_SPLITS))
    span = -(-chunks // count) * cfg.bk
    return -(-B // span), span


def values_gradient(G, X, pattern, layout: str, sms: int | None = None):
    """The ``(a, d, b, c)`` blocks ``dW_g = G_g X_gᴴ`` for CuPy operands of one dtype:
    ``X`` ``(N, B)`` and ``G`` ``(M, B)`` in ``"bsl"``, ``(B, N)`` and ``(B, M)`` in
    ``"bsf"``. float16 operands give float32 sums. None where the kernel does not apply: a
    device without tensor cores (:attr:`DeviceFacts.tensor_cores`) or sizes beyond its 32-bit
    indices (the caller then takes cuBLAS's path). ``sms``: the multiprocessors the batch
    split plans for (default: the current device's)."""
    import cupy
    from . import transpose
    facts = devices.current()
    if not facts.tensor_cores:
        return None
    if G.dtype != X.dtype:
        raise TypeError(f"values_gradient takes G and X of one dtype, got {G.dtype} and "
                        f"{X.dtype}")
    a, b, c, d = pattern
    dtype = X.dtype
    out_dtype = numpy.dtype(numpy.float32) if dtype == numpy.float16 else dtype
    B = X.shape[1] if layout == "bsl" else X.shape[0]
    if B == 0:
        return cupy.zeros((a, d, b, c), out_dtype)
    if layout == "bsf" and d > 1:
        return values_gradient(transpose.transpose(G), transpose.transpose(X), pattern, "bsl",
                               sms)
    cfg = config(dtype, layout)
    tiles = -(-b // cfg.bm) * -(-c // cfg.bn)
    if max(b, c) > _INT32_MAX // 2 or a * d * tiles > _INT32_MAX:
        return None
    # the copies run along the batch in bsl, along the features in bsf: that axis contiguous
    isz, contiguous = dtype.itemsize, 1 if layout == "bsl" else 0
    if X.strides[contiguous] != isz or any(s % isz for s in X.strides):
        X = cupy.ascontiguousarray(X)
    if G.strides[contiguous] != isz or any(s % isz for s in G.strides):
        G = cupy.ascontiguousarray(G)
    sx, sg = (s // isz for s in X.strides), (s // isz for s in G.strides)
    if layout == "bsl":
        (sx_f, sx_b), (sg_f, sg_b) = sx, sg
    else:
        (sx_b, sx_f), (sg_b, sg_f) = sx, sg
    count, span = splits(pattern, B, dtype, layout, facts.sms if sms is None else sms)
    addresses = (G.data.ptr // isz, X.data.ptr // isz) \
        if G.data.ptr % isz == 0 and X.data.ptr % isz == 0 else (1,)
    if layout == "bsl":     # a vector along the batch: rows, the split and the batch agree
        vector = copy_vector(isz, True, sg_f, sx_f, span, B, *addresses)
    else:                   # along the features: rows of b and c, and both batch strides
        vector = copy_vector(isz, True, b, c, sg_b, sx_b, *addresses)
    smem = smem_bytes(dtype, layout)
    fn = nvrtc.function("ks_values_grad.cu", name(dtype, layout, vector), smem,
                        cupy.cuda.Device().id)
    dW = cupy.empty((count, a, d, b, c), out_dtype)
    i32, i64 = numpy.int32, numpy.int64
    fn((a * d * tiles, count), (cfg.threads,),
       (G, X, dW, i32(a), i32(b), i32(c), i32(d), i64(B), i64(span), i64(sg_f), i64(sg_b),
        i64(sx_f), i64(sx_b), i32(-(-b // cfg.bm)), i32(-(-c // cfg.bn))),
       shared_mem=smem)
    return dW[0] if count == 1 else dW.sum(axis=0)
