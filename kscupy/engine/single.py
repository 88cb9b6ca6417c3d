"""One factor's product: resolve the backend (``auto``'s choice included), configure it and
prepare it.

A factor's ``K @ X`` and every per-factor step of a chain plan come here. The caller has
checked the operand and promoted dtypes (the operators), and handles the direct kernel that
answers while a kernel compiles (:mod:`.execute`).
"""
from __future__ import annotations

import functools
import gc
import os
import time

import numpy

from ..core import device as devices
from ..core.problem import problem_of
from ..kernels import nvrtc
from . import cpu_choice, decide, registry
from .tuner import tune

__all__ = ["prepare", "pipeline_seconds", "pipeline_times"]

_OTHER_LAYOUT = {"bsl": "bsf", "bsf": "bsl"}


def prepare(factor, X, layout, backend):
    """``run(X) -> op(X)`` for a :class:`~kscupy.core.factor.Factor` and 2-D operands with
    ``B >= 1`` shaped, strided and typed like ``X``, in ``layout`` (``"bsl"``: ``(N, B)``
    -> ``(M, B)``; ``"bsf"``: ``(B, N)`` -> ``(B, M)``).

    Everything that depends only on those is decided here once: the factor in ``X.dtype``
    (converted once and kept, see :meth:`~kscupy.core.factor.Factor.in_dtype`), ``"auto"``'s
    choice, the configuration, and for kernel backends the kernel, grid and arguments.
    ``backend`` is a registry name, ``"auto"`` or ``"auto_tf32"`` (the opt-in choice among
    the TF32 backends).
    """
    factor = factor.in_dtype(X.dtype)
    gpu = factor.xp is not numpy
    if backend == registry.AUTO_TF32 and not gpu:
        raise TypeError(f"backend={backend!r} runs on the GPU and needs CuPy operands")
    if backend in registry.AUTOS:
        if gpu:
            return _prepare_auto(factor, X, layout, registry.AUTOS[backend])
        if _stored_in_other_layout(X, layout):
            # (B, N) with the batch contiguous is an (N, B) batch in C order, transposed (a
            # bsf chain passes one on after a sparse step): the NumPy algorithms run fastest
            # on operands stored as their layout expects, and the model prices those
            run = prepare(factor, X.T, _OTHER_LAYOUT[layout], backend)
            return lambda X: run(X.T).T
        backend = cpu_choice.choose_cpu_for(factor, X, layout)
    entry = registry.get(backend)
    if ("gpu" if gpu else "cpu") not in entry.devices:
        raise TypeError(f"backend={backend!r} runs on the GPU and needs CuPy operands")
    device = devices.current() if gpu else None
    if gpu and not entry.runs_on(device):
        raise ValueError(f"backend={backend!r} needs a GPU of compute capability "
                         f"{entry.min_compute_capability} or newer; {device.name} is "
                         f"sm_{device.compute_capability} (backend='auto' picks among the "
                         f"ones that run here)")
    config = decide.configuration(problem_of(factor, X, layout), backend) if gpu else None
    return entry.prepare(factor, X, layout, config)


def _prepare_auto(factor, X, layout, precision):
    """``auto``'s run on the GPU: :func:`kscupy.engine.decide.choose`'s, or on a close call
    of the model the fastest of its rivals (:func:`~kscupy.engine.decide.close_call`: up
    to :data:`~kscupy.engine.decide.RIVALS` of its best), all prepared and timed on ``X``
    (not inside :func:`~kscupy.engine.decide.close_calls_deferred`). With
    ``KSCUPY_AUTOTUNE=1`` a problem the tuning cache does not hold is tuned first."""
    problem = problem_of(factor, X, layout)
    device = devices.current()
    if (precision == "default" and os.environ.get("KSCUPY_AUTOTUNE", "0") not in ("", "0")
            and not decide.tuned(problem, device)):
        tune(problem, progress=False)
    rivals = decide.close_call(problem, device, precision)
    if rivals is None:
        return _prepared(factor, X, layout, decide.choose(problem, device, precision))
    # all compiled, timed or not; while kernels compile in the background, every rival's
    # compile starts in this one call (the direct kernel answers until they are done)
    runs = nvrtc.prepare_all(*(functools.partial(_prepared, factor, X, layout, c)
                               for c in rivals))
    if decide.defer(problem):
        return runs[0]
    seconds, host_seconds = zip(*pipeline_times(runs, X))
    return runs[decide.settle(problem, device, precision, rivals, list(seconds),
                              list(host_seconds))]


def _prepared(factor, X, layout, choice):
    return registry.get(choice.backend).prepare(factor, X, layout, choice.config)


#: A close call times each rival over this many rounds of :data:`CLOSE_CALL_CALLS` calls
#: back to back (after a warm-up call; each round behind one queued call) and keeps its best
#: round; the rivals' rounds take turns.
CLOSE_CALL_ROUNDS = 3
CLOSE_CALL_CALLS = 4


def pipeline_seconds(runs, X):
    """The seconds per call of each prepared run on ``X`` as a pipeline sees them
    (:func:`pipeline_times`' first figures)."""
    return [seconds for seconds, _ in pipeline_times(runs, X)]


def pipeline_times(runs, X):
    """``(seconds, host_seconds)`` per call of each prepared run on ``X``: the seconds a
    pipeline sees, the larger of its host and its GPU time, by CUDA events around calls made
    back to back on the current stream (never under a CUDA graph capture, where
    :func:`.execute.prepare` refuses to prepare); and the host's own, by the host's clock
    around the same calls (which queue without waiting: too few to fill the launch queue).

    Each round queues one call before its start event, so that the GPU is busy when the
    timed calls begin, as in a pipeline: with host time ``h`` and GPU time ``g`` per call,
    ``n`` timed calls then span ``n * max(h, g)`` between the events. (Timed from an idle
    GPU, the first call's host time would count in full for every run, ``(h + n*g) / n``
    per call for a GPU-bound one, favouring the runs with the most host time.) Each figure
    is the best of the rounds, and the runs' rounds take turns: a disturbance of a few
    hundred microseconds (a background compile's thread, another process's work, a clock
    step) then slows a round of each run rather than every round of one, which timed one
    run after another it would, wrongly deciding a close call against that run. Python's
    garbage collector waits until the timing ends (as ``timeit`` has it wait): a full
    collection in a process holding many objects takes milliseconds."""
    import cupy
    stream = cupy.cuda.get_current_stream()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    best = [float("inf")] * len(runs)
    host = [float("inf")] * len(runs)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for run in runs:            # first calls: lazy module loads, cuBLAS's heuristics
            run(X)
        stream.synchronize()
        for _ in range(CLOSE_CALL_ROUNDS):
            for i, run in enumerate(runs):
                run(X)              # the queue's head: the timed calls follow it
                start.record(stream)
                began = time.perf_counter()
                for _ in range(CLOSE_CALL_CALLS):
                    run(X)
                host[i] = min(host[i], (time.perf_counter() - began) / CLOSE_CALL_CALLS)
                stop.record(stream)
                stop.synchronize()  # no run's round queues behind another run's work
                best[i] = min(best[i], cupy.cuda.get_elapsed_time(start, stop) * 1e-3
                              / CLOSE_CALL_CALLS)
    finally:
        if collecting:
            gc.enable()
    return list(zip(best, host))


def _stored_in_other_layout(X, layout) -> bool:
    """Whether the 2-D operand ``X`` in ``layout`` is stored as the other layout expects:
    "bsl" expects the batch axis to be the faster one (``(N, B)`` in C order), "bsf" the
    feature axis (``(B, N)`` in C order). A batch of one fits both."""
    batch_axis = 1 if layout == "bsl" else 0
    if X.shape[batch_axis] == 1 or X.shape[1 - batch_axis] == 1:
        return False
    batch_stride, feature_stride = abs(X.strides[batch_axis]), abs(X.strides[1 - batch_axis])
    return batch_stride > feature_stride if layout == "bsl" else feature_stride > batch_stride
