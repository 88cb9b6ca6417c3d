"""Apply one factor: resolve ``backend`` (``"auto"`` included) and run it.

This is the one path of a single-factor product, on NumPy and on CuPy: ``K @ X`` and a
chain's per-factor steps both end here. The caller has already checked the operand and
promoted dtypes (:meth:`kscupy.operator.KSOperator.matmul`).
"""
from __future__ import annotations

import numpy

from . import backends, tuning
from .problem import problem_of

__all__ = ["apply"]

#: What ``auto`` runs on NumPy operands.
CPU_AUTO = "bmm"


def apply(factor, X, layout, backend):
    """``op(X)`` for a :class:`~kscupy.factor.Factor` and a 2-D operand with ``B >= 1`` in
    ``layout`` (``"bsl"``: ``(N, B)`` -> ``(M, B)``; ``"bsf"``: ``(B, N)`` -> ``(B, M)``).

    ``factor`` is converted to ``X.dtype`` once and kept (see
    :meth:`~kscupy.factor.Factor.in_dtype`). ``backend`` is a registry name or ``"auto"``.
    """
    factor = factor.in_dtype(X.dtype)
    gpu = factor.xp is not numpy
    if backend == backends.AUTO:
        if gpu:
            choice = tuning.choose(problem_of(factor, X, layout))
            return backends.get(choice.backend).run(factor, X, layout, choice.config)
        backend = CPU_AUTO
    entry = backends.get(backend)
    if ("gpu" if gpu else "cpu") not in entry.devices:
        raise TypeError(f"backend={backend!r} runs on the GPU and needs CuPy operands")
    config = tuning.configuration(problem_of(factor, X, layout), backend) if gpu else None
    return entry.run(factor, X, layout, config)
