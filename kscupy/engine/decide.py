"""How ``backend="auto"`` chooses on the GPU, and what a named backend runs with.

Three sources, each falling back on the next:

1. **Tuning cache**: winners found by :func:`kscupy.tune` (or, with the environment
   variable ``KSCUPY_AUTOTUNE=1``, by a product's first preparation), kept on disk
   (:mod:`.tuning_cache`).
2. **Cost model**: every backend of :data:`~.registry.REGISTRY` that ``auto`` may pick is
   ranked by its modelled time (:mod:`.costs.gpu`) and the fastest is the choice. Where the
   model prices others within the band of it (:func:`band`: :data:`CLOSE_CALL`, or
   :data:`SHORT_CLOSE_CALL` for short products), :func:`close_call` names up to
   :data:`RIVALS` and the first preparation times them on its operand (:mod:`.single`);
   the fastest (of those tied with it, the one of least host time where it is bound by
   its host: :data:`HOST_TIE`; ``dense`` where that ties in host time too:
   :data:`HOST_TIE_PREFERRED`) is this process's choice from then on (:func:`settle`).
3. **Heuristic**: each kernel backend's ``heuristic`` gives a tile configuration for any
   problem.

Decisions are memoized per process. :data:`epoch` counts the times they changed under what
was built from them (a verdict other than the model's choice, the tuning cache written or
cleared, :func:`expire_prepared_runs`): prepared runs and chain plans are stamped with it
(:mod:`.runs`).
"""
from __future__ import annotations

import contextlib
import os
import threading

from ..core import device as devices
from ..core.device import DeviceFacts
from ..core.problem import Problem
from . import registry, tuning_cache
from .registry import Choice

__all__ = ["Choice", "choose", "close_call", "band", "settle", "defer", "close_calls_deferred",
           "close_calls_timed", "expire_prepared_runs", "forget_decisions", "seconds",
           "configuration", "ranked", "candidates", "tuned", "CLOSE_CALL", "RIVALS",
           "SHORT_CLOSE_CALL", "SHORT_PRODUCT_S",
           "HOST_BOUND", "HOST_TIE", "HOST_TIE_PREFERRED", "KERNEL_MARGIN", "epoch"]

#: ``auto`` times its best candidates on the first operand of a problem wherever the model
#: prices the next within this factor of the first (:data:`SHORT_CLOSE_CALL` for products
#: priced under :data:`SHORT_PRODUCT_S`), up to :data:`RIVALS` of them. The model's error is
#: 10-30% per backend (more on a device its constants were not fitted on, priced by the
#: generic constants and its own rates; ``kscupy info`` says which); it misses cuBLAS's edge
#: on blocks that fill its tiles; and its fixed costs add each way's host time to its GPU
#: time, where a pipeline of short products pays only the larger. The timing
#: (:func:`.single.pipeline_times`) sees what a pipeline sees: sixteen calls of each, once
#: per problem, against a wrong pick on every call after it (``benchmarks/fit_costs.py
#: --regret`` compares this rule with the model's pick on measured rows).
CLOSE_CALL = 2.0
RIVALS = 3
#: Where the model prices its best under :data:`SHORT_PRODUCT_S`, the band is this wide: on
#: products that short its prices err by 2x and more (a cuBLAS GEMM of fewer tiles than the
#: GPU has SMs runs at a few SMs' rate, e.g. float32 (2, 192, 768, 4) at a batch of 64 in
#: batch-size-last: ``bmm`` priced at 26 us ran 49 on an H100, the dense GEMM priced at 56
#: ran 43), and timing a rival more costs well under a millisecond, once a problem.
SHORT_CLOSE_CALL = 4.0
SHORT_PRODUCT_S = 100e-6
#: A close call's fastest run whose host time is this share of its time or more is bound by
#: the host, and a rival timed within ``HOST_TIE`` of it (the rounds' spread on short
#: products) that needs less host time is the choice: it costs a CuPy caller at most that
#: much, and saves a caller with host work of its own per call (PyTorch tensors, Python
#: between calls) up to that work (:func:`settle`).
HOST_BOUND = 0.8
HOST_TIE = 0.05
#: Of such rivals that also tie in host time (within ``HOST_TIE`` of the least), this one is
#: the choice: timed on CuPy operands, ``dense`` and ``bmm`` can look alike, but a 16-bit
#: PyTorch tensor's product hands ``dense`` to PyTorch's ``matmul`` and ``bmm`` to a
#: ``bmm`` on strided views, which takes the host about 5 us more a call
#: (:func:`kscupy.core.foreign.tensor_product`).
HOST_TIE_PREFERRED = "dense"
#: ``auto`` picks the FMA kernel over other backends only when the model finds it faster by
#: this factor: in batch-size-last the model is unbiased and any margin gave away the
#: kernel's wins; in batch-size-first a wrong pick of it costs far more than a missed one.
KERNEL_MARGIN = {"bsl": 1.0, "bsf": 1.5}


def _memo_key(*parts):
    # what decides the cache file, cheaper than building its path on every call
    return (os.environ.get("KSCUPY_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME")) + parts


_MEMO: dict = {}
#: Counts the times the decisions changed under what was built from them (see the module).
epoch = 0


def expire_prepared_runs():
    """Make every prepared run and chain plan built before now be rebuilt at its next use
    (bumps :data:`epoch`), the memoized decisions kept: for a decision that changed since."""
    global epoch
    epoch += 1


def forget_decisions():
    """Forget every memoized decision (the tuning cache changed) and expire what was built
    from them."""
    _MEMO.clear()
    expire_prepared_runs()


def choose(problem: Problem, device: DeviceFacts | None = None,
           precision: str = "default") -> Choice:
    """The backend and configuration ``auto`` uses on the GPU (``device``, default the
    current one): the tuning cache's, else the cost model's, or a close call's verdict once
    settled. ``precision="tf32"``: what the opt-in ``auto_tf32`` uses, the cost model's
    choice among the TF32 backends (the tuner times default precision only). Memoized per
    process (and cache file): a product pays the decision once."""
    if device is None:
        device = devices.current()
    key = _memo_key("auto", problem, device, precision)
    choice = _MEMO.get(key)
    if choice is None:
        choice = _MEMO[key] = _choose(problem, device, precision)
    return choice


def _cached(problem: Problem, device: DeviceFacts):
    return tuning_cache.get(problem, device)


def tuned(problem: Problem, device: DeviceFacts) -> bool:
    """Whether the tuning cache holds a winner for ``problem`` on ``device``."""
    return _cached(problem, device) is not None


def _choose(problem: Problem, device: DeviceFacts, precision: str) -> Choice:
    if precision == "default":
        cached = _cached(problem, device)
        if cached is not None:
            return cached
    return _choice_of(ranked(problem, device, precision)[0][1], problem)


def candidates(problem: Problem, device: DeviceFacts, precision: str = "default"):
    """The registry backends ``auto`` (or ``auto_tf32``) weighs for ``problem``."""
    return [b for b in registry.REGISTRY.values()
            if b.in_auto and b.precision == precision and b.runs_on(device)
            and b.fits(problem, device)]


def ranked(problem: Problem, device: DeviceFacts, precision: str = "default") -> list:
    """``(modelled seconds, backend)`` of the candidates, fastest first (the FMA kernel
    weighed with its margin, :data:`KERNEL_MARGIN`)."""
    weighed = candidates(problem, device, precision)
    if not weighed:
        raise TypeError(f"no backend runs {problem.dtype} at precision {precision!r}")
    margin = {"kernel_fma": KERNEL_MARGIN[problem.access]}
    return sorted(((b.seconds(problem, device) * margin.get(b.name, 1.0), b)
                   for b in weighed), key=lambda ranking: ranking[0])


def _choice_of(entry, problem: Problem) -> Choice:
    return Choice(entry.name, entry.heuristic(problem) if entry.heuristic else None)


def close_call(problem: Problem, device: DeviceFacts, precision: str = "default"):
    """The choices to time on the operand of ``problem``'s first preparation, or None when
    a verdict or the tuning cache settled the problem, or the model prices no other
    candidate within the band of its best (:func:`band`; which settles it as the model's
    choice): :func:`choose`'s first, then every other of the best :data:`RIVALS` priced
    within the band."""
    settled = _memo_key("timed", problem, device, precision)
    if settled in _MEMO or (precision == "default" and _cached(problem, device) is not None):
        return None
    ranking = ranked(problem, device, precision)
    limit = band(ranking[0][0]) * ranking[0][0]
    others = [_choice_of(entry, problem) for seconds, entry in ranking[1:RIVALS]
              if seconds <= limit]
    if not others:
        _MEMO[settled] = None
        return None
    return (choose(problem, device, precision), *others)


def band(best_seconds: float) -> float:
    """How many times the model's best price a rival may be priced and still be timed:
    :data:`SHORT_CLOSE_CALL` for a best under :data:`SHORT_PRODUCT_S`, else
    :data:`CLOSE_CALL`."""
    return SHORT_CLOSE_CALL if best_seconds < SHORT_PRODUCT_S else CLOSE_CALL


def settle(problem: Problem, device: DeviceFacts, precision: str, rivals, seconds,
           host_seconds) -> int:
    """Record the verdict of a close call (``rivals`` timed at ``seconds`` a call, of which
    ``host_seconds`` the host's): the faster is ``auto``'s choice for the rest
    of the process (:func:`choose` returns it, and the chain planner prices with it),
    except that where the faster is bound by its host time, a rival within
    :data:`HOST_TIE` of it that needs less host time is the choice, or ``dense`` where it
    ties in host time too (:func:`_fastest`). A verdict other than the model's choice
    expires what was built before it. Returns the index of the choice."""
    fastest = _fastest(seconds, host_seconds, [c.backend for c in rivals])
    _MEMO[_memo_key("auto", problem, device, precision)] = rivals[fastest]
    # what was timed, {backend: (seconds, host seconds)}
    _MEMO[_memo_key("timed", problem, device, precision)] = {
        c.backend: (s, h) for c, s, h in zip(rivals, seconds, host_seconds)}
    if fastest != 0:    # chain plans priced with the model's choice are priced again
        expire_prepared_runs()
    return fastest


def _fastest(seconds, host_seconds=None, backends=None) -> int:
    """The index of the fastest of runs timed at ``seconds`` a call in a pipeline; where
    the fastest's host time is :data:`HOST_BOUND` or more of its time, the run of least
    host time among those within :data:`HOST_TIE` of it, or :data:`HOST_TIE_PREFERRED`
    (named in ``backends``) where that one ties with it in host time too. (A host-bound
    run makes every microsecond of its caller's own host work a call, a framework's
    operands or Python between products, a microsecond more a call; a GPU-bound rival of
    about the same time hides that work behind its GPU time.)"""
    fastest = seconds.index(min(seconds))
    if host_seconds is None or host_seconds[fastest] < HOST_BOUND * seconds[fastest]:
        return fastest
    tied = [i for i, s in enumerate(seconds) if s <= seconds[fastest] * (1 + HOST_TIE)]
    least = min(tied, key=lambda i: (host_seconds[i], seconds[i]))
    if backends is not None:
        for i in tied:
            if backends[i] == HOST_TIE_PREFERRED and \
                    host_seconds[i] <= host_seconds[least] * (1 + HOST_TIE):
                return i
    return least


_deferring = threading.local()


def defer(problem: Problem) -> bool:
    """Inside :func:`close_calls_deferred` (in this thread): note ``problem`` as deferred and
    return True, so that its close call is left unsettled and timed later; else False."""
    deferred = getattr(_deferring, "problems", None)
    if deferred is None:
        return False
    deferred.append(problem)
    return True


@contextlib.contextmanager
def close_calls_deferred():
    """In this thread, a close call prepares all its rivals (so their kernels compile) but runs
    the model's choice untimed and leaves the call unsettled, so that a later preparation
    times it; the context yields a list gathering the problems so deferred. For work that
    runs products side by side, whose timings would share the GPU
    (:func:`kscupy.warmup`'s pool): time them after it, one at a time
    (:func:`expire_prepared_runs`, then prepare again)."""
    with _deferral([]) as problems:
        yield problems


@contextlib.contextmanager
def close_calls_timed():
    """In this thread, close calls are timed again, inside a :func:`close_calls_deferred`
    too (warmup's pass after its pool, which a caller may run inside one of its own)."""
    with _deferral(None):
        yield


@contextlib.contextmanager
def _deferral(problems):
    outer = getattr(_deferring, "problems", None)
    _deferring.problems = problems
    try:
        yield problems
    finally:
        _deferring.problems = outer


def seconds(problem: Problem, backend: str, device: DeviceFacts) -> float:
    """Modelled time of one product with ``backend``; for ``"auto"`` (``"auto_tf32"``), of
    the backend it picks (so the chain planner prices a factor as it will run)."""
    if backend in registry.AUTOS:
        backend = choose(problem, device, registry.AUTOS[backend]).backend
    model = registry.get(backend).seconds
    if model is None:
        raise ValueError(f"backend {backend!r} has no cost model")
    return model(problem, device)


def configuration(problem: Problem, backend: str):
    """The configuration a backend named explicitly runs with: for a kernel backend the
    tuned one if the tuner's winner for this problem is that backend, else its heuristic;
    None for backends that take none. Memoized per process like :func:`choose`."""
    entry = registry.get(backend)
    if entry.heuristic is None:
        return None
    key = _memo_key("config", backend, problem)
    config = _MEMO.get(key)
    if config is None:
        cached = _cached(problem, devices.current())
        config = cached.config if cached is not None and cached.backend == backend \
            and cached.config is not None else entry.heuristic(problem)
        _MEMO[key] = config
    return config
