"""The backend registry: every way to apply one KS factor, declared once.

A :class:`Backend` says where it runs (``devices``), how it runs (``run``), what it costs
(``seconds``, the cost model of :mod:`kscupy.costs`; None where there is no model) and
whether ``backend="auto"`` may pick it. :func:`kscupy.dispatch.apply` (what ``K @ X``
calls), the ``auto`` choice and the tuner (:mod:`kscupy.tuning`) and the chain planner
(:mod:`kscupy.planner`) all read this table, so they cannot disagree.

To add a backend: write its ``run`` (and ``seconds`` if ``auto`` or the planner should
weigh it) and add one :class:`Backend` to :data:`REGISTRY`. ``run(factor, X, layout,
config)`` receives a :class:`~kscupy.factor.Factor` already in ``X.dtype``, a 2-D operand
with ``B >= 1`` (``(N, B)`` in ``"bsl"``, ``(B, N)`` in ``"bsf"``) and the backend's
configuration (a kernel tile configuration, or None).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from . import _reference, costs
from .factor import DENSE_CACHE_BYTES
from .kernels import ks_matmul

__all__ = ["Backend", "REGISTRY", "names", "get", "AUTO", "FUSED"]

#: The backend name that asks for the best choice (a decision, not a registry entry).
AUTO = "auto"
#: Chains only: as many factors per launch as shared memory allows (see KSChain.matmul).
FUSED = "fused"


@dataclasses.dataclass(frozen=True)
class Backend:
    """One way to apply one factor."""
    name: str
    devices: frozenset                      # subset of {"cpu", "gpu"}
    run: Callable                           # (factor, X, layout, config) -> result
    seconds: Optional[Callable] = None      # (problem, rates) -> modelled seconds (GPU)
    in_auto: bool = False                   # a candidate of auto on the GPU
    fits: Callable = lambda problem, rates: True   # can it run on the device of `rates`
    doc: str = ""


def _run_kernel(factor, X, layout, config):
    return ks_matmul.launch(factor, X, layout, config)


def _run_reference(algorithm):
    return lambda factor, X, layout, config: algorithm(factor.blocks, X, layout, factor.xp)


def _run_dense(factor, X, layout, config):
    return _reference.dense(factor.dense(), X, layout, factor.xp)


def _run_sparse(factor, X, layout, config):
    return _reference.sparse(_reference.tocsr(factor.blocks, factor.xp), X, layout, factor.xp)


def _kernel_seconds(problem, rates):
    return costs.kernel_seconds(problem, rates, ks_matmul.heuristic_config(problem).bk)


def _dense_fits(problem, rates):
    """The dense matrix must take at most a quarter of the device memory."""
    M, N = problem.pattern.shape
    return problem.itemsize * M * N <= rates.memory // 4


def _dense_seconds(problem, rates):
    M, N = problem.pattern.shape
    return costs.dense_seconds(problem, rates, kept=problem.itemsize * M * N <= DENSE_CACHE_BYTES)


_BOTH = frozenset({"cpu", "gpu"})
REGISTRY = {b.name: b for b in (
    Backend("kernel", frozenset({"gpu"}), _run_kernel, _kernel_seconds, in_auto=True,
            doc="the fused output-stationary CUDA kernel (kernels_cu/ks_matmul.cu)"),
    Backend("bmm", _BOTH, _run_reference(_reference.bmm), costs.bmm_seconds, in_auto=True,
            doc="permute / batched matmul / permute (cuBLAS batched GEMM on the GPU)"),
    Backend("dense", _BOTH, _run_dense, _dense_seconds, in_auto=True, fits=_dense_fits,
            doc="GEMM on the dense matrix, formed on first use and kept when at most "
                "DENSE_CACHE_BYTES (kscupy.KSMatrix.clear_cache releases it)"),
    Backend("einsum", _BOTH, _run_reference(_reference.einsum),
            doc="one tensor contraction over the (a, c, d) view of the input"),
    Backend("sparse", _BOTH, _run_sparse,
            doc="CSR sparse product (scipy.sparse / cuSPARSE), the CSR matrix formed on "
                "every call (for comparison; slow)"),
)}


def names() -> tuple:
    """Backend names a single factor accepts: ``"auto"`` and the registry's."""
    return (AUTO,) + tuple(REGISTRY)


def get(name: str) -> Backend:
    return REGISTRY[name]
