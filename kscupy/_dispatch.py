"""GPU execution of one KS product for ``backend="auto"`` and ``backend="kernel"``."""
from __future__ import annotations

from . import _kernels, _reference, tuning


def apply(K, X, layout, backend, dtype):
    """``K @ X`` (bsl) or ``X @ K.T`` (bsf) on CuPy arrays; ``X.dtype == dtype`` already.

    A matrix whose dtype differs from the result dtype is converted for the product (a copy
    of its values, as documented in :meth:`kscupy.KSMatrix.matmul`). When ``auto`` picks
    cuBLAS dense, the dense matrix is formed once and kept on the matrix
    (:meth:`kscupy.KSMatrix.dense_cached`; only for factors under
    ``tuning.DENSE_CACHE_BYTES``).
    """
    import cupy
    if K.dtype != dtype:
        K = K.astype(dtype)
    problem = tuning.problem_of(K, X, layout)
    if backend == "kernel":
        return _kernels.launch(K, X, layout, tuning.kernel_config(problem))
    choice = tuning.choose(problem)
    if choice.backend == "kernel":
        return _kernels.launch(K, X, layout, choice.config)
    if choice.backend == "dense":
        return _reference.dense(K.dense_cached(), X, layout, cupy)
    return _reference.bmm(K.blocks, X, layout, cupy)
