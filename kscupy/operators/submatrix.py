"""KSSubmatrix: the leading ``M x N`` block of a KS chain, applied by zero-padding and cropping.

Some operators are not a chain of KS factors of their own size but the top-left block of a
larger chain: Bluestein's DFT of a prime size ``n`` is the leading ``n x n`` block of an
``m x m`` chain (``m`` a power of two, see :mod:`kscupy.transforms.fourier`). Zero-padding ``n -> m``
with ``gcd(m, n) = 1`` is not a cheap KS factor (only the dense pattern ``(1, m, n, 1)``
holds it), so the padding and the cropping are done by slicing around the chain.
"""
from __future__ import annotations

import numpy

from .chain import KSChain
from .base import KSOperator

__all__ = ["KSSubmatrix"]


class KSSubmatrix(KSOperator):
    """The leading ``shape[0] x shape[1]`` block ``S = C[:M, :N]`` of a :class:`KSChain` ``C``.

    ``S @ x`` pads ``x`` (length ``N``) with zeros to the chain's ``N_c`` columns, applies the
    chain and keeps the first ``M`` entries: ``S @ x == (C @ concat(x, 0))[:M]``.

    Shapes and layouts are those of :class:`KSChain`: ``S @ X`` with ``X`` of shape ``(N,)`` or
    ``(N, B)`` (batch-size-last), ``X @ S.T`` with ``X`` of shape ``(B, N)`` (batch-size-first),
    ``Z @ S`` with ``Z`` of shape ``(B, M)``; ``backend`` is handed to the chain (so on the GPU
    ``"auto"`` follows the chain's plan). ``T`` and ``H`` are the leading
    blocks of ``C.T`` and ``C.H``; ``todense()``, :func:`kscupy.aslinearoperator` work.
    Products with other KS operators do not form chains (TypeError): apply them in turn.

    Parameters
    ----------
    chain : KSChain of shape ``(M_c, N_c)``.
    shape : ``(M, N)`` with ``1 <= M <= M_c`` and ``1 <= N <= N_c``.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> C = ks.KSChain([ks.KSMatrix.random((1, 4, 2, 2), seed=0),
    ...                 ks.KSMatrix.random((2, 2, 4, 1), seed=1)])
    >>> S = ks.KSSubmatrix(C, (5, 3))
    >>> x = np.ones(3, dtype=np.float32)
    >>> bool(np.allclose(S @ x, C.todense()[:5, :3] @ x))
    True
    """

    def __init__(self, chain, shape):
        if not isinstance(chain, KSChain):
            raise TypeError(f"KSSubmatrix needs a KSChain, got {type(chain).__name__}")
        if (not isinstance(shape, tuple) or len(shape) != 2
                or not all(isinstance(s, (int, numpy.integer)) and not isinstance(s, bool)
                           for s in shape)):
            raise TypeError(f"shape must be a tuple of two integers, got {shape!r}")
        M, N = int(shape[0]), int(shape[1])
        if not (1 <= M <= chain.shape[0] and 1 <= N <= chain.shape[1]):
            raise ValueError(f"shape {shape} is not the shape of a leading block of a chain of "
                             f"shape {chain.shape}")
        self._chain = chain
        self._shape = (M, N)
        self._xp = chain.xp
        self._views = {}

    @property
    def chain(self) -> KSChain:
        """The chain whose leading block this is."""
        return self._chain

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self) -> numpy.dtype:
        return self._chain.dtype

    @property
    def nnz(self) -> int:
        """Stored values of the chain (the operator's parameter count)."""
        return self._chain.nnz

    def __repr__(self) -> str:
        return f"KSSubmatrix(shape={self._shape}, leading block of {self._chain!r})"

    def _kept_view(self, name, chain_view):
        # kept and linked back, like KSChain.T, so that S.T.T is S
        if self._views.get(name) is None:
            view = KSSubmatrix(chain_view, self._shape[::-1])
            view._views[name], self._views[name] = self, view
        return self._views[name]

    @property
    def T(self) -> "KSSubmatrix":
        return self._kept_view("T", self._chain.T)

    @property
    def H(self) -> "KSSubmatrix":
        return self._kept_view("H", self._chain.H)

    def conj(self) -> "KSSubmatrix":
        """Complex conjugate (same shape); shares the chain's stored values."""
        return KSSubmatrix(self._chain.conj(), self._shape)

    def backends(self) -> tuple:
        """Backend names :meth:`matmul` accepts: the chain's (it applies the chain)."""
        return self._chain.backends()

    # -- ecosystem protocols (see KSOperator): pickling, copies and moves, scalars ---------
    def __reduce__(self):
        # the chain and the shape; kept views are rebuilt on first use
        return KSSubmatrix, (self._chain, self._shape)

    def _map_arrays(self, convert):
        return KSSubmatrix(self._chain._map_arrays(convert), self._shape)

    def _scaled(self, alpha, divide):
        # alpha C[:M, :N] is the leading block of alpha C
        return KSSubmatrix(self._chain._scaled(alpha, divide), self._shape)

    def _apply(self, X, layout, backend):
        # S X = (C [X; 0])[:M]: zero-pad to the chain's N_c columns, apply, crop to M rows
        xp = self._xp
        M, N = self._shape
        Mc, Nc = self._chain.shape
        if layout == "bsl":
            padded = xp.zeros((Nc, X.shape[1]), dtype=X.dtype)
            padded[:N] = X
            Y = self._chain.matmul(padded, layout="bsl", backend=backend)
            return Y if M == Mc else Y[:M].copy()   # a copy frees the padded rows
        padded = xp.zeros((X.shape[0], Nc), dtype=X.dtype)
        padded[:, :N] = X
        Y = self._chain.matmul(padded, layout="bsf", backend=backend)
        return Y if M == Mc else xp.ascontiguousarray(Y[:, :M])
