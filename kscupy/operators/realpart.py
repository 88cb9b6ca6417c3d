"""KSRealPart: the real matrix ``Re(W)`` of a complex KS operator ``W``, applied linearly.

The DCT and DST are real matrices that are the real part of a complex DFT chain with a
permutation and a diagonal folded in (Makhoul's method, :mod:`kscupy.transforms.dct`). ``x -> Re(W x)``
is that real matrix only on real inputs, and it is not linear over complex inputs
(``Re(W (i x)) != i Re(W x)``). This operator applies the real matrix ``Re(W)`` itself:
``Re(W) X = Re(W Re X) + i Re(W Im X)``, so it is linear, its transpose is ``Re(W^T)`` and,
being real, its adjoint is its transpose.
"""
from __future__ import annotations

import numpy

from .base import KSOperator

__all__ = ["KSRealPart"]

_REAL_OF = {numpy.dtype(numpy.complex64): numpy.dtype(numpy.float32),
            numpy.dtype(numpy.complex128): numpy.dtype(numpy.float64)}


class KSRealPart(KSOperator):
    """The real ``(M, N)`` matrix ``Re(W)`` of a complex KS operator ``W`` (a
    :class:`~kscupy.KSChain` or :class:`~kscupy.KSSubmatrix`).

    ``R @ X``: ``X`` of shape ``(N,)`` or ``(N, B)`` (batch-size-last); ``X @ R.T``: ``X`` of
    shape ``(B, N)`` (batch-size-first). A real ``X`` costs one application of ``W`` to ``X``
    (promoted to complex) and keeps the real part; a complex ``X`` applies ``W`` once to its
    real and imaginary parts stacked along the batch. The dtype of ``R`` is the real dtype of
    ``W`` (complex64 -> float32, complex128 -> float64); results have dtype
    ``numpy.result_type(R.dtype, X.dtype)``. ``T`` is ``Re(W.T)``, ``H`` is ``T``.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> R = ks.KSRealPart(ks.dft(8))          # the cosine part of the DFT matrix
    >>> x = np.arange(8.0)
    >>> bool(np.allclose(R @ x, np.fft.fft(x).real)), (R @ x).dtype
    (True, dtype('float64'))
    """

    def __init__(self, operator):
        if not isinstance(operator, KSOperator):
            raise TypeError(f"KSRealPart needs a kscupy operator, got {type(operator).__name__}")
        if operator.dtype.kind != "c":
            raise TypeError(f"KSRealPart needs a complex operator, got dtype {operator.dtype}; "
                            f"a real operator is its own real part")
        self._operator = operator
        self._xp = operator.xp
        self._transpose = None

    @property
    def operator(self):
        """The complex operator ``W`` whose real part this is."""
        return self._operator

    @property
    def shape(self) -> tuple:
        return self._operator.shape

    @property
    def dtype(self) -> numpy.dtype:
        return _REAL_OF[numpy.dtype(self._operator.dtype)]

    @property
    def nnz(self) -> int:
        """Stored values of ``W``."""
        return self._operator.nnz

    def __repr__(self) -> str:
        return f"KSRealPart(shape={self.shape}, dtype={self.dtype}, of {self._operator!r})"

    @property
    def T(self) -> "KSRealPart":
        if self._transpose is None:      # kept and linked back: R.T.T is R
            self._transpose = KSRealPart(self._operator.T)
            self._transpose._transpose = self
        return self._transpose

    @property
    def H(self) -> "KSRealPart":
        return self.T

    def conj(self) -> "KSRealPart":
        """Complex conjugate: the operator itself (its entries are real)."""
        return self

    def backends(self) -> tuple:
        """Backend names :meth:`matmul` accepts: those of ``W``, which it applies."""
        return self._operator.backends()

    # -- ecosystem protocols (see KSOperator): pickling, copies and moves, scalars ---------
    def __reduce__(self):
        return KSRealPart, (self._operator,)

    def _map_arrays(self, convert):
        return KSRealPart(self._operator._map_arrays(convert))

    def _scaled(self, alpha, divide):
        # alpha Re(W) = Re(alpha W) for a real alpha; a complex alpha leaves the real matrices
        if numpy.iscomplexobj(alpha):
            raise TypeError(f"a KSRealPart scales by real numbers, got {alpha!r}: "
                            f"alpha * Re(W) is complex; scale W and take the real part "
                            f"yourself if you mean Re(alpha W)")
        return KSRealPart(self._operator._scaled(alpha, divide))

    def _apply(self, X, layout, backend):
        xp = self._xp
        if X.dtype.kind != "c":
            Y = self._operator.matmul(X, layout=layout, backend=backend).real
            return xp.ascontiguousarray(Y, dtype=X.dtype)
        # complex X: Re(W) X = Re(W Re X) + i Re(W Im X), one pass over both halves
        batch_axis = 1 if layout == "bsl" else 0
        B = X.shape[batch_axis]
        Y = self._operator.matmul(xp.concatenate([X.real, X.imag], axis=batch_axis),
                                  layout=layout, backend=backend).real
        real, imag = (Y[:, :B], Y[:, B:]) if layout == "bsl" else (Y[:B], Y[B:])
        out = xp.empty(real.shape, dtype=X.dtype)
        out.real, out.imag = real, imag
        return out
