"""Checks for users of kscupy operators (and for kscupy's own test suite).

:func:`dottest` checks that an operator's adjoint is its adjoint: the classic "dot test"
``<op x, y> == <x, op^H y>`` on random data. :func:`gradcheck` checks the gradients of
:func:`kscupy.vjp` against central finite differences in double precision.
"""
from __future__ import annotations

import numpy

from .core import argument_checks, arrays
from .core.argument_checks import positive_int

__all__ = ["dottest", "gradcheck"]

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
    if rtol is not None:
        rtol = argument_checks.real_number("rtol", rtol)
    xp = getattr(op, "xp", numpy) if xp is None else xp
    dtype = numpy.dtype(op.dtype)
    if rtol is None:
        precision = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
        rtol = DOTTEST_RTOL.get(precision, 1e-4)
    rng = numpy.random.default_rng(argument_checks.seed(seed))
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


def _host_complex(u):
    return numpy.asarray(u.get() if hasattr(u, "get") else u, dtype=numpy.complex128)


def _scale(A) -> float:
    """The root mean square of ``A``'s entries (1 where they are all zero): the unit of a
    finite-difference step along ``A``."""
    rms = float(numpy.sqrt(numpy.mean(numpy.abs(_host_complex(A)) ** 2)))
    return rms if rms > 0 and numpy.isfinite(rms) else 1.0


def gradcheck(op, *, layout="bsl", batch=3, eps=1e-6, rtol=1e-6, seed=None) -> bool:
    """Check :func:`kscupy.vjp` against central finite differences, in double precision.

    With random ``X`` and ``G`` the loss is ``L = Re sum(conj(G) * op(X))`` (so ``G`` is its
    gradient with respect to the product). For a random direction ``V`` of every factor's
    values and ``U`` of ``X``, the directional derivatives ``(L(w + eps V) - L(w - eps V)) /
    (2 eps)`` are compared with ``Re sum(conj(dw) * V)`` and likewise for ``X``; a factor
    whose values are declared structured (no gradient) is left unperturbed.

    Parameters
    ----------
    op : KSMatrix or KSChain; checked as a float64 (complex128 where complex) copy.
    layout : "bsl" or "bsf".
    batch : columns (bsl) or rows (bsf) of ``X``.
    eps : step of the finite differences, in units of the root mean square of the values
        (of each factor's) and of ``X``.
    rtol : tolerance relative to the size of the terms of the derivative.
    seed : seed of the NumPy generator that draws ``X``, ``G`` and the directions.

    Returns True; raises AssertionError naming the gradient (of ``X`` or of factor ``l``)
    and both derivatives when one differs.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> ks.testing.gradcheck(ks.butterfly(16, seed=0), seed=1)
    True
    """
    from . import gradients
    from .operators.chain import KSChain
    from .operators.matrix import KSMatrix
    if not isinstance(op, (KSMatrix, KSChain)):
        raise TypeError(f"gradcheck takes a KSMatrix or a KSChain, got {type(op).__name__}")
    if layout not in ("bsl", "bsf"):
        raise ValueError(f'layout must be "bsl" or "bsf", got {layout!r}')
    batch = positive_int("batch", batch)
    eps, rtol = (argument_checks.real_number(name, value)
                 for name, value in (("eps", eps), ("rtol", rtol)))
    seed = argument_checks.seed(seed)
    dtype = numpy.dtype(numpy.complex128 if op.dtype.kind == "c" else numpy.float64)
    factors = [op] if isinstance(op, KSMatrix) else list(op.factors)
    factors = [f.astype(dtype) for f in factors]
    xp = op.xp
    rng = numpy.random.default_rng(seed)

    def draw(shape, kind=dtype.kind):
        data = rng.standard_normal(shape)
        if kind == "c":
            data = data + 1j * rng.standard_normal(shape)
        return xp.asarray(data.astype(dtype if kind == dtype.kind else numpy.float64))

    def rebuild(values):
        made = [f if v is None else KSMatrix(v) for f, v in zip(factors, values)]
        if isinstance(op, KSMatrix):
            return made[0]
        return KSChain(made, input_permutation=op.input_permutation,
                       output_permutation=op.output_permutation)

    M, N = op.shape
    X = draw((N, batch) if layout == "bsl" else (batch, N))
    G = draw((M, batch) if layout == "bsl" else (batch, M))
    target = rebuild([None] * len(factors))
    dX, dws = gradients.vjp(target, X, G, layout=layout)
    dws = [dws] if isinstance(op, KSMatrix) else dws
    values = [f.values for f in factors]

    def loss(values, X):
        return float(numpy.vdot(_host_complex(G).ravel(),
                                _host_complex(rebuild(values).matmul(X, layout=layout)).ravel()).real)

    def compare(name, analytic, numeric, scale):
        if not abs(analytic - numeric) <= rtol * scale:
            raise AssertionError(f"gradcheck of {op!r}: the gradient of {name} gives the "
                                 f"directional derivative {analytic:.10g}, finite differences "
                                 f"{numeric:.10g} (|difference| {abs(analytic - numeric):.3g} > "
                                 f"rtol * {scale:.3g})")

    for idx, dw in enumerate(dws):
        if dw is None:
            continue
        V = draw(values[idx].shape)
        h = eps * _scale(values[idx])
        plus, minus = [None] * len(factors), [None] * len(factors)
        plus[idx], minus[idx] = values[idx] + h * V, values[idx] - h * V
        numeric = (loss(plus, X) - loss(minus, X)) / (2 * h)
        terms = numpy.conj(_host_complex(dw)) * _host_complex(V)
        compare(f"factor {idx}'s values", float(terms.sum().real), numeric,
                float(numpy.abs(terms).sum()))
    U = draw(X.shape)
    h = eps * _scale(X)
    numeric = (loss([None] * len(factors), X + h * U)
               - loss([None] * len(factors), X - h * U)) / (2 * h)
    terms = numpy.conj(_host_complex(dX)) * _host_complex(U)
    compare("X", float(terms.sum().real), numeric, float(numpy.abs(terms).sum()))
    return True
