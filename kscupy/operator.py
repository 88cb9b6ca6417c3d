"""What KSMatrix and KSChain share as operators: array interop, ``@`` dispatch, operand checks."""
from __future__ import annotations

from . import _arrays

__all__ = ["KSOperator", "check_operand", "BACKENDS", "CHAIN_BACKENDS", "LAYOUTS"]

#: Backend names accepted by ``KSMatrix.matmul``; chains also take "fused".
BACKENDS = ("auto", "kernel", "bmm", "einsum", "dense", "sparse")
CHAIN_BACKENDS = BACKENDS + ("fused",)
LAYOUTS = ("bsl", "bsf")


def check_operand(op, X, layout, backend, backends=BACKENDS):
    """Validate ``op.matmul(X, layout=layout, backend=backend)`` for any kscupy operator:
    known layout and backend, same array module, 1-D or 2-D, ``N`` features along the
    layout's feature axis. Raises ValueError or TypeError naming the problem."""
    name = type(op).__name__
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if backend not in backends:
        raise ValueError(f"backend must be one of {backends}, got {backend!r}")
    xp = _arrays.array_module(X)
    if xp is not op.xp:
        raise TypeError(f"cannot multiply a {name} holding {op.xp.__name__} values "
                        f"with a {xp.__name__} array; move one of them first")
    if X.ndim not in (1, 2):
        raise ValueError(f"operand must be 1-D or 2-D, got shape {X.shape}")
    N = op.shape[1]
    n_in = X.shape[0] if (X.ndim == 1 or layout == "bsl") else X.shape[1]
    if n_in != N:
        expected = "(N,) or (N, B)" if layout == "bsl" else "(B, N) or (N,)"
        raise ValueError(f"shape mismatch: {name} of shape {op.shape} cannot be applied to an "
                         f"operand of shape {X.shape} in layout {layout!r} (expected {expected} "
                         f"with N={N})")


def _is_dask_array(x) -> bool:
    """True for a ``dask.array.Array``, recognised without importing dask."""
    cls = type(x)
    return cls.__name__ == "Array" and cls.__module__.split(".")[:2] == ["dask", "array"]


class KSOperator:
    """Base of :class:`~kscupy.KSMatrix` and :class:`~kscupy.KSChain`.

    Subclasses provide ``shape``, ``dtype``, ``_xp``, ``T``, ``H`` and
    ``matmul(X, layout=..., backend=...)``; this class gives them the ``@`` operators (arrays
    on either side; KS operands compose into a :class:`~kscupy.KSChain`) and keeps NumPy and
    CuPy from converting them into arrays behind the user's back.
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

    def __matmul__(self, other):
        if isinstance(other, KSOperator):            # a product of factors is a chain
            from .chain import compose
            return compose(self, other)
        if _is_dask_array(other):                    # a lazy dask.array product
            from .dask import matmul
            return matmul(self, other, layout="bsl")
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
        if _is_dask_array(other):
            from .dask import matmul
            return matmul(self.T, other, layout="bsf")
        try:
            _arrays.array_module(other)
        except TypeError:
            return NotImplemented
        return self.T.matmul(other, layout="bsf")

    # -- ecosystem protocols: pickling, copies, devices, scalars, duck-typed solvers ---------
    # (pickling itself is __reduce__ in KSMatrix and KSChain; see kscupy.storage)
    def copy(self):
        """A deep copy: new value (and permutation) arrays on the same device, no caches."""
        from . import storage
        return storage.map_arrays(self, lambda x: x.copy())

    def get(self):
        """A copy of this operator with NumPy values (like ``cupy.ndarray.get``); on a NumPy
        operator, a copy."""
        from . import storage
        return storage.map_arrays(self, storage.to_numpy_copy)

    def to_device(self, device):
        """A copy of this operator on ``device``: ``"cpu"`` (NumPy values, as :meth:`get`),
        ``"gpu"`` (CuPy values on the current device), a device id or a ``cupy.cuda.Device``
        (CuPy values on that device). RuntimeError when the GPU is not available."""
        from . import storage
        return storage.map_arrays(self, storage.device_mover(device))

    def __mul__(self, alpha):
        """``op * alpha`` for a scalar; dtype ``numpy.result_type(op.dtype, alpha)`` (see
        :mod:`kscupy.algebra`)."""
        from . import algebra
        if not algebra.is_scalar(alpha):
            return NotImplemented
        return algebra.scaled(self, alpha)

    __rmul__ = __mul__

    def __truediv__(self, alpha):
        from . import algebra
        if not algebra.is_scalar(alpha):
            return NotImplemented
        return algebra.scaled(self, alpha, divide=True)

    def __neg__(self):
        from . import algebra
        return algebra.scaled(self, -1)

    def __add__(self, other):
        """``K1 + K2`` for two KSMatrix of the same pattern (see :mod:`kscupy.algebra`)."""
        from . import algebra
        return algebra.added(self, other)

    def __sub__(self, other):
        from . import algebra
        return algebra.added(self, other, sign=-1)

    def __radd__(self, other):
        from . import algebra
        return algebra.added(other, self)

    def __rsub__(self, other):
        from . import algebra
        return algebra.added(other, self, sign=-1)

    def matvec(self, x):
        """``op @ x`` for ``x`` of shape ``(N,)`` or ``(N, 1)`` (SciPy's LinearOperator
        protocol: ``scipy.sparse.linalg.cg(op, b)`` and cupyx's solvers take ``op`` itself)."""
        return self.matmul(x)

    def rmatvec(self, x):
        """``op^H @ x`` for ``x`` of shape ``(M,)`` or ``(M, 1)``."""
        return self.H.matmul(x)

    def matmat(self, X):
        """``op @ X`` for ``X`` of shape ``(N, K)``."""
        return self.matmul(X)

    def rmatmat(self, X):
        """``op^H @ X`` for ``X`` of shape ``(M, K)``."""
        return self.H.matmul(X)
