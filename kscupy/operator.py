"""What KSMatrix and KSChain share as operators: array interop, ``@``, the product's entry.

:meth:`KSOperator.matmul` is the one entry of every product: it checks the operand,
decides the result dtype (``numpy.result_type``, once, here), converts the operand, turns a
vector into a batch of one and answers an empty batch; subclasses implement ``_apply`` for
a 2-D operand of the result dtype with ``B >= 1``.
"""
from __future__ import annotations

from . import _arrays

__all__ = ["KSOperator", "LAYOUTS"]

LAYOUTS = ("bsl", "bsf")


class KSOperator:
    """Base of :class:`~kscupy.KSMatrix` and :class:`~kscupy.KSChain`.

    Subclasses provide ``shape``, ``dtype``, ``_xp``, ``T``, ``H``, ``backends()`` (the
    backend names they accept) and ``_apply(X, layout, backend)``; this class gives them
    :meth:`matmul`, the ``@`` operators (arrays on either side; KS operands compose into a
    :class:`~kscupy.KSChain`) and keeps NumPy and CuPy from converting them into arrays
    behind the user's back.
    """

    # Make NumPy and CuPy hand `ndarray @ op` to __rmatmul__ instead of converting `op`.
    __array_ufunc__ = None
    __array_priority__ = 1000
    ndim = 2

    @property
    def xp(self):
        """The array module of the values: ``numpy`` or ``cupy``."""
        return self._xp

    def __array__(self, *args, **kwargs):
        raise TypeError(f"a {type(self).__name__} is not converted to an array implicitly; "
                        f"call .todense() for the dense matrix")

    def matmul(self, X, *, layout="bsl", backend="auto"):
        """Apply the operator to a batch.

        Parameters
        ----------
        X : numpy.ndarray or cupy.ndarray (same module as the values)
            ``layout="bsl"``: shape ``(N,)`` or ``(N, B)``; returns ``op @ X``, shape
            ``(M,)`` or ``(M, B)``. ``layout="bsf"``: shape ``(B, N)`` (or ``(N,)``);
            returns ``X @ op.T``, shape ``(B, M)`` (or ``(M,)``). Any strides are accepted.
        layout : {"bsl", "bsf"}
        backend : str
            ``"auto"`` (the best available choice) or a name from ``backends()``: for one
            factor the registry of :mod:`kscupy.backends` (``"kernel"``: the fused CUDA
            kernel, CuPy only; ``"bmm"``, ``"einsum"``: the permutation-based algorithms of
            the paper's Appendix A; ``"dense"``: GEMM on the dense matrix, kept when small;
            ``"sparse"``: a CSR product, formed on every call); a chain applies every factor
            with it, and also takes ``"fused"`` (CuPy only: as many factors per launch as
            fit).

        Returns
        -------
        Array of dtype ``numpy.result_type(op.dtype, X.dtype)`` (one of float32, float64,
        complex64, complex128), in the module of ``X``. When the dtypes differ, the operand
        is converted for the product and the operator's values are converted once and kept
        (``clear_cache()`` releases the copy).
        """
        self._check_operand(X, layout, backend)
        dtype = _arrays.result_dtype(self.dtype, X.dtype)
        X = X.astype(dtype, copy=False)
        M = self.shape[0]
        if X.ndim == 1:   # a vector is a BSL batch of one
            return self._apply(X.reshape(-1, 1), "bsl", backend).reshape(M)
        B = X.shape[1] if layout == "bsl" else X.shape[0]
        if B == 0:
            return self._xp.empty((M, 0) if layout == "bsl" else (0, M), dtype=dtype)
        return self._apply(X, layout, backend)

    def _check_operand(self, X, layout, backend):
        """Known layout and backend, same array module, 1-D or 2-D, ``N`` features along the
        layout's feature axis. Raises ValueError or TypeError naming the problem."""
        name = type(self).__name__
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if backend not in self.backends():
            raise ValueError(f"backend must be one of {self.backends()}, got {backend!r}")
        xp = _arrays.array_module(X)
        if xp is not self._xp:
            raise TypeError(f"cannot multiply a {name} holding {self._xp.__name__} values "
                            f"with a {xp.__name__} array; move one of them first")
        if X.ndim not in (1, 2):
            raise ValueError(f"operand must be 1-D or 2-D, got shape {X.shape}")
        N = self.shape[1]
        n_in = X.shape[0] if (X.ndim == 1 or layout == "bsl") else X.shape[1]
        if n_in != N:
            expected = "(N,) or (N, B)" if layout == "bsl" else "(B, N) or (N,)"
            raise ValueError(f"shape mismatch: {name} of shape {self.shape} cannot be applied "
                             f"to an operand of shape {X.shape} in layout {layout!r} (expected "
                             f"{expected} with N={N})")

    def __matmul__(self, other):
        if isinstance(other, KSOperator):            # a product of factors is a chain
            from .chain import compose
            return compose(self, other)
        try:
            _arrays.array_module(other)
        except TypeError:
            return NotImplemented
        return self.matmul(other, layout="bsl")

    def __rmatmul__(self, other):
        # other @ op: a row vector (M,) or a batch (B, M) on the left is op.T applied in BSF.
        if isinstance(other, KSOperator):
            from .chain import compose
            return compose(other, self)
        try:
            _arrays.array_module(other)
        except TypeError:
            return NotImplemented
        return self.T.matmul(other, layout="bsf")
