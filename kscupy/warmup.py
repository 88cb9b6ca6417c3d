"""Compile ahead: ``kscupy.warmup`` and ``python -m kscupy warmup``.

A kernel instantiation is compiled by NVRTC the first time a product needs it (0.2 to 1.5 s
each, kept afterwards in CuPy's disk cache, see :mod:`kscupy.kernels.nvrtc`). Which
instantiations a product needs depends on its pattern, dtype, layout and batch size (the
tile configuration follows the batch bucket). :func:`warmup` runs one product of each
combination it is given on random data, so that a later script or solver loop finds every
kernel compiled (and, in the same process, every decision of ``auto`` made).
"""
from __future__ import annotations

import dataclasses
import itertools
import time

import numpy

from . import _arrays
from .pattern import KSPattern

__all__ = ["warmup", "WarmupReport"]


@dataclasses.dataclass(frozen=True)
class WarmupReport:
    """What :func:`warmup` ran: ``products`` products in ``seconds`` (compilation included),
    and ``kernels_loaded`` kernel instantiations new to this process (compiled by NVRTC, or
    read from CuPy's disk cache when an earlier process compiled them)."""
    products: int
    kernels_loaded: int
    seconds: float


def warmup(patterns=(), *, operators=(), dtypes=("float32",), layouts=("bsl", "bsf"),
           batches=(1, 64, 4096), backend="auto") -> WarmupReport:
    """Run one product per (pattern or operator, dtype, layout, batch) on the current GPU.

    Parameters
    ----------
    patterns : iterable of ``(a, b, c, d)``; a random KSMatrix of each pattern and dtype is
        multiplied.
    operators : iterable of KS operators with CuPy values (e.g. ``kscupy.dft(1024,
        dtype=numpy.complex64, xp=cupy)``); each is applied in its own dtype.
    dtypes : dtypes of the pattern products (each a supported dtype).
    layouts : ``"bsl"`` and/or ``"bsf"``.
    batches : batch sizes; a kernel's tile configuration depends on the batch size bucket,
        so give the sizes the program will use.
    backend : the backend to warm up (default ``"auto"``: what ``K @ X`` runs).

    Returns a :class:`WarmupReport`. Raises RuntimeError without a GPU, ValueError or
    TypeError for bad arguments.

    Examples
    --------
    >>> import kscupy  # doctest: +SKIP
    >>> kscupy.warmup([(4, 64, 64, 8)], dtypes=("float32", "float64"), batches=(1, 256))
    ... # doctest: +SKIP
    """
    cupy, why = _arrays.gpu_module()
    if cupy is None:
        raise RuntimeError(f"kscupy.warmup compiles GPU kernels and needs a GPU: {why}")
    from .kernels import nvrtc
    from .matrix import KSMatrix
    patterns = [KSPattern.of(p) for p in patterns]
    dtypes = [_arrays.check_dtype(t) for t in dtypes]
    for layout in layouts:
        if layout not in ("bsl", "bsf"):
            raise ValueError(f'layouts must be "bsl" or "bsf", got {layout!r}')
    batches = [int(B) for B in batches]
    if any(B < 1 for B in batches):
        raise ValueError(f"batch sizes must be positive, got {batches}")
    for op in operators:
        if op.xp is not cupy:
            raise TypeError(f"warmup operators must hold CuPy values, got {op!r}")
    work = [KSMatrix.random(p, dtype=t, xp=cupy, seed=0) for p, t in itertools.product(patterns, dtypes)]
    work += list(operators)
    rng = cupy.random.default_rng(0)
    compiled_before = nvrtc.function.cache_info().misses
    start = time.perf_counter()
    products = 0
    for op, layout, B in itertools.product(work, layouts, batches):
        N = op.shape[1]
        shape = (N, B) if layout == "bsl" else (B, N)
        real = numpy.float32 if op.dtype in (numpy.float16, numpy.float32, numpy.complex64) \
            else numpy.float64
        X = rng.standard_normal(shape, dtype=real).astype(op.dtype)
        op.matmul(X, layout=layout, backend=backend)
        products += 1
    cupy.cuda.get_current_stream().synchronize()
    return WarmupReport(products, nvrtc.function.cache_info().misses - compiled_before,
                        time.perf_counter() - start)
