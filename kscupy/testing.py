"""Checks for users of kscupy operators (and for kscupy's own test suite).

:func:`dottest` checks that an operator's adjoint is its adjoint: the classic "dot test"
``<op x, y> == <x, op^H y>`` on random data.
"""
from __future__ import annotations

import numpy

from .core import arrays

__all__ = ["dottest"]

#: Default relative tolerance of :func:`dottest`, by the precision of the operator's dtype.
DOTTEST_RTOL = {2: 1e-2, 4: 1e-4, 8: 1e-10}     # real itemsize: half, single, double


def dottest(op, *, layout="bsl", backend="auto", rtol=None, xp=None, seed=None) -> bool:
    """Check the adjoint identity ``<op X, Y> == <X, op^H Y>`` on random data.

    Parameters
    ----------
    op : a KSMatrix, KSChain or any object with ``shape``, ``dtype``, ``H`` and
        ``matmul(X, layout=..., backend=...)``.
    layout : "bsl" (``X`` of shape ``(N, B)``, ``op @ X``) or "bsf" (``X`` of shape
        ``(B, N)``, ``X @ op.T``); the adjoint is applied in the same layout.
    backend : passed to ``matmul`` on both sides.
    rtol : tolerance relative to ``||op X|| ||Y||`` (the Cauchy-Schwarz bound of both
        sides); default 1e-4 for float32/complex64, 1e-10 for float64/complex128.
    xp : array module of the random data; default ``op.xp`` (NumPy when ``op`` has none).
    seed : seed of the NumPy generator that draws ``X`` and ``Y`` (standard normal, complex
        when ``op.dtype`` is complex, batch of 4).

    Returns True; raises AssertionError with both inner products, their difference and the
    bound when the identity fails.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> ks.testing.dottest(ks.dft(16, dtype=np.complex64), seed=0)
    True
    """
    if layout not in ("bsl", "bsf"):
        raise ValueError(f'layout must be "bsl" or "bsf", got {layout!r}')
    missing = [name for name in ("shape", "dtype", "H", "matmul") if not hasattr(op, name)]
    if missing:
        raise TypeError(f"dottest needs an operator with shape, dtype, H and matmul (a "
                        f"KSMatrix or KSChain); a {type(op).__name__} has no "
                        f"{', '.join(missing)}")
    if xp is not None:
        arrays.check_module(xp)
    if rtol is not None and (isinstance(rtol, bool) or not isinstance(rtol, (int, float))
                             or not rtol > 0):
        raise ValueError(f"rtol must be a positive number, got {rtol!r}")
    xp = getattr(op, "xp", numpy) if xp is None else xp
    dtype = numpy.dtype(op.dtype)
    if rtol is None:
        precision = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
        rtol = DOTTEST_RTOL.get(precision, 1e-4)
    rng = numpy.random.default_rng(seed)
    M, N = op.shape
    batch = 4

    def draw(features):
        shape = (features, batch) if layout == "bsl" else (batch, features)
        data = rng.standard_normal(shape)
        if dtype.kind == "c":
            data = data + 1j * rng.standard_normal(shape)
        return xp.asarray(data.astype(dtype))

    X, Y = draw(N), draw(M)
    opX = op.matmul(X, layout=layout, backend=backend)
    opHY = op.H.matmul(Y, layout=layout, backend=backend)
    if opX.shape != Y.shape or opHY.shape != X.shape:
        raise AssertionError(f"dot test: op maps {X.shape} to {opX.shape} and op.H maps "
                             f"{Y.shape} to {opHY.shape} in layout {layout!r}")

    def inner(u, v):     # <u, v> = sum conj(u) v, accumulated in complex128 on the host
        u = numpy.asarray(u.get() if hasattr(u, "get") else u, dtype=numpy.complex128)
        v = numpy.asarray(v.get() if hasattr(v, "get") else v, dtype=numpy.complex128)
        return complex(numpy.vdot(u.ravel(), v.ravel()))

    lhs, rhs = inner(Y, opX), inner(opHY, X)
    bound = float(numpy.sqrt(inner(opX, opX).real * inner(Y, Y).real))
    if not abs(lhs - rhs) <= rtol * bound:
        raise AssertionError(
            f"dot test failed for {op!r} (layout {layout!r}, backend {backend!r}): "
            f"<op X, Y> = {lhs:.8g}, <X, op^H Y> = {rhs:.8g}, |difference| = "
            f"{abs(lhs - rhs):.3g} > rtol * ||op X|| ||Y|| = {rtol:g} * {bound:.3g}")
    return True
