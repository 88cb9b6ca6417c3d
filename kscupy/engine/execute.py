"""The entry of the execution layer: prepare the product of one factor or of a chain.

:func:`prepare` takes a target (a :class:`~kscupy.core.factor.Factor` or a
:class:`~kscupy.core.factor.FactorChain`), a 2-D operand of the result dtype with ``B >= 1``,
a layout and a backend, and returns ``run(X)``: on the GPU the single-factor path
(:mod:`.single`) for a factor, a chain plan (:mod:`.planner` under ``auto``, one factor at
a time with a named backend) for a chain; on the CPU the same, through NumPy and SciPy.

**Compiling without waiting.** A tuned kernel instantiation takes NVRTC a fraction of a
second to over a second. Under ``auto``, a kernel that is not compiled yet starts compiling
in the background (:func:`kscupy.kernels.nvrtc.unless_compiled`) and the run is the direct
kernel's (:func:`~.steps.direct_plan`: one thread an output, quick to compile), unless
the model prices that above :data:`DIRECT_MAX_SECONDS` a call; the next preparation (a
prepared run's stamp changes when a compile finishes, :mod:`.runs`) finds the kernel.

**CUDA graphs.** A prepared run only launches on the current stream, so a stream capture
records it; preparing is refused while a graph is captured (:data:`CAPTURE_FIRST`).
"""
from __future__ import annotations

import numpy

from ..core import device as devices
from ..core.factor import Factor
from ..kernels import ks_direct, nvrtc
from . import cpu_choice, planner, registry, single, steps

__all__ = ["prepare", "plan", "compile_ahead", "DIRECT_MAX_SECONDS", "CAPTURE_FIRST"]

#: The longest call for which ``auto`` runs the direct kernel while its own kernel compiles,
#: rather than wait for the compile.
DIRECT_MAX_SECONDS = 0.1


def prepare(target, X, layout: str, backend: str, plans: dict | None = None):
    """``run(X)`` applying ``target`` (a Factor or a FactorChain) to 2-D operands shaped,
    strided, typed and aligned like ``X`` (the result dtype, ``B >= 1``) in ``layout``, with
    ``backend`` (a registry name, ``"auto"`` or ``"auto_tf32"``). ``plans``: where a chain's
    plans are kept between preparations (its :class:`~.runs.PreparedRuns`'), None to plan
    anew."""
    target = target.pinned()         # every value read below belongs to one write
    if target.xp is numpy:
        return _prepare_cpu(target, X, layout, backend)
    import cupy
    stream = cupy.cuda.get_current_stream()
    if stream.is_capturing():
        raise RuntimeError(CAPTURE_FIRST)
    devices.bind_context(X.device.id)     # preparing makes CUDA driver calls (occupancy, loads)
    run = _prepare_on_gpu(target, X, layout, backend, plans)
    # what preparing queued on this stream (converted values, packed weights, kernel
    # tables, kept for every later product) is complete before a product on another
    # stream reads it without waiting for this one
    stream.synchronize()
    return run


#: Why a product cannot be prepared while a CUDA graph is captured, and the fix.
CAPTURE_FIRST = (
    "this product has not run before for operands like these, and the current stream is "
    "capturing a CUDA graph: preparing it compiles, plans and builds what the operator keeps "
    "on the GPU, which a captured graph would build only when replayed. Run the product once "
    "before capturing (the same operand shape, strides, dtype, layout and backend, a plain "
    "cupy.ndarray; kscupy.warmup compiles kernels ahead), then capture it.")


def _prepare_on_gpu(target, X, layout, backend, plans):
    if backend in registry.AUTOS:
        batch = X.shape[1] if layout == "bsl" else X.shape[0]
        factors = (target,) if isinstance(target, Factor) else target.applied
        if steps.direct_seconds(factors, batch, X.dtype, layout,
                                devices.current()) <= DIRECT_MAX_SECONDS:
            try:
                with nvrtc.unless_compiled():
                    return _prepare_gpu(target, X, layout, backend, plans)
            except nvrtc.StillCompiling:
                return steps.direct_plan(target).prepare(X, layout)
    return _prepare_gpu(target, X, layout, backend, plans)


def plan(chain, layout: str, dtype, batch: int, plans: dict | None = None):
    """The :class:`~.steps.ChainPlan` a chain's product follows under ``auto`` on the
    current GPU for a batch of ``batch`` in ``layout`` (kept in ``plans`` when given)."""
    if plans is None:
        return planner.plan(chain, layout, dtype, max(batch, 1))
    return planner.cached_plan(chain, layout, dtype, batch, plans)


def compile_ahead(factor: Factor):
    """Start compiling, in the background, the direct kernel for a GPU factor's dtype: what
    ``auto`` runs while the kernel it chooses compiles, so that the first product rarely
    waits for it either."""
    ks_direct.compile_ahead(factor.dtype, factor.tiles.device.id)


def _prepare_gpu(target, X, layout, backend, plans):
    if isinstance(target, Factor):
        return single.prepare(target, X, layout, backend)
    if backend == registry.AUTO:
        batch = X.shape[1] if layout == "bsl" else X.shape[0]
        return plan(target, layout, X.dtype, batch, plans).prepare(X, layout)
    return steps.factor_by_factor(target, backend).prepare(X, layout)


def _prepare_cpu(target, X, layout, backend):
    if isinstance(target, Factor):
        return single.prepare(target, X, layout, backend)
    # under auto, a batch-size-first batch in C order may run in batch order
    in_batch_order = (backend == registry.AUTO and layout == "bsf"
                      and cpu_choice.chain_in_batch_order(target.applied, X.shape[0], X.dtype))
    chain_plan = steps.cpu_plan(target, backend, in_batch_order)
    return lambda X: chain_plan(X, layout)
