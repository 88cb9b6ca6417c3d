"""How ``backend="auto"`` chooses on the CPU: a cost model of NumPy's and SciPy's
algorithms (:mod:`.costs.cpu`), a timing where it cannot tell the two best apart, and for a
chain in batch-size-first whether to run it in batch order.

The candidates are the registry's backends with a CPU model (``Backend.cpu_seconds``:
``bmm``, ``einsum``, ``sparse``). Decisions are memoized per process; there is no tuning
cache on the CPU.
"""
from __future__ import annotations

import time

import numpy

from ..core.factor import Factor
from ..core.problem import Problem, problem_of
from . import registry
from .costs import cpu as cpu_costs

__all__ = ["choose_cpu", "choose_cpu_for", "chain_in_batch_order", "CPU_CLOSE_CALL",
           "CPU_MEASURE_MAX_SECONDS"]

#: auto on NumPy times its two best candidates on the first operand when the model puts
#: them within this factor of each other: the model's error is about 25% per algorithm, and
#: bmm's copies in bsf vary with strides in ways it does not see ...
CPU_CLOSE_CALL = 1.6
#: ... unless the model prices the faster one above this (timing would cost too much).
CPU_MEASURE_MAX_SECONDS = 0.05

_MEMO: dict = {}


def _ranked(problem: Problem) -> list:
    """``(modelled seconds, name)`` of the backends with a CPU cost model, fastest first."""
    return sorted((b.cpu_seconds(problem), b.name) for b in registry.REGISTRY.values()
                  if b.cpu_seconds is not None)


def choose_cpu(problem: Problem) -> str:
    """The backend ``auto`` uses for ``problem`` on NumPy operands: of the registry backends
    with a CPU cost model, the one the model finds fastest."""
    key = ("cpu", problem)
    name = _MEMO.get(key)
    if name is None:
        name = _MEMO[key] = _ranked(problem)[0][1]
    return name


def choose_cpu_for(factor: Factor, X, layout: str) -> str:
    """The backend ``auto`` runs for ``factor`` applied to the 2-D NumPy operand ``X`` in
    ``layout``: :func:`choose_cpu`'s, or on a close call (the runner-up within
    :data:`CPU_CLOSE_CALL` of it) the faster of the two when both are timed on ``X``.
    Memoized by what decides the problem, which is cheaper to look up than building the
    :class:`Problem`, a noticeable share of the smallest products' time."""
    key = ("cpu operand", factor.pattern, factor.transposed, layout, X.shape, X.strides,
           X.dtype)
    name = _MEMO.get(key)
    if name is None:
        (first_s, first), (second_s, second) = _ranked(problem_of(factor, X, layout))[:2]
        if second_s <= CPU_CLOSE_CALL * first_s and first_s <= CPU_MEASURE_MAX_SECONDS:
            first = _faster_on((first, second), factor, X, layout, first_s)
        name = _MEMO[key] = first
    return name


def _faster_on(names, factor, X, layout, expected_seconds) -> str:
    """The backend of ``names`` that runs ``factor`` on ``X`` faster: each runs once untimed
    (the first run in a process also faults in fresh memory), then they alternate, so that a
    stall of the machine (a BLAS thread waking up) hits both, for about 10 ms in all (2 to
    10 rounds), and the best time of each counts."""
    runs = [registry.get(name).prepare(factor, X, layout, None) for name in names]
    for run in runs:
        run(X)
    best = [float("inf")] * len(runs)
    for _ in range(min(10, max(2, int(0.01 / max(expected_seconds, 1e-6))))):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run(X)
            best[i] = min(best[i], time.perf_counter() - start)
    return names[best.index(min(best))]


def chain_in_batch_order(factors, batch: int, dtype) -> bool:
    """Whether ``auto`` on NumPy applies a chain's factors (:class:`Factor`, in the order
    applied) to a bsf batch of ``batch`` rows stored in C order after copying it once to
    batch-contiguous storage, every factor then running as bsl. Choosing factor by factor is
    not enough: a step whose result stays in bsf (``bmm``, ``einsum``) keeps the next one
    there, and one step priced too low in bsf can keep a long chain on ``bmm`` at several
    times the time of the copy and ``sparse`` steps. The model compares the copy plus the
    factors in bsl with the factors as they run without it (in bsf until a ``sparse`` step,
    whose result has the batch contiguous). Memoized like :func:`choose_cpu`."""
    if batch == 1:
        return False             # a batch of one is stored as both layouts expect
    dtype = numpy.dtype(dtype)
    key = ("cpu chain", tuple((f.pattern, f.transposed) for f in factors), batch, dtype)
    decided = _MEMO.get(key)
    if decided is None:
        decided = _MEMO[key] = _batch_order_is_cheaper(factors, batch, dtype)
    return decided


def _batch_order_is_cheaper(factors, batch, dtype) -> bool:
    def problem(factor, layout):      # operands in C order, as the single path prices them
        return Problem(factor.pattern, batch, dtype, layout, layout == "bsl", factor.transposed)

    def seconds(problem):
        return registry.get(choose_cpu(problem)).cpu_seconds(problem)

    bsl = [problem(f, "bsl") for f in factors]
    bsf = [problem(f, "bsf") for f in factors]
    # SciPy's sparse product in bsf is the bsl one after this very copy: the model's
    # difference between the two is its price of the copy
    copy = max(0.0, cpu_costs.cpu_seconds(bsf[0], "sparse")
               - cpu_costs.cpu_seconds(bsl[0], "sparse"))
    as_given, batch_contiguous = 0.0, False
    for in_bsl, in_bsf in zip(bsl, bsf):
        step = in_bsl if batch_contiguous else in_bsf
        as_given += seconds(step)
        batch_contiguous = batch_contiguous or choose_cpu(step) == "sparse"
    return copy + sum(seconds(p) for p in bsl) < as_given
