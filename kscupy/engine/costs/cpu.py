"""The CPU cost model: the modelled time of NumPy's and SciPy's algorithms for one factor.

``auto`` on NumPy picks the fastest of ``bmm``, ``einsum`` and ``sparse`` by a linear model
of each one's time, ``seconds = sum of constant x count`` over the terms of
:func:`cpu_terms`, with one set of constants per algorithm and regime: ``"vector"`` (a batch
of one: every algorithm runs matrix-vector code), ``"bsl"`` or ``"bsf"``. The terms:

==============================  ==========================================================
``call``                        one product: Python, NumPy/SciPy dispatch, allocations
``group``                       ``a*d`` groups: bmm calls one small GEMM per group
``nonzero``                     ``nnz``: SciPy's CSR loop calls one axpy per non-zero;
                                einsum's loops
``row``                         ``B*a*d`` block rows: loops whose inner run is one block row
``element_in``, ``element_out`` ``B*N``, ``B*M``: per-element loop costs
``byte``                        ``itemsize*B*(M + N)``: operand and result through memory
``memory``                      the same bytes again, weighted from 0 (they fit the caches)
                                to 1 (beyond the last-level cache), linear in log2 of the
                                size between the two ends of ``memory_log2``
``mac_<dtype>``                 ``B*nnz`` multiply-adds at the rate of each dtype
``copy``, ``copy_memory``       bmm: its two permutation passes, when they are not views
``transpose``,                  sparse in bsf: SciPy copies the ``(B, N)`` operand to
``transpose_memory``            ``(N, B)``
==============================  ==========================================================

float16 and bfloat16 are priced as float32 (every CPU backend computes them through
float32). The
constants are data (``cpu.json``, :mod:`.constants`), fitted by
``benchmarks/fit_cpu_costs.py`` to best-of-N times of every algorithm on the machine that
file names.
"""
from __future__ import annotations

import math

import numpy

from ...core import arrays
from ...core.problem import Problem
from . import constants

__all__ = ["cpu_terms", "cpu_seconds"]


def _regime(problem: Problem) -> str:
    return "vector" if problem.batch == 1 else problem.layout


def _bmm_copies(problem: Problem) -> bool:
    """Whether bmm's two permutations (``reference.bmm``) copy: in bsl (and for a batch of
    one) they are views when ``d == 1``, in bsf when there is a single group."""
    a, _, _, d = problem.pattern
    if problem.layout == "bsl" or problem.batch == 1:
        return d > 1
    return a * d > 1


def cpu_terms(problem: Problem, algorithm: str) -> dict:
    """The counts of the CPU model's terms (see the module) for ``algorithm`` ("bmm",
    "einsum" or "sparse") applied to ``problem`` with NumPy/SciPy."""
    a, _, _, d = problem.pattern
    M, N = problem.pattern.shape
    B, groups, nnz = problem.batch, a * d, problem.pattern.nnz
    single = numpy.dtype(numpy.float32)
    dtype = single if arrays.is_half(problem.dtype) else numpy.dtype(problem.dtype)
    size = dtype.itemsize * B * (M + N)
    low, high = constants.cpu()["memory_log2"]
    beyond_cache = min(1.0, max(0.0, (math.log2(size) - low) / (high - low)))
    terms = {"call": 1.0, "group": groups, "nonzero": nnz, "row": B * groups,
             "element_in": B * N, "element_out": B * M, "byte": size,
             "memory": size * beyond_cache, f"mac_{dtype.name}": B * nnz}
    if algorithm == "bmm" and _bmm_copies(problem):
        terms.update(copy=size, copy_memory=size * beyond_cache)
    if algorithm == "sparse" and problem.layout == "bsf" and B > 1 \
            and not problem.batch_contiguous:
        moved = dtype.itemsize * B * N
        terms.update(transpose=moved, transpose_memory=moved * beyond_cache)
    return terms


def cpu_seconds(problem: Problem, algorithm: str) -> float:
    """Modelled seconds of one product of ``problem`` by ``algorithm`` ("bmm", "einsum" or
    "sparse") with NumPy/SciPy on the CPU: the sum of the fitted constants times the counts
    of :func:`cpu_terms`."""
    table = constants.cpu()["terms"][(algorithm, _regime(problem))]
    return sum(table.get(term, 0.0) * count
               for term, count in cpu_terms(problem, algorithm).items())
