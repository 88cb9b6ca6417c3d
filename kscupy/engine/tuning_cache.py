"""How ``backend="auto"`` decides: on the GPU the tuning cache, the autotuner and the cost
model; on the CPU a cost model of the NumPy/SciPy backends (:func:`choose_cpu`).

On the GPU, three layers, each falling back on the next:

1. **Tuning cache** — winners found by :func:`tune` (or by ``auto`` itself when the
   environment variable ``KSCUPY_AUTOTUNE=1`` is set), stored in
   ``$KSCUPY_CACHE_DIR/tuning.json`` (default ``~/.cache/kscupy/tuning.json``, or under
   ``$XDG_CACHE_HOME``), keyed by GPU name, CUDA runtime version and problem (layout, dtype,
   pattern, transposition, batch-size bucket). Never written inside the installed package.
2. **Cost model** — :func:`choose` weighs every backend of :data:`kscupy.backends.REGISTRY`
   that ``auto`` may pick with its modelled time (:mod:`kscupy.costs`) and picks the
   smallest. Where the model cannot tell its two best apart on a product long enough to
   time (:data:`GPU_CLOSE_CALL`), the first preparation times both on the operand
   (:func:`prepare_chosen`) and the faster one is this process's choice.
3. **Heuristic** — each kernel backend's ``heuristic`` (for ``"kernel"``,
   :func:`kscupy.kernels.ks_mma.heuristic_config`) gives a tile configuration for any
   problem with no table.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import numpy

from . import backends, costs
from .factor import Factor
from .problem import Problem, problem_of

__all__ = ["Choice", "choose", "prepare_chosen", "close_calls_deferred", "close_calls_timed",
           "expire_prepared_runs",
           "GPU_CLOSE_CALL", "GPU_MEASURE_MIN_SECONDS",
           "choose_cpu", "choose_cpu_for", "CPU_CLOSE_CALL",
           "cpu_chain_in_batch_order", "configuration", "seconds", "tune", "cache_path",
           "clear_cache"]


@dataclasses.dataclass(frozen=True)
class Choice:
    """How to run a product: a registry ``backend``; ``config`` for a kernel backend (its
    ``config_type``), else None."""
    backend: str
    config: object = None


def _memo_key(*parts):
    # what decides the cache file, cheaper than building its path on every call
    return (os.environ.get("KSCUPY_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME")) + parts


_MEMO: dict = {}
#: Counts the times the decisions changed under what was built from them: forgotten
#: (:func:`tune`, :func:`clear_cache`), or a close call's verdict other than the model's
#: choice (:func:`prepare_chosen`), or :func:`expire_prepared_runs`. Whoever keeps something
#: built from a decision (the prepared runs of repeated products, see
#: :meth:`kscupy.operator.KSOperator.matmul`, and chain plans) compares it.
epoch = 0


def _forget_decisions():
    _MEMO.clear()
    expire_prepared_runs()


def expire_prepared_runs():
    """Make every prepared run and chain plan built before now be rebuilt at its next use
    (bumps :data:`epoch`), the memoized decisions kept: for a decision that changed since."""
    global epoch
    epoch += 1


def choose(problem: Problem, rates: costs.DeviceRates | None = None,
           precision: str = "default") -> Choice:
    """The backend and configuration ``auto`` uses on the GPU (of ``rates``, default the
    current device): tuning cache, else the cost model. ``precision="tf32"``: what the
    opt-in ``auto_tf32`` uses, the cost model's choice among the TF32 backends (the tuner
    times default precision only). Memoized per process (and cache file): a multiply pays
    the decision once."""
    if rates is None:
        rates = costs.device_rates()
    key = _memo_key("auto", problem, rates, precision)
    choice = _MEMO.get(key)
    if choice is None:
        choice = _MEMO[key] = _choose(problem, rates, precision)
    return choice


def choose_cpu(problem: Problem) -> Choice:
    """The backend ``auto`` uses on NumPy operands: of the registry backends with a CPU cost
    model (``Backend.cpu_seconds``), the one the model finds fastest. Memoized per process
    like :func:`choose`; there is no tuning cache on the CPU."""
    key = ("cpu", problem)
    choice = _MEMO.get(key)
    if choice is None:
        choice = _MEMO[key] = Choice(_cpu_ranked(problem)[0][1])
    return choice


def _cpu_ranked(problem: Problem) -> list:
    """``(modelled seconds, name)`` of the backends with a CPU cost model, fastest first."""
    return sorted((b.cpu_seconds(problem), b.name) for b in backends.REGISTRY.values()
                  if b.cpu_seconds is not None)


#: auto on NumPy times its two best candidates on the first operand when the model puts
#: them within this factor of each other: the model's error is about 25% per algorithm, and
#: bmm's copies in bsf vary with strides in ways it does not see (benchmarks/bench_cpu_auto).
CPU_CLOSE_CALL = 1.6
#: ... unless the model prices the faster one above this (timing would cost too much).
CPU_MEASURE_MAX_SECONDS = 0.05


def choose_cpu_for(factor: Factor, X, layout: str) -> str:
    """The backend ``auto`` runs for ``factor`` applied to the 2-D NumPy operand ``X`` in
    ``layout``: :func:`choose_cpu`'s, or on a close call (the runner-up within
    :data:`CPU_CLOSE_CALL` of it) the faster of the two when both are timed on ``X``.
    Memoized by what decides the problem: building the :class:`Problem` costs about a
    microsecond, a tenth of the smallest products."""
    key = ("cpu operand", factor.pattern, factor.transposed, layout, X.shape, X.strides,
           X.dtype)
    name = _MEMO.get(key)
    if name is None:
        (first_s, first), (second_s, second) = _cpu_ranked(problem_of(factor, X, layout))[:2]
        if second_s <= CPU_CLOSE_CALL * first_s and first_s <= CPU_MEASURE_MAX_SECONDS:
            first = _faster_on((first, second), factor, X, layout, first_s)
        name = _MEMO[key] = first
    return name


def _faster_on(names, factor, X, layout, expected_seconds) -> str:
    """The backend of ``names`` that runs ``factor`` on ``X`` faster: each runs once untimed
    (the first run in a process also faults in fresh memory), then they alternate, so that a
    stall of the machine (a BLAS thread waking up) hits both, for about 10 ms in all (2 to
    10 rounds), and the best time of each counts."""
    runs = [backends.get(name).run for name in names]
    for run in runs:
        run(factor, X, layout, None)
    best = [float("inf")] * len(runs)
    for _ in range(min(10, max(2, int(0.01 / max(expected_seconds, 1e-6))))):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run(factor, X, layout, None)
            best[i] = min(best[i], time.perf_counter() - start)
    return names[best.index(min(best))]


def cpu_chain_in_batch_order(factors, batch: int, dtype) -> bool:
    """Whether ``auto`` on NumPy applies a chain's factors (:class:`Factor`, in the order
    applied) to a bsf batch of ``batch`` rows stored in C order after copying it once to
    batch-contiguous storage, every factor then running as bsl (see
    :func:`kscupy.dispatch.prepare`). Choosing factor by factor is not enough: a step whose
    result stays in bsf (``bmm``, ``einsum``) keeps the next one there, and one step priced
    too low in bsf set ``dft(4096)`` at B = 1024 on 12 ``bmm`` steps, 4.6x the time of the
    copy and 12 ``sparse`` steps. The model compares the copy plus the factors in bsl with
    the factors as they run without it (in bsf until a ``sparse`` step, whose result has the
    batch contiguous). Memoized like :func:`choose_cpu`."""
    if batch == 1:
        return False             # a batch of one is stored as both layouts expect
    dtype = numpy.dtype(dtype)
    key = ("cpu chain", tuple((f.pattern, f.transposed) for f in factors), batch, dtype)
    decided = _MEMO.get(key)
    if decided is None:
        decided = _MEMO[key] = _batch_order_is_cheaper(factors, batch, dtype)
    return decided


def _batch_order_is_cheaper(factors, batch, dtype) -> bool:
    def problem(factor, layout):      # operands in C order, as dispatch prices them
        return Problem(factor.pattern, batch, dtype, layout, layout == "bsl", factor.transposed)

    def seconds(problem):
        return backends.get(choose_cpu(problem).backend).cpu_seconds(problem)

    bsl = [problem(f, "bsl") for f in factors]
    bsf = [problem(f, "bsf") for f in factors]
    # SciPy's sparse product in bsf is the bsl one after this very copy: the model's
    # difference between the two is its price of the copy
    copy = max(0.0, costs.cpu_seconds(bsf[0], "sparse") - costs.cpu_seconds(bsl[0], "sparse"))
    as_given, batch_contiguous = 0.0, False
    for in_bsl, in_bsf in zip(bsl, bsf):
        step = in_bsl if batch_contiguous else in_bsf
        as_given += seconds(step)
        batch_contiguous = batch_contiguous or choose_cpu(step).backend == "sparse"
    return copy + sum(seconds(p) for p in bsl) < as_given


def _candidates(problem: Problem, rates: costs.DeviceRates, precision: str = "default"):
    """The registry backends ``auto`` (or ``auto_tf32``) weighs for ``problem``."""
    return [b for b in backends.REGISTRY.values()
            if b.in_auto and b.precision == precision and b.fits(problem, rates)]


def _choose(problem: Problem, rates: costs.DeviceRates, precision: str) -> Choice:
    if precision == "default":
        cached = _cache().get(_cache_key(problem, rates))
        if cached is not None:
            return cached
        if os.environ.get("KSCUPY_AUTOTUNE", "0") not in ("", "0"):
            return tune(problem, progress=False)
    return _choice_of(_ranked(problem, rates, precision)[0][1], problem)


def _ranked(problem: Problem, rates: costs.DeviceRates, precision: str) -> list:
    """``(modelled seconds, backend)`` of the candidates, fastest first (the FMA kernel
    weighed with its margin, :data:`kscupy.costs.KERNEL_MARGIN`)."""
    candidates = _candidates(problem, rates, precision)
    if not candidates:
        raise TypeError(f"no backend runs {problem.dtype} at precision {precision!r}")
    margin = {"kernel_fma": costs.KERNEL_MARGIN[problem.access]}
    return sorted(((b.seconds(problem, rates) * margin.get(b.name, 1.0), b) for b in candidates),
                  key=lambda ranked: ranked[0])


def _choice_of(entry, problem: Problem) -> Choice:
    return Choice(entry.name, entry.heuristic(problem) if entry.heuristic else None)


#: ``auto`` on CuPy times its two best candidates on the first operand of a problem when the
#: model puts them within this factor of each other: the model's error is 10-30% per
#: backend (benchmarks/fit_costs.py), and it misses cuBLAS's edge on blocks that fill its
#: tiles ((128, 128, 128, 1) float32, B = 25088, on an H100: bmm 0.90-0.97x the kernel's
#: time, which the model prices 1.10-1.19x; Monarch(16384) in chains.json) ...
GPU_CLOSE_CALL = 1.25
#: ... and prices the faster one at this or more. The timing runs each candidate four times
#: and synchronises after each (about 0.3 ms at this length), which a few hundred calls
#: repay where the model was wrong by 5%; shorter products, where the host's launch path
#: is most of the time, keep the model's choice. (Rows below 0.95 of the best baseline in
#: the float16 and float64 engine runs before this rule were 50-80 us products whose model
#: put its two best within 1.2x: float16 (2, 64, 64, 4) bsl, float64 (1, 256, 64, 3) bsf.)
GPU_MEASURE_MIN_SECONDS = 30e-6


def prepare_chosen(problem: Problem, X, prepared, precision: str = "default"):
    """The prepared run of ``auto``'s choice for ``problem`` on the GPU, ``X`` an operand of
    it: ``prepared(choice)`` of :func:`choose`'s choice, or, on a close call
    (:data:`GPU_CLOSE_CALL`, :data:`GPU_MEASURE_MIN_SECONDS`), of the faster of the model's
    two best candidates, each timed on ``X``. The verdict replaces the model's choice for
    this problem for the rest of the process (:func:`choose` returns it, and the chain
    planner prices with it: a verdict other than the model's choice expires what was built
    before it, :func:`expire_prepared_runs`). Not timed: a choice from the tuning cache,
    products prepared while the current stream captures a CUDA graph, and those prepared
    inside :func:`close_calls_deferred` (the model's choice, settled on a later
    preparation). ``prepared`` may raise :class:`kscupy.kernels.nvrtc.StillCompiling`
    (a kernel still compiling): nothing is settled then. The timing sees the GPU as it is:
    work that other threads run on it at the same time (:func:`kscupy.warmup`'s pool, say)
    can sway a verdict between the two, which the model had found within
    :data:`GPU_CLOSE_CALL` of each other; :func:`kscupy.warmup` defers its pool's close
    calls (:func:`close_calls_deferred`) and times them one by one after the pool."""
    rates = costs.device_rates()
    choice = choose(problem, rates, precision)
    settled = _memo_key("timed", problem, rates, precision)
    if settled in _MEMO or (precision == "default"
                            and _cache().get(_cache_key(problem, rates)) is not None):
        return prepared(choice)
    ranked = _ranked(problem, rates, precision)
    if (len(ranked) < 2 or ranked[0][0] < GPU_MEASURE_MIN_SECONDS
            or ranked[1][0] > GPU_CLOSE_CALL * ranked[0][0]):
        _MEMO[settled] = None
        return prepared(choice)
    rivals = (choice, _choice_of(ranked[1][1], problem))
    runs = [prepared(c) for c in rivals]    # both compiled, even where the timing waits
    deferred = getattr(_deferring, "problems", None)
    if deferred is not None:                # close_calls_deferred: timed later, alone
        deferred.append(problem)
        return runs[0]
    seconds = _gpu_seconds(runs, X)
    if seconds is None:
        return runs[0]
    fastest = seconds.index(min(seconds))
    _MEMO[_memo_key("auto", problem, rates, precision)] = rivals[fastest]
    _MEMO[settled] = {c.backend: s for c, s in zip(rivals, seconds)}
    if fastest != 0:    # chain plans priced with the model's choice are priced again
        expire_prepared_runs()
    return runs[fastest]


_deferring = threading.local()


@contextlib.contextmanager
def close_calls_deferred():
    """In this thread, :func:`prepare_chosen` prepares both rivals of a close call (so their
    kernels compile) but runs the model's choice untimed and leaves the call unsettled, so
    that a later preparation times it; the context yields a list gathering the problems so
    deferred. For work that runs products side by side, whose timings would share the GPU
    (:func:`kscupy.warmup`'s pool): time them after it, one at a time
    (:func:`expire_prepared_runs`, then prepare again)."""
    with _deferral([]) as problems:
        yield problems


@contextlib.contextmanager
def close_calls_timed():
    """In this thread, close calls are timed again as :func:`prepare_chosen` says, inside a
    :func:`close_calls_deferred` too (warmup's pass after its pool, which a caller may run
    inside one of its own)."""
    with _deferral(None):
        yield


@contextlib.contextmanager
def _deferral(problems):
    """This thread's deferral: ``problems`` a list gathering the deferred problems, or None
    (timed)."""
    outer = getattr(_deferring, "problems", None)
    _deferring.problems = problems
    try:
        yield problems
    finally:
        _deferring.problems = outer


def _gpu_seconds(runs, X):
    """The best of three timings of each prepared run on ``X`` (after one untimed run), in
    seconds; None while the current stream captures a CUDA graph, where nothing may
    synchronise."""
    import cupy
    from cupyx.profiler import benchmark
    if cupy.cuda.get_current_stream().is_capturing():
        return None
    return [float(benchmark(run, (X,), n_repeat=3, n_warmup=1, name="auto close call")
                  .gpu_times.min()) for run in runs]


def seconds(problem: Problem, backend: str, rates) -> float:
    """Modelled time of one product with ``backend``; for ``"auto"`` (``"auto_tf32"``), of
    the backend it picks (so the chain planner prices a factor as it will run)."""
    if backend in backends.AUTOS:
        backend = choose(problem, rates, backends.AUTOS[backend]).backend
    model = backends.get(backend).seconds
    if model is None:
        raise ValueError(f"backend {backend!r} has no cost model")
    return model(problem, rates)


def configuration(problem: Problem, backend: str):
    """The configuration a backend named explicitly runs with: for a kernel backend the
    tuned one if the tuner's winner for this problem is that backend, else its heuristic;
    None for backends that take none. Memoized per process like :func:`choose`."""
    entry = backends.get(backend)
    if entry.heuristic is None:
        return None
    key = _memo_key("config", backend, problem)
    config = _MEMO.get(key)
    if config is None:
        cached = _cache().get(_cache_key(problem, costs.device_rates()))
        config = cached.config if cached is not None and cached.backend == backend \
            and cached.config is not None else entry.heuristic(problem)
        _MEMO[key] = config
    return config


# -- tuning cache ---------------------------------------------------------------------------------
def cache_path() -> Path:
    """Where tuning results live (never inside the installed package)."""
    root = os.environ.get("KSCUPY_CACHE_DIR")
    if root:
        return Path(root) / "tuning.json"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kscupy" / "tuning.json"


class _TuningCache:
    """JSON file of ``key -> {"backend": ..., "config": [...] | None, "seconds": ...}``."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        try:
            self._entries = json.loads(path.read_text())
            if not isinstance(self._entries, dict):
                self._entries = {}
        except (OSError, ValueError):
            self._entries = {}

    def get(self, key: str) -> Choice | None:
        entry = self._entries.get(key)
        if not entry:
            return None
        try:
            config_type = backends.get(entry["backend"]).config_type
            config = config_type(*entry["config"]) if entry.get("config") else None
            return Choice(entry["backend"], config)
        except (KeyError, TypeError, ValueError):
            return None   # an entry from another version: ignore it

    def put(self, key: str, choice: Choice, seconds: dict):
        with self._lock:
            self._entries[key] = {"backend": choice.backend,
                                  "config": list(choice.config.as_tuple()) if choice.config else None,
                                  "seconds": seconds}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self._entries, indent=1, sort_keys=True))
            tmp.replace(self.path)    # atomic: a concurrent reader sees the old or new file

    def __len__(self):
        return len(self._entries)


_CACHE: dict = {}


def _cache() -> _TuningCache:
    path = cache_path()
    if path not in _CACHE:
        _CACHE[path] = _TuningCache(path)
    return _CACHE[path]


def clear_cache():
    """Forget all tuning results (deletes the cache file)."""
    path = cache_path()
    _CACHE.pop(path, None)
    _forget_decisions()
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _cache_key(problem: Problem, rates: costs.DeviceRates) -> str:
    return f"{rates.name}|cuda{rates.cuda_runtime}|{problem.key()}"


# -- autotuner -----------------------------------------------------------------------------------
def _random_factor(problem: Problem) -> Factor:
    """A factor with random values for ``problem`` (stored untransposed, viewed as asked)."""
    import cupy
    stored = problem.pattern.transpose() if problem.transposed else problem.pattern
    a, b, c, d = stored
    tiles = cupy.random.default_rng(0).standard_normal((a, d, b, c)).astype(problem.dtype)
    return Factor.of_blocks(tiles, stored).view(problem.transposed, False)


def tune(problem_or_matrix, batch=None, *, layout="bsl", dtype=None, progress=True,
         n_repeat=20) -> Choice:
    """Time the candidates for a problem on the current GPU and cache the winner.

    Call as ``tune(K, B, layout="bsl")`` with a CuPy :class:`~kscupy.KSMatrix` (``dtype``
    defaults to ``K.dtype``), or with a :class:`~kscupy.problem.Problem`. Candidates: every
    backend ``auto`` may pick that fits, kernel backends with each of their ``candidates``
    configurations. Shows a progress bar when ``progress`` and
    tqdm is installed. Returns the winning :class:`Choice`, which ``auto`` and ``kernel``
    then use for this problem.
    """
    import cupy
    from cupyx.profiler import benchmark

    if isinstance(problem_or_matrix, Problem):
        problem = problem_or_matrix
        factor = _random_factor(problem)
    else:
        factor = getattr(problem_or_matrix, "factor", None)
        if not isinstance(factor, Factor):
            raise TypeError(f"tune needs a KSMatrix or a Problem, got "
                            f"{type(problem_or_matrix).__name__}")
        if batch is None:
            raise TypeError("tune(K, batch, layout=...) needs the batch size")
        if factor.xp is not cupy:
            raise TypeError("tune needs a KSMatrix holding CuPy values")
        factor = factor.in_dtype(dtype or factor.dtype)
        problem = Problem(factor.pattern, int(batch), factor.dtype, layout, True,
                          factor.transposed)
    N = factor.shape[1]
    rng = cupy.random.default_rng(0)
    shape = (N, problem.batch) if problem.layout == "bsl" else (problem.batch, N)
    X = rng.standard_normal(shape, dtype=numpy.float64).astype(problem.dtype)
    if not problem.batch_contiguous:
        X = cupy.asfortranarray(X)

    def runner(choice):
        run = backends.get(choice.backend).run
        return lambda: run(factor, X, problem.layout, choice.config)

    rates = costs.device_rates()
    runs = {}
    for entry in _candidates(problem, rates):
        if entry.candidates is None:
            runs[entry.name] = Choice(entry.name)
        else:
            runs.update({f"{entry.name}{cfg.as_tuple()}": Choice(entry.name, cfg)
                         for cfg in entry.candidates(problem)})
    items = list(runs.items())
    if progress:
        try:
            from tqdm.auto import tqdm
            items = tqdm(items, desc=f"tuning {problem.key()}", leave=False)
        except ImportError:
            pass
    timings = {}
    for label, choice in items:
        times = benchmark(runner(choice), n_repeat=n_repeat, n_warmup=3).gpu_times
        timings[label] = float(numpy.median(times))
    best = runs[min(timings, key=timings.get)]
    _cache().put(_cache_key(problem, rates), best, timings)
    _forget_decisions()
    return best
