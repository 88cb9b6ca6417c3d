"""Compile ahead: ``kscupy.warmup`` and ``python -m kscupy warmup``.

A kernel instantiation is compiled by NVRTC the first time a product needs it (a fraction
of a second to over a second each, kept afterwards in CuPy's disk cache, see
:mod:`kscupy.kernels.nvrtc`); ``auto`` runs the slower direct kernel until it is compiled.
Which instantiations a product needs depends on its pattern, dtype, layout and batch size (the
tile configuration follows the batch bucket). :func:`warmup` runs one product of each
combination it is given, so that a later script or solver loop finds every kernel compiled
(and, in the same process, every decision of ``auto`` made). The products run from a pool
of threads and wait for their kernels: NVRTC compiles without holding the GIL, so their
kernels compile in parallel. Where ``auto`` would time a close call of its model
(:mod:`kscupy.engine.decide`), the pool defers it, so that no timing shares the
GPU with the products beside it; those products run again after the pool, one at a time,
and time their close calls then.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import os
import time

import numpy

from .core import arrays
from .core.pattern import KSPattern
from .engine import decide
from .kernels import nvrtc
from .operators import KSMatrix

__all__ = ["warmup", "WarmupReport"]


@dataclasses.dataclass(frozen=True)
class WarmupReport:
    """What :func:`warmup` ran: ``products`` products in ``seconds`` (compilation included),
    ``kernels_loaded`` kernel instantiations new to this process (compiled by NVRTC, or
    read from CuPy's disk cache when an earlier process compiled them), and ``timed_after``
    of the products run again after the pool to time ``auto``'s close calls alone."""
    products: int
    kernels_loaded: int
    seconds: float
    timed_after: int = 0


def warmup(patterns=(), *, operators=(), dtypes=("float32",), layouts=("bsl", "bsf"),
           batches=(1, 64, 4096), backend="auto", threads=None) -> WarmupReport:
    """Run one product per (pattern or operator, dtype, layout, batch) on the current GPU.

    Parameters
    ----------
    patterns : iterable of ``(a, b, c, d)``; a random KSMatrix of each pattern and dtype is
        multiplied.
    operators : iterable of KS operators with CuPy values (e.g. ``kscupy.dft(1024,
        dtype=numpy.complex64, xp=cupy)``); each is applied in its own dtype.
    dtypes : dtypes of the pattern products (each a supported dtype), or one dtype.
    layouts : ``"bsl"`` and/or ``"bsf"`` (a sequence, or one of them).
    batches : batch sizes; a kernel's tile configuration depends on the batch size bucket,
        so give the sizes the program will use.
    backend : the backend to warm up (default ``"auto"``: what ``K @ X`` runs).
    threads : products run at once, each compiling its kernels (default: the CPU count, at
        most 8). Their operands and results are in GPU memory at the same time.

    The operands are zeros (their values do not matter to what is compiled), but for the
    products run again after the pool to time ``auto``'s close calls (see the module),
    whose operands are real standard normal values. Returns a :class:`WarmupReport`. Raises
    RuntimeError without a GPU, ValueError or TypeError for bad arguments, and the first
    error a product raised.

    Examples
    --------
    >>> import kscupy  # doctest: +SKIP
    >>> kscupy.warmup([(4, 64, 64, 8)], dtypes=("float32", "float64"), batches=(1, 256))
    ... # doctest: +SKIP
    """
    patterns = list(patterns)
    patterns = KSPattern.list_of(patterns) if patterns else []
    dtypes = (dtypes,) if isinstance(dtypes, (str, numpy.dtype, type)) else dtypes
    layouts = (layouts,) if isinstance(layouts, str) else layouts
    dtypes = [arrays.check_dtype(t) for t in dtypes]
    for layout in layouts:
        if layout not in ("bsl", "bsf"):
            raise ValueError(f'layouts must be "bsl" or "bsf", got {layout!r}')
    if isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise TypeError(f"batches must be a sequence of batch sizes such as (1, 64), got "
                        f"{type(batches).__name__} {batches!r}")
    batches = list(batches)
    if any(isinstance(B, (bool, numpy.bool_)) or not isinstance(B, (int, numpy.integer))
           or B < 1 for B in batches):
        raise ValueError(f"batch sizes must be positive integers, got {batches}")
    batches = [int(B) for B in batches]
    if threads is None:
        threads = min(8, os.cpu_count() or 1)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    cupy, why = arrays.gpu_module()
    if cupy is None:
        raise RuntimeError(f"kscupy.warmup compiles GPU kernels and needs a GPU: {why}")
    for op in operators:
        if op.xp is not cupy:
            raise TypeError(f"warmup operators must hold CuPy values, got {op!r}")
    work = [KSMatrix.random(p, dtype=t, xp=cupy, seed=0) for p, t in itertools.product(patterns, dtypes)]
    work += list(operators)
    tasks = list(itertools.product(work, layouts, batches))
    device = cupy.cuda.Device()         # the caller's device, current in every thread

    def product(task, random=False):
        """The task's product, on zeros or (``random``: where it times close calls, whose
        timing should see data as a program's) on real standard normal values."""
        op, layout, B = task
        shape = (op.shape[1], B) if layout == "bsl" else (B, op.shape[1])
        with device, nvrtc.waiting():
            X = (cupy.random.default_rng(0).standard_normal(shape).astype(op.dtype) if random
                 else cupy.zeros(shape, dtype=op.dtype))
            op.matmul(X, layout=layout, backend=backend)
            cupy.cuda.get_current_stream().synchronize()

    def pooled_product(task):
        """The product with its close calls deferred; whether it had one (see the module)."""
        with decide.close_calls_deferred() as deferred:
            product(task)
        return bool(deferred)

    loaded_before = nvrtc.kernels_loaded()
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        deferred = [task for task, had in zip(tasks, pool.map(pooled_product, tasks)) if had]
    if deferred:
        # the pool's runs of these products are the model's choices, kept by their
        # operators: rebuilt at the next call, which times the close call alone
        decide.expire_prepared_runs()
        with decide.close_calls_timed():
            for task in deferred:
                product(task, random=True)
    return WarmupReport(len(tasks), nvrtc.kernels_loaded() - loaded_before,
                        time.perf_counter() - start, len(deferred))
