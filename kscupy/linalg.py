"""LinearOperator adapters: hand KS operators to SciPy's and cupyx's iterative solvers.

``aslinearoperator(op)`` wraps any kscupy operator (a :class:`~kscupy.KSMatrix`, or anything
with ``shape``, ``dtype``, ``xp``, ``T``, ``H`` and ``matmul(X, layout=...)``) as a
``scipy.sparse.linalg.LinearOperator`` when its values are NumPy arrays, and as a
``cupyx.scipy.sparse.linalg.LinearOperator`` when they are CuPy arrays. ``matvec`` and
``matmat`` apply ``op``; ``rmatvec`` and ``rmatmat`` apply its adjoint ``op.H`` — no dense
matrix is ever formed.
"""
from __future__ import annotations

import functools

import numpy

__all__ = ["aslinearoperator"]


@functools.lru_cache(maxsize=None)
def _operator_class(base):
    """A LinearOperator subclass of ``base`` (SciPy's or cupyx's) that delegates to a KS op."""

    class KSLinearOperator(base):
        def __init__(self, op):
            super().__init__(dtype=numpy.dtype(op.dtype), shape=op.shape)
            self.op = op

        def _matvec(self, x):
            return self.op.matmul(x.reshape(-1))

        def _rmatvec(self, x):
            return self.op.H.matmul(x.reshape(-1))

        def _matmat(self, X):
            return self.op.matmul(X)

        def _rmatmat(self, X):
            return self.op.H.matmul(X)

        def _adjoint(self):
            return KSLinearOperator(self.op.H)

        def _transpose(self):
            return KSLinearOperator(self.op.T)

        def __repr__(self):
            return f"<{self.shape[0]}x{self.shape[1]} KSLinearOperator of {self.op!r}>"

    KSLinearOperator.__qualname__ = KSLinearOperator.__name__
    return KSLinearOperator


def aslinearoperator(op):
    """Wrap a KS operator as a SciPy (NumPy values) or cupyx (CuPy values) LinearOperator.

    Parameters
    ----------
    op : KSMatrix or any kscupy operator (see the module docstring).

    Returns
    -------
    ``scipy.sparse.linalg.LinearOperator`` or ``cupyx.scipy.sparse.linalg.LinearOperator``
    of shape ``op.shape`` and dtype ``op.dtype``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse.linalg as spla, kscupy as ks
    >>> K = ks.KSMatrix.random((4, 8, 8, 2), dtype=np.float64, seed=1)
    >>> A = ks.aslinearoperator(K)
    >>> A.matvec(np.ones(64)).shape
    (64,)
    """
    for attr in ("shape", "dtype", "xp", "matmul", "H", "T"):
        if not hasattr(op, attr):
            raise TypeError(f"aslinearoperator needs a kscupy operator (KSMatrix, KSChain), "
                            f"got {type(op).__name__}")
    if op.xp is numpy:
        from scipy.sparse.linalg import LinearOperator
    else:
        from cupyx.scipy.sparse.linalg import LinearOperator
    return _operator_class(LinearOperator)(op)
