"""The values' gradient of one factor on the GPU: the ways it runs, and which one does.

Each way computes the batch sums ``dW_g = G_g X_gᴴ`` of :func:`kscupy.values_grad` for
CuPy operands of one dtype, as an ``(a, b, c, d)`` array, or gives None where it does not
apply. The kernel writes the values' order; cuBLAS's ways leave ``(a, d, b, c)`` blocks,
returned as a view in the values' order (:func:`_canonical`):

``"kernel"``
    the tensor-core kernel (:func:`kscupy.kernels.ks_values_grad.values_gradient`; float32
    sums for the 16-bit dtypes; batch-size-first with ``d > 1`` transposed first);
``"cublas"``
    cuBLAS's strided-batched GEMMs on the groups (:func:`kscupy.kernels.gemm.values_gradient`;
    batch-size-first with ``d > 1`` transposed first), the batch cut into chunks where the
    groups alone give cuBLAS few output tiles (:func:`kscupy.kernels.gemm.batch_chunks`);
``"cublas_whole"``
    the same with the batch whole, where ``"cublas"`` cuts it: cuBLAS reduces a long batch
    on its own, and on some patterns (one large group) faster than the chunks and their sum;
    timed, never the default;
``"cublas_diagonal"``
    batch-size-first with ``d > 1`` only: each ``i``'s whole product by cuBLAS, of which
    the groups are the diagonal blocks (:func:`kscupy.kernels.gemm.values_gradient_diagonal`;
    ``d`` times the arithmetic, no pass over the operands).

**Which one.** By default the kernel, and cuBLAS for :data:`CUBLAS_DTYPES`, with
``"cublas_diagonal"`` in cuBLAS's place where the cost model prices it lower
(:func:`kscupy.engine.costs.gpu.bsf_gradient_seconds`) and its products take at most
:data:`DIAGONAL_MAX_BYTES`. Where :data:`MEASURE` is on (the default; the environment
variable ``KSCUPY_GRADIENT_TIMING=0`` turns it off), a batch has at least
:data:`MEASURE_MIN_BATCH` columns and no CUDA graph is being captured, the first gradient
of a shape instead runs every way that applies on its operands, each finished as the
caller finishes it (rounded to the gradient's dtype), and times them as ``auto``'s close
calls for products do (:func:`.single.pipeline_seconds`: three rounds of four calls back to
back between CUDA events, each behind one untimed call, the ways' rounds taking turns): the
fastest is this process's choice for gradients of that shape from then on
(:func:`choice`). The ways differ by up to 4x from pattern to pattern, in no fixed
direction (narrow blocks favour the kernel, one large group cuBLAS), so a measured choice
beats any fixed rule; its price, once per shape, is sixteen gradients of each way. The
ways round differently (the kernel's float32 sums in another order than cuBLAS's), so with
timing on, which way a process takes, and the last bits of its gradients, may differ from
one process to the next.

**Repeated gradients.** Once a way has run for operands of some shape, strides, alignment
and device, its planned run is kept for them (:data:`_PLANS`): a gradient repeated in a
training loop is that lookup and the run, where the small ones otherwise spend as much
host time on the way's checks and lookups as on their calls.
"""
from __future__ import annotations

import functools
import os
import threading

import numpy

from ..core import captured
from ..core import device as devices
from ..core.factor import block_dense_bytes
from ..kernels import gemm, ks_values_grad
from .costs import gpu as gpu_costs
from .single import pipeline_seconds

__all__ = ["values_gradient", "choice", "forget", "WAYS", "CUBLAS_DTYPES",
           "DIAGONAL_MAX_BYTES", "MEASURE", "MEASURE_MIN_BATCH"]

#: The ways, in the order the default prefers them.
WAYS = ("kernel", "cublas", "cublas_whole", "cublas_diagonal")
#: dtypes whose gradient runs on cuBLAS by default even where the tensor-core kernel could:
#: the 16-bit ones, where cuBLAS's tensor-op GEMM (tiles larger than the kernel's) was
#: faster on most patterns of the gradients suite (benchmarks/results/gradients.json).
CUBLAS_DTYPES = ("float16", "bfloat16")
#: The most memory (bytes) the whole per-``i`` products of ``"cublas_diagonal"`` may take.
DIAGONAL_MAX_BYTES = 256 * 2**20
#: Whether a shape's first gradient times the ways (see the module).
MEASURE = os.environ.get("KSCUPY_GRADIENT_TIMING", "1") not in ("", "0")
#: Batches of at least this many columns are timed; shorter ones, whose gradients take a
#: few microseconds whichever way, keep the default.
MEASURE_MIN_BATCH = 2048

_CHOICES: dict = {}        # shape key -> the way timed fastest
#: Operand signature (:func:`_exact`) -> ``run(G, X)``: a way's planned run, of
#: the way chosen or the default (see the module); at most MAX_PLANS, all dropped when a new
#: one would exceed it, and by :func:`forget`.
_PLANS: dict = {}
MAX_PLANS = 256
_LOCK = threading.Lock()


def _run(way, G, X, pattern, layout):
    """Way ``way``'s ``(a, b, c, d)`` sums (perhaps a view), or None where it declines."""
    if way == "kernel":
        return ks_values_grad.values_gradient(G, X, pattern, layout)
    if way == "cublas_diagonal":
        dW = gemm.values_gradient_diagonal(G, X, pattern)
    else:
        dW = gemm.values_gradient(G, X, pattern, layout, chunks=_chunks(way))
    return None if dW is None else _in_values_order(way)(dW)


def _canonical(blocks):
    """``(a, d, b, c)`` blocks as a view in the values' ``(a, b, c, d)`` order, wherever they
    lie: no pass over them. cuBLAS's blocks lie ``j``-major in memory, ``(d, a, b, c)``
    (batch-size-first with ``d = 1``: each block column-major), so the view is not always
    in C order; its users' next pass (an optimizer's update, a rounding, a copy with
    ``ascontiguousarray``) reads it in place of a reordering copy here, a pass saved."""
    return blocks.transpose(0, 2, 3, 1)


def _compact(blocks):
    """The blocks in the values' order as a new C-order array: the diagonal way's blocks
    are a view of its ``d`` times larger products, which a view of them would keep
    alive."""
    import cupy
    return cupy.ascontiguousarray(_canonical(blocks))


def _in_values_order(way):
    """``(a, b, c, d)`` sums from way ``way``'s result: the kernel's as they are, cuBLAS's
    blocks as a view (:func:`_canonical`), the diagonal way's compact (:func:`_compact`)."""
    if way == "kernel":
        return lambda sums: sums
    return _compact if way == "cublas_diagonal" else _canonical


def _way_run(way, G, X, pattern, layout):
    """``run(G, X)``: way ``way`` planned for operands laid out like these (its ``(a, d, b,
    c)`` blocks; the kernel's ``(a, b, c, d)`` sums), or None where it does not plan them (it
    copies or transposes them first, or declines)."""
    if way == "kernel":
        return ks_values_grad.values_gradient_run(G, X, pattern, layout)
    if way == "cublas_diagonal":
        return gemm.values_gradient_diagonal_run(G, X, pattern)
    return gemm.values_gradient_run(G, X, pattern, layout, chunks=_chunks(way))


def _chunks(way):
    """The batch chunks of a cuBLAS way: the whole batch, or as many as
    :func:`kscupy.kernels.gemm.batch_chunks` says (None)."""
    return 1 if way == "cublas_whole" else None


def _run_and_plan(way, G, X, pattern, layout, exact):
    """:func:`_run`, keeping the way's planned run for operands like these as
    ``_PLANS[exact]`` where the way plans them (those it does not go through :func:`_run`
    each time)."""
    run = _way_run(way, G, X, pattern, layout)
    blocks = None if run is None else run(G, X)
    if blocks is None:
        return _run(way, G, X, pattern, layout)
    reorder = _in_values_order(way)
    with _LOCK:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[exact] = lambda G, X: reorder(run(G, X))
    return reorder(blocks)


def _applies(way, pattern, layout, dtype, batch, device) -> bool:
    d = pattern[3]
    if way == "kernel":
        return device.tensor_cores
    if way == "cublas_whole":
        return gemm.batch_chunks(pattern, batch, device.sms, dtype) > 1
    if way == "cublas_diagonal":
        return layout == "bsf" and d > 1 and \
            block_dense_bytes(pattern, numpy.dtype(dtype).itemsize) <= DIAGONAL_MAX_BYTES
    return True


@functools.lru_cache(maxsize=1024)
def _ways(pattern, layout, dtype, batch, device) -> tuple:
    """``(default, timed)``: the ways to try in order without timing (see the module), and
    every way that applies."""
    applies = [w for w in WAYS if _applies(w, pattern, layout, dtype, batch, device)]
    cublas = "cublas"
    if "cublas_diagonal" in applies:
        seconds = gpu_costs.bsf_gradient_seconds(pattern, batch, dtype, device)
        if seconds["diagonal"] <= seconds["transposed"]:
            cublas = "cublas_diagonal"
    default = (cublas, "cublas") if numpy.dtype(dtype).name in CUBLAS_DTYPES \
        else ("kernel", cublas, "cublas")
    return tuple(w for w in dict.fromkeys(default) if w in applies), tuple(applies)


def _exact(G, X, pattern, layout):
    """What a planned way depends on: the pattern, layout, dtype, both operands' shapes,
    strides and addresses modulo 16 bytes, and the device."""
    return (pattern, layout, X.dtype, G.dtype, G.shape, G.strides, X.shape, X.strides,
            G.data.ptr & 15, X.data.ptr & 15, X.data.device_id)


def _key(G, X, pattern, layout):
    """What decides the timed choice: the pattern, layout and dtype, the batch's power-of-two
    bucket, whether each operand's batch axis is its contiguous one and where it starts
    within 16 bytes (the copies' widths), and the device."""
    batch = X.shape[1] if layout == "bsl" else X.shape[0]
    along = 1 if layout == "bsl" else 0
    lies = tuple((A.strides[along] == A.dtype.itemsize, A.data.ptr & 15) for A in (G, X))
    return (pattern, layout, X.dtype, max(batch, 1).bit_length(), lies, X.data.device_id)


def choice(G, X, pattern, layout):
    """The way this process's timing chose for gradients shaped like this one, or None."""
    return _CHOICES.get(_key(G, X, tuple(pattern), layout))


def forget():
    """Forget every timed choice and every plan (tests; a process whose GPU load
    changed)."""
    with _LOCK:
        _CHOICES.clear()
        _PLANS.clear()


def values_gradient(G, X, pattern, layout, finish=lambda dW: dW):
    """``finish`` of the ``(a, b, c, d)`` batch sums for CuPy operands ``G`` and ``X`` of one
    dtype, computed the way :func:`choice` or the default says (see the module), or None
    where no way applies (the caller then computes them with CuPy's own products).
    ``finish(dW)``: the caller's last pass (the gradient's order and dtype), timed with
    each way."""
    pattern = tuple(pattern)
    exact = _exact(G, X, pattern, layout)
    planned = _PLANS.get(exact)
    if planned is not None:
        return finish(planned(G, X))
    batch = X.shape[1] if layout == "bsl" else X.shape[0]
    key = _key(G, X, pattern, layout)
    chosen = _CHOICES.get(key)
    if chosen is not None:
        dW = _run_and_plan(chosen, G, X, pattern, layout, exact)
        if dW is not None:
            return finish(dW)
    default, timed = _ways(pattern, layout, X.dtype, batch, devices.current())
    capturing = captured.capturing()
    if (chosen is None and MEASURE and len(timed) > 1 and batch >= MEASURE_MIN_BATCH
            and not capturing):
        return _timed(G, X, pattern, layout, finish, key, timed)
    for way in default:
        # (the default is not planned while a graph is captured: the shape is timed after
        # the capture)
        dW = _run(way, G, X, pattern, layout) if capturing else \
            _run_and_plan(way, G, X, pattern, layout, exact)
        if dW is not None:
            return finish(dW)
    return None


def _timed(G, X, pattern, layout, finish, key, ways):
    """Every way of ``ways`` that gives a gradient timed on the operands, finished; the
    fastest kept as the choice for ``key``, and its gradient returned."""
    results = {}

    def run_of(way):
        def run(_):
            dW = _run(way, G, X, pattern, layout)
            results[way] = None if dW is None else finish(dW)
            return results[way]
        return run
    # (a way's first call compiles what it needs; one that declines is not timed)
    ways = [w for w in ways if run_of(w)(None) is not None]
    if not ways:
        return None
    seconds = pipeline_seconds([run_of(w) for w in ways], X)
    best = ways[int(numpy.argmin(seconds))]
    with _LOCK:
        _CHOICES[key] = best
    return results[best]
