"""Apply one factor: resolve ``backend`` (``"auto"`` included) and run it.

This is the one path of a single-factor product, on NumPy and on CuPy: ``K @ X`` and a
chain's per-factor steps both end here. The caller has already checked the operand and
promoted dtypes (:meth:`kscupy.operator.KSOperator.matmul`).
"""
from __future__ import annotations

import numpy

from . import backends, costs, tuning
from .kernels import nvrtc
from .problem import problem_of

__all__ = ["prepare", "apply"]

_OTHER_LAYOUT = {"bsl": "bsf", "bsf": "bsl"}
#: What auto runs while its kernel compiles.
DIRECT = "direct"


def prepare(factor, X, layout, backend):
    """``run(X) -> op(X)`` for a :class:`~kscupy.factor.Factor` and 2-D operands with ``B >= 1``
    shaped, strided and typed like ``X``, in ``layout`` (``"bsl"``: ``(N, B)`` -> ``(M, B)``;
    ``"bsf"``: ``(B, N)`` -> ``(B, M)``).

    Everything that depends only on those is decided here once: the factor in ``X.dtype``
    (converted once and kept, see :meth:`~kscupy.factor.Factor.in_dtype`), ``"auto"``'s
    choice, the configuration, and for kernel backends the kernel, grid and arguments
    (their ``prepare``). ``backend`` is a registry name, ``"auto"`` or ``"auto_tf32"``
    (the opt-in choice among the TF32 backends).

    On the GPU ``"auto"`` (and ``"auto_tf32"``) runs what :func:`kscupy.tuning.prepare_chosen`
    gives: the tuning cache's or the cost model's choice, or on a close call of the model
    the faster of its two best candidates timed on ``X``. It does not wait for its kernel to compile:
    while the instantiation it chose compiles in the background (:mod:`kscupy.kernels.nvrtc`), the run it returns
    is the direct kernel's (``backend="direct"``), unless the model prices that above
    :data:`kscupy.costs.DIRECT_MAX_SECONDS` per call; the caller's next preparation (a
    prepared run's key changes when a compile finishes) finds the tuned kernel.
    """
    factor = factor.in_dtype(X.dtype)
    gpu = factor.xp is not numpy
    if backend == backends.AUTO_TF32 and not gpu:
        raise TypeError(f"backend={backend!r} runs on the GPU and needs CuPy operands")
    if backend in backends.AUTOS:
        if gpu:
            problem = problem_of(factor, X, layout)
            precision = backends.AUTOS[backend]

            def prepared(choice):
                return _prepared(backends.get(choice.backend), factor, X, layout, choice.config)

            if costs.direct_seconds(problem, costs.device_rates()) > costs.DIRECT_MAX_SECONDS:
                return tuning.prepare_chosen(problem, X, prepared, precision)
            try:
                with nvrtc.unless_compiled():
                    return tuning.prepare_chosen(problem, X, prepared, precision)
            except nvrtc.StillCompiling:
                return _prepared(backends.get(DIRECT), factor, X, layout, None)
        if _stored_in_other_layout(X, layout):
            # (B, N) with the batch contiguous is an (N, B) batch in C order, transposed (a
            # bsf chain passes one on after a sparse step): the NumPy algorithms run fastest
            # on operands stored as their layout expects, and the model prices those
            run = prepare(factor, X.T, _OTHER_LAYOUT[layout], backend)
            return lambda X: run(X.T).T
        backend = tuning.choose_cpu_for(factor, X, layout)
    entry = backends.get(backend)
    if ("gpu" if gpu else "cpu") not in entry.devices:
        raise TypeError(f"backend={backend!r} runs on the GPU and needs CuPy operands")
    config = tuning.configuration(problem_of(factor, X, layout), backend) if gpu else None
    return _prepared(entry, factor, X, layout, config)


def _prepared(entry, factor, X, layout, config):
    if entry.prepare is not None:
        return entry.prepare(factor, X, layout, config)
    return lambda X: entry.run(factor, X, layout, config)


def _stored_in_other_layout(X, layout) -> bool:
    """Whether the 2-D operand ``X`` in ``layout`` is stored as the other layout expects:
    "bsl" expects the batch axis to be the faster one (``(N, B)`` in C order), "bsf" the
    feature axis (``(B, N)`` in C order). A batch of one fits both."""
    batch_axis = 1 if layout == "bsl" else 0
    if X.shape[batch_axis] == 1 or X.shape[1 - batch_axis] == 1:
        return False
    batch_stride, feature_stride = abs(X.strides[batch_axis]), abs(X.strides[1 - batch_axis])
    return batch_stride > feature_stride if layout == "bsl" else feature_stride > batch_stride


def apply(factor, X, layout, backend):
    """``op(X)``: :func:`prepare` for ``X``, run once."""
    return prepare(factor, X, layout, backend)(X)
