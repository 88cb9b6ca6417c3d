"""The autotuner: :func:`tune` times every candidate of a problem on the current GPU and
keeps the winner in the tuning cache (:mod:`.tuning_cache`), which ``auto`` and the named
kernel backends then use for that problem (:mod:`.decide`)."""
from __future__ import annotations

import numpy

from ..core import arrays, device as devices
from ..core.argument_checks import positive_int
from ..core.factor import Factor
from ..core.problem import Problem
from . import decide, registry, tuning_cache
from .registry import Choice

__all__ = ["tune", "clear_cache"]


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
    defaults to ``K.dtype``), or with a :class:`~kscupy.core.problem.Problem`. Candidates:
    every backend ``auto`` may pick that fits, kernel backends with each of their
    ``candidates`` configurations. Shows a progress bar when ``progress`` and tqdm is
    installed. Returns the winning :class:`~kscupy.engine.registry.Choice`, which ``auto``
    and ``kernel`` then use for this problem.
    """
    cupy = arrays.cupy_or_none()
    if cupy is None:
        raise RuntimeError("tune times kernels on a GPU: it needs CuPy and a CUDA device")
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
        batch = positive_int("batch", batch)
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
        run = registry.get(choice.backend).prepare(factor, X, problem.layout, choice.config)
        return lambda: run(X)

    device = devices.current()
    runs = {}
    for entry in decide.candidates(problem, device):
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
    tuning_cache.put(problem, device, best, timings)
    decide.forget_decisions()
    return best


def clear_cache():
    """Forget all tuning results (deletes the cache file, :func:`tuning_cache.path`)."""
    tuning_cache.remove()
    decide.forget_decisions()
