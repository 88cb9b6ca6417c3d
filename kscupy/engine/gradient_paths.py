"""The values' gradient of one factor on the GPU: the ways it runs, and which one does.

Each way returns the batch sums ``dW_g = G_g X_gᴴ`` of :func:`kscupy.values_grad` for CuPy
operands of one dtype, as an ``(a, b, c, d)`` array (perhaps a view), or None where it does
not apply:

``"kernel"``
    the tensor-core kernel (:func:`kscupy.kernels.ks_values_grad.values_gradient`; float32
    sums for the 16-bit dtypes; batch-size-first with ``d > 1`` transposed first);
``"cublas"``
    cuBLAS's strided-batched GEMMs on the groups (:func:`kscupy.kernels.gemm.values_gradient`;
    batch-size-first with ``d > 1`` transposed first);
``"cublas_diagonal"``
    batch-size-first with ``d > 1`` only: each ``i``'s whole product by cuBLAS, of which
    the groups are the diagonal blocks (:func:`kscupy.kernels.gemm.values_gradient_diagonal`;
    ``d`` times the arithmetic, no pass over the operands).

**Which one.** By default the kernel, and cuBLAS for :data:`CUBLAS_DTYPES`, with
``"cublas_diagonal"`` in cuBLAS's place where the cost model prices it lower
(:func:`kscupy.engine.costs.gpu.bsf_gradient_seconds`) and its products take at most
:data:`DIAGONAL_MAX_BYTES`. Where a batch is long enough for timing to pay
(:data:`MEASURE_MIN_BATCH`) and no CUDA graph is being captured, the first gradient of a
shape instead times every way that applies on its operands (CUDA events around calls back
to back, as ``auto``'s close calls for products do: :func:`.single.pipeline_seconds`),
and the fastest is this process's choice for gradients of that shape from then on
(:func:`choice`). The ways differ by up to 4x from pattern to pattern, and in neither
direction uniformly (narrow blocks favour the kernel, one large group cuBLAS), so a
measured choice beats any fixed rule; its price is a few extra gradients, once per shape.
"""
from __future__ import annotations

import threading

import numpy

from ..core import device as devices
from ..kernels import gemm, ks_values_grad
from .costs import gpu as gpu_costs
from .single import pipeline_seconds

__all__ = ["blocks_gradient", "choice", "WAYS", "CUBLAS_DTYPES", "DIAGONAL_MAX_BYTES",
           "MEASURE_MIN_BATCH", "forget"]

#: The ways, in the order the default prefers them.
WAYS = ("kernel", "cublas", "cublas_diagonal")
#: dtypes whose gradient runs on cuBLAS by default even where the tensor-core kernel could:
#: the 16-bit ones, where cuBLAS's tensor-op GEMM (tiles larger than the kernel's) was
#: faster on most patterns of the gradients suite (benchmarks/results/gradients.json).
CUBLAS_DTYPES = ("float16", "bfloat16")
#: The most memory (bytes) the whole per-``i`` products of ``"cublas_diagonal"`` may take.
DIAGONAL_MAX_BYTES = 256 * 2**20
#: Batches of at least this many columns time the ways at a shape's first gradient; shorter
#: ones, whose gradients take a few microseconds whichever way, keep the default.
MEASURE_MIN_BATCH = 2048

_CHOICES: dict = {}        # shape key -> the way timed fastest
_LOCK = threading.Lock()


def _run(way, G, X, pattern, layout):
    if way == "kernel":
        dW = ks_values_grad.values_gradient(G, X, pattern, layout)
        return dW                                                   # (a, b, c, d)
    dW = gemm.values_gradient(G, X, pattern, layout) if way == "cublas" \
        else gemm.values_gradient_diagonal(G, X, pattern)
    return None if dW is None else dW.transpose(0, 2, 3, 1)         # from (a, d, b, c)


def _applies(way, pattern, layout, dtype) -> bool:
    a, b, c, d = pattern
    if way == "kernel":
        return devices.current().tensor_cores
    if way == "cublas_diagonal":
        return layout == "bsf" and d > 1 and \
            a * b * c * d * d * numpy.dtype(dtype).itemsize <= DIAGONAL_MAX_BYTES
    return True


def _default(pattern, layout, dtype, batch) -> tuple:
    """The ways to try in order without timing: see the module."""
    cublas = "cublas"
    if _applies("cublas_diagonal", pattern, layout, dtype):
        seconds = gpu_costs.bsf_gradient_seconds(pattern, batch, dtype, devices.current())
        if seconds["diagonal"] <= seconds["transposed"]:
            cublas = "cublas_diagonal"
    if numpy.dtype(dtype).name in CUBLAS_DTYPES:
        return (cublas, "cublas")
    return ("kernel", cublas, "cublas")


def _key(G, X, pattern, layout):
    """What decides the timed choice: the pattern, layout and dtype, the batch's power-of-two
    bucket, the device, and whether each operand lies as the layout expects."""
    batch = X.shape[1] if layout == "bsl" else X.shape[0]
    along = 1 if layout == "bsl" else 0
    lies = tuple(A.strides[along] == A.dtype.itemsize for A in (G, X))
    return (tuple(pattern), layout, X.dtype, max(batch, 1).bit_length(), lies,
            X.device.id)


def choice(G, X, pattern, layout):
    """The way this process's timing chose for gradients shaped like this one, or None."""
    return _CHOICES.get(_key(G, X, pattern, layout))


def forget():
    """Forget every timed choice (tests; a process whose GPU load changed)."""
    with _LOCK:
        _CHOICES.clear()


def blocks_gradient(G, X, pattern, layout):
    """The ``(a, b, c, d)`` batch sums (perhaps a view) for CuPy operands ``G`` and ``X`` of
    one dtype, the way :func:`choice` or the default says (see the module), or None where
    no way applies (the caller then computes them with CuPy's own products)."""
    import cupy
    batch = X.shape[1] if layout == "bsl" else X.shape[0]
    key = _key(G, X, pattern, layout)
    chosen = _CHOICES.get(key)
    if chosen is not None:
        dW = _run(chosen, G, X, pattern, layout)
        if dW is not None:
            return dW
    order = _default(pattern, layout, X.dtype, batch)
    timed = [w for w in WAYS if _applies(w, pattern, layout, X.dtype)]
    if (chosen is None and len(timed) > 1 and batch >= MEASURE_MIN_BATCH
            and not cupy.cuda.get_current_stream().is_capturing()):
        return _timed(G, X, pattern, layout, key, timed)
    for way in dict.fromkeys(order):
        dW = _run(way, G, X, pattern, layout)
        if dW is not None:
            return dW
    return None


def _timed(G, X, pattern, layout, key, ways):
    """Every way of ``ways`` timed on the operands; the fastest kept as the choice for
    ``key``, and its gradient returned."""
    results = {}

    def run_of(way):
        def run(_):
            results[way] = _run(way, G, X, pattern, layout)
            return results[way]
        return run
    ways = [w for w in ways if run_of(w)(None) is not None]      # compiled, and applies
    if not ways:
        return None
    seconds = pipeline_seconds([run_of(w) for w in ways], X)
    best = ways[int(numpy.argmin(seconds))]
    with _LOCK:
        _CHOICES[key] = best
    return results[best]
