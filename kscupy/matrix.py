"""KSMatrix: one Kronecker-sparse factor, stored pre-tiled, multiplied in both layouts."""
from __future__ import annotations

import numpy

from . import _arrays, _reference, memory
from .operator import BACKENDS, KSOperator, check_operand
from .pattern import KSPattern

__all__ = ["KSMatrix", "BACKENDS"]


class KSMatrix(KSOperator):
    """A Kronecker-sparse matrix with pattern ``(a, b, c, d)`` and shape ``(a*b*d, a*c*d)``.

    Values are given in the *canonical* layout, an array ``w`` of shape ``(a, b, c, d)`` with

        ``K[i*b*d + k*d + j, i*c*d + l*d + j] = w[i, k, l, j]``

    and stored *pre-tiled*: an array of shape ``(a, d, b, c)`` in which the dense ``b × c``
    block of every group ``(i, j)`` is contiguous, so multiplies never re-lay out weights.
    The array module of the values decides where the matrix lives: NumPy values give a
    CPU matrix, CuPy values a GPU matrix.

    Multiplication (``M, N = K.shape``; ``B`` is the batch size):

    ========================  ==============  ==============  =========================
    expression                operand shape   result shape    layout
    ========================  ==============  ==============  =========================
    ``K @ x``                 ``(N,)``        ``(M,)``        vector
    ``K @ X``                 ``(N, B)``      ``(M, B)``      batch-size-last (BSL)
    ``X @ K.T``               ``(B, N)``      ``(B, M)``      batch-size-first (BSF)
    ``Z @ K``                 ``(B, M)``      ``(B, N)``      BSF with ``K.T``
    ``x @ K``                 ``(M,)``        ``(N,)``        vector
    ========================  ==============  ==============  =========================

    The result dtype is ``numpy.result_type(K.dtype, X.dtype)``; it must be one of float32,
    float64, complex64, complex128. When the operands' dtypes differ, the one of lower
    precision is converted (a copy) to the result dtype for the product. NumPy and CuPy
    operands must not be mixed (TypeError). ``T``, ``H`` and ``conj()`` return views that
    share the stored values.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> K = ks.KSMatrix.random((2, 3, 4, 5), dtype=np.float64, seed=0)
    >>> X = np.ones((K.shape[1], 7))
    >>> (K @ X).shape, (X.T @ K.T).shape
    ((30, 7), (7, 30))
    """

    def __init__(self, values):
        xp = _arrays.array_module(values)
        _arrays.check_dtype(values.dtype)
        if values.ndim != 4:
            raise ValueError("KSMatrix(values) takes canonical values of shape (a, b, c, d), "
                             f"got an array of shape {values.shape}")
        pattern = KSPattern.of(values.shape)   # also rejects empty axes
        self._init(xp.ascontiguousarray(values.transpose(0, 3, 1, 2)), pattern,
                   transposed=False, conjugated=False, derived={})

    def _init(self, tiles, stored_pattern, transposed, conjugated, derived):
        # `tiles` holds the blocks of `stored_pattern` (shape (a, d, b0, c0), C-contiguous);
        # this object represents op(stored), op in {identity, T, conj, H}. `derived` holds
        # arrays computed from the values (see dense_cached) and is shared by all views.
        self._tiles = tiles
        self._stored_pattern = stored_pattern
        self._transposed = transposed
        self._conjugated = conjugated and tiles.dtype.kind == "c"
        self._xp = _arrays.array_module(tiles)
        self._derived = derived
        self._pattern = stored_pattern.transpose() if transposed else stored_pattern

    def _view(self, transposed, conjugated) -> "KSMatrix":
        """Another view of the same stored values."""
        obj = KSMatrix.__new__(KSMatrix)
        obj._init(self._tiles, self._stored_pattern, transposed, conjugated, self._derived)
        return obj

    @classmethod
    def _from_tiles(cls, tiles, pattern) -> "KSMatrix":
        obj = cls.__new__(cls)
        obj._init(tiles, pattern, False, False, {})
        return obj

    # -- constructors --------------------------------------------------------------------
    @classmethod
    def random(cls, pattern, dtype=numpy.float32, xp=numpy, seed=None) -> "KSMatrix":
        """Random values uniform in ``[-1/sqrt(c), 1/sqrt(c)]`` (real and imaginary parts).

        ``xp`` is ``numpy`` (CPU) or ``cupy`` (GPU); ``seed`` seeds ``xp.random.default_rng``.
        """
        pattern = KSPattern.of(pattern)
        dtype = _arrays.check_dtype(dtype)
        if xp is not numpy and getattr(xp, "__name__", None) != "cupy":
            raise TypeError(f"xp must be numpy or cupy, got {xp!r}")
        memory.check_fits(3 * pattern.nnz * dtype.itemsize, xp,   # draws, sum, stored tiles
                          f"KSMatrix.random({tuple(pattern)}, {dtype})")
        rng = xp.random.default_rng(seed)
        scale = 1.0 / numpy.sqrt(pattern.c)
        real = numpy.float32 if dtype in (numpy.float32, numpy.complex64) else numpy.float64

        def draw():
            return (rng.random(tuple(pattern), dtype=real) * 2 - 1) * real(scale)

        values = draw() if dtype.kind == "f" else draw() + 1j * draw()
        return cls(values.astype(dtype, copy=False))

    @classmethod
    def from_dense(cls, D, pattern) -> "KSMatrix":
        """The projection of the dense ``(M, N)`` matrix ``D`` onto the support of ``pattern``.

        Entries of ``D`` outside the support are ignored. Raises ValueError when ``D.shape``
        is not ``pattern.shape``, TypeError on an unsupported dtype.
        """
        pattern = KSPattern.of(pattern)
        xp = _arrays.array_module(D)
        _arrays.check_dtype(D.dtype)
        if D.shape != pattern.shape:
            raise ValueError(f"dense matrix of shape {D.shape} does not match pattern "
                             f"{tuple(pattern)}, whose shape is {pattern.shape}")
        rows, cols = pattern.indices(xp)
        return cls._from_tiles(xp.ascontiguousarray(D[rows, cols]), pattern)

    # -- attributes ----------------------------------------------------------------------
    @property
    def pattern(self) -> KSPattern:
        return self._pattern

    @property
    def shape(self) -> tuple[int, int]:
        return self.pattern.shape

    @property
    def dtype(self) -> numpy.dtype:
        return self._tiles.dtype

    @property
    def nnz(self) -> int:
        return self.pattern.nnz

    @property
    def blocks(self):
        """The ``(a, d, b, c)`` array of dense group blocks of this matrix (a view; for a
        conjugated complex matrix, a conjugated copy)."""
        blocks = self._tiles.swapaxes(-1, -2) if self._transposed else self._tiles
        return self._xp.conj(blocks) if self._conjugated else blocks

    @property
    def values(self):
        """Canonical values ``w`` of shape ``(a, b, c, d)`` (see the class docstring)."""
        return self.blocks.transpose(0, 2, 3, 1)

    # -- views and conversions -------------------------------------------------------------
    @property
    def T(self) -> "KSMatrix":
        """Transpose, pattern ``(a, c, b, d)``; shares the stored values."""
        return self._view(not self._transposed, self._conjugated)

    @property
    def H(self) -> "KSMatrix":
        """Conjugate transpose; shares the stored values."""
        return self._view(not self._transposed, not self._conjugated)

    def conj(self) -> "KSMatrix":
        """Complex conjugate; shares the stored values."""
        return self._view(self._transposed, not self._conjugated)

    def astype(self, dtype) -> "KSMatrix":
        """A copy with values converted to ``dtype`` (one of the supported dtypes)."""
        dtype = _arrays.check_dtype(dtype)
        copy = KSMatrix._from_tiles(self._tiles.astype(dtype), self._stored_pattern)
        return copy._view(self._transposed, self._conjugated)

    def todense(self):
        """The dense ``(M, N)`` matrix, in the array module of the values (MemoryError when
        it cannot fit)."""
        memory.check_fits(self.shape[0] * self.shape[1] * self.dtype.itemsize, self._xp,
                          f"the dense {self.shape[0]} x {self.shape[1]} matrix of {self!r}")
        return _reference.todense(self.blocks, self._xp)

    def dense_cached(self):
        """The dense matrix, formed once and kept (shared with this matrix's T/H views).

        ``backend="auto"`` uses it for small, nearly dense factors where cuBLAS on the dense
        matrix beats both KS algorithms (see :mod:`kscupy.tuning`); :meth:`clear_cache`
        releases it.
        """
        key = ("dense", self._transposed, self._conjugated)
        D = self._derived.get(key)
        if D is None:
            D = self._derived[key] = self.todense()
        return D

    def clear_cache(self):
        """Release arrays kept by :meth:`dense_cached` (for this matrix and its views)."""
        self._derived.clear()

    def tocsr(self):
        """The matrix in CSR format (``scipy.sparse`` or ``cupyx.scipy.sparse``)."""
        return _reference.tocsr(self.blocks, self._xp)

    def __repr__(self) -> str:
        where = "cpu" if self._xp is numpy else f"cuda:{self._tiles.device.id}"
        view = {(False, False): "", (True, False): ", transposed view",
                (False, True): ", conjugated view", (True, True): ", adjoint view"}
        a, b, c, d = self.pattern
        return (f"KSMatrix(pattern=({a}, {b}, {c}, {d}), shape={self.shape}, "
                f"dtype={self.dtype}, device={where}"
                f"{view[(self._transposed, self._conjugated)]})")

    # -- multiplication --------------------------------------------------------------------
    def matmul(self, X, *, layout="bsl", backend="auto"):
        """Apply this matrix to a batch.

        Parameters
        ----------
        X : numpy.ndarray or cupy.ndarray (same module as the values)
            ``layout="bsl"``: shape ``(N,)`` or ``(N, B)``; returns ``K @ X``, shape ``(M,)``
            or ``(M, B)``. ``layout="bsf"``: shape ``(B, N)`` (or ``(N,)``); returns
            ``X @ K.T``, shape ``(B, M)`` (or ``(M,)``). Any strides are accepted.
        layout : {"bsl", "bsf"}
        backend : {"auto", "kernel", "bmm", "einsum", "dense", "sparse"}
            ``"bmm"``, ``"einsum"``: the permutation-based algorithms of the paper's
            Appendix A. ``"dense"`` / ``"sparse"``: convert the matrix to a dense or CSR
            matrix *on every call* and multiply (for comparison; slow). ``"kernel"``: the
            fused CUDA kernel (CuPy operands only). ``"auto"``: the best available choice;
            on NumPy operands this is ``"bmm"``.

        Returns
        -------
        Array of dtype ``numpy.result_type(self.dtype, X.dtype)``, in the module of ``X``.
        """
        check_operand(self, X, layout, backend)
        M, N = self.shape
        dtype = _arrays.result_dtype(self.dtype, X.dtype)
        X = X.astype(dtype, copy=False)
        if X.ndim == 1:   # a vector is a BSL batch of one
            return self._apply(X.reshape(N, 1), "bsl", backend, dtype).reshape(M)
        return self._apply(X, layout, backend, dtype)

    def _apply(self, X, layout, backend, dtype):
        xp = self._xp
        M = self.shape[0]
        B = X.shape[1] if layout == "bsl" else X.shape[0]
        if B == 0:
            return xp.empty((M, 0) if layout == "bsl" else (0, M), dtype=dtype)
        if backend == "kernel" and xp is numpy:
            raise TypeError("backend='kernel' runs on the GPU and needs CuPy operands")
        if backend in ("auto", "kernel") and xp is not numpy:
            from . import _dispatch
            return _dispatch.apply(self, X, layout, backend, dtype)
        if backend == "auto" or backend == "kernel":
            backend = "bmm"
        K = self if self.dtype == dtype else self.astype(dtype)
        if backend == "dense":
            return _reference.dense(K.todense(), X, layout, xp)
        if backend == "sparse":
            return _reference.sparse(K.tocsr(), X, layout, xp)
        return _reference.ALGORITHMS[backend](K.blocks, X, layout, xp)

    # -- ecosystem protocols (pickling; see kscupy.storage and KSOperator) -------------------
    @property
    def view_flags(self) -> tuple[bool, bool]:
        """``(transposed, conjugated)``: how this matrix is a view of its stored values
        (``K.T`` is ``(True, False)``, ``K.H`` is ``(True, True)`` for complex values)."""
        return self._transposed, self._conjugated

    def __reduce__(self):
        # Pickle and deepcopy carry the stored values and the view flags, not the caches.
        from . import storage
        return storage.rebuild_matrix, storage.matrix_parts(self)
