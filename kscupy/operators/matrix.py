"""KSMatrix: one Kronecker-sparse factor, stored pre-tiled, multiplied in both layouts."""
from __future__ import annotations

import numpy

from .. import engine
from ..core import argument_checks, arrays, captured, foreign, memory, reference
from ..core.factor import Factor
from ..core.pattern import KSPattern
from ..core.structure import DFTStage
from ..engine import registry
from .base import KSOperator

__all__ = ["KSMatrix"]


class KSMatrix(KSOperator):
    """A Kronecker-sparse matrix with pattern ``(a, b, c, d)`` and shape ``(a*b*d, a*c*d)``.

    Values are given in the *canonical* layout, an array ``w`` of shape ``(a, b, c, d)`` with

        ``K[i*b*d + k*d + j, i*c*d + l*d + j] = w[i, k, l, j]``

    and stored *pre-tiled*: an array of shape ``(a, d, b, c)`` in which the dense ``b × c``
    block of every group ``(i, j)`` is contiguous, so multiplies never re-lay out weights.
    The values are copied. Their array module decides where the matrix lives: NumPy values
    give a CPU matrix, CuPy values a GPU matrix (a PyTorch or JAX array, or another
    library's that exports DLPack, counts as the NumPy or CuPy array of its memory);
    ``xp=cupy`` (or ``xp=numpy``) stores them in the other module instead, tiled (and
    checked against ``structure``) where they are given.
    ``structure``: a declared structure of the values (:class:`kscupy.DFTStage`), checked
    here (ValueError when the values do not have it).

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

    The result dtype is ``numpy.result_type(K.dtype, X.dtype)``; it must be one of float16,
    float32, float64, complex64, complex128 (float16 products sum in float32 and round
    once). When the operands' dtypes differ, the one of lower
    precision is converted to the result dtype for the product (the matrix's converted
    values are kept for the next product; :meth:`clear_cache` releases them). NumPy and CuPy
    operands must not be mixed (TypeError). Another library's array (PyTorch, JAX, any
    that exports ``__dlpack__``) is multiplied without a copy as the NumPy or CuPy array of
    its memory, and the result comes back as that library's array
    (:mod:`kscupy.core.foreign`). ``T``, ``H`` and ``conj()`` return views that
    share the stored values. Below this class, every layer sees the matrix through its
    :attr:`factor` (:class:`kscupy.core.factor.Factor`).

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> K = ks.KSMatrix.random((2, 3, 4, 5), dtype=np.float64, seed=0)
    >>> X = np.ones((K.shape[1], 7))
    >>> (K @ X).shape, (X.T @ K.T).shape
    ((30, 7), (7, 30))
    """

    def __init__(self, values, structure=None, *, xp=None):
        if foreign.is_foreign(values):          # a PyTorch, JAX, ... array: through DLPack
            values = foreign.native(values, "values")
        source = arrays.plain_array_module(values, "values")
        if xp is None:
            xp = source
        arrays.check_module(xp)
        arrays.check_dtype(values.dtype)
        if structure is not None and not isinstance(structure, DFTStage):
            raise TypeError(f"structure must be None or a kscupy.DFTStage, got "
                            f"{structure!r}")
        if values.ndim != 4:
            raise ValueError("KSMatrix(values) takes canonical values of shape (a, b, c, d), "
                             f"got an array of shape {values.shape}")
        pattern = KSPattern.of(values.shape)   # also rejects empty axes
        for module in {source, xp}:
            captured.refuse_in_capture(module, "KSMatrix(values)")
        with arrays.device_of(values):        # tiled (and checked) where the values are
            # always a copy: values whose (a, d, b, c) view is contiguous already would
            # otherwise be shared with the caller's array
            tiles = source.array(values.transpose(0, 3, 1, 2), order="C", copy=True)
        factor = Factor.of_blocks(tiles, pattern, declared=structure)
        if structure is not None and factor.structure is None:
            raise ValueError(f"the values of pattern {tuple(pattern)} do not have the declared "
                             f"structure {structure!r} (to within rounding in {tiles.dtype})")
        if xp is not source:                   # moved once tiled: no CuPy kernel runs here
            factor = factor.copy_to(xp)
        if xp is not numpy:
            # the tiles complete (their copy is queued) before a product on another stream
            # reads them: a non-blocking stream, PyTorch's side streams among them, does not
            # wait for this one (as Factor.write leaves new values)
            with arrays.device_of(factor.tiles):
                xp.cuda.get_current_stream().synchronize()
        self._factor = factor
        self._xp = xp
        if xp is not numpy:
            engine.compile_ahead(factor)

    @classmethod
    def of_factor(cls, factor: Factor) -> "KSMatrix":
        """The matrix a :class:`~kscupy.core.factor.Factor` describes (shares its storage)."""
        obj = cls.__new__(cls)
        obj._factor = factor
        obj._xp = factor.xp
        return obj

    # -- constructors --------------------------------------------------------------------
    @classmethod
    def random(cls, pattern, dtype=numpy.float32, xp=numpy, seed=None) -> "KSMatrix":
        """Random values uniform in ``[-1/sqrt(c), 1/sqrt(c)]`` (real and imaginary parts).

        ``xp`` is ``numpy`` (CPU) or ``cupy`` (GPU); ``seed`` seeds
        ``numpy.random.default_rng``, which draws the values on the host for either module
        (the same seed gives the same matrix on the CPU and the GPU).
        """
        pattern = KSPattern.of(pattern)
        dtype = arrays.check_dtype(dtype)
        arrays.check_module(xp)
        # drawn on the host, where the same seed gives the same values for either module
        memory.check_fits_with_host(pattern.nnz * dtype.itemsize,    # stored tiles
                                    3 * pattern.nnz * dtype.itemsize,   # draws, sum, tiles
                                    xp, f"KSMatrix.random({tuple(pattern)}, {dtype})")
        rng = numpy.random.default_rng(argument_checks.seed(seed))
        scale = 1.0 / numpy.sqrt(pattern.c)
        real = numpy.float32 if dtype in (numpy.float32, numpy.complex64) else numpy.float64

        def draw():
            return (rng.random(tuple(pattern), dtype=real) * 2 - 1) * real(scale)

        values = draw() + 1j * draw() if dtype.kind == "c" else draw()
        return cls(values.astype(dtype, copy=False), xp=xp)

    @classmethod
    def from_dense(cls, D, pattern) -> "KSMatrix":
        """The projection of the dense ``(M, N)`` matrix ``D`` onto the support of ``pattern``.

        Entries of ``D`` outside the support are ignored. Raises ValueError when ``D.shape``
        is not ``pattern.shape``, TypeError on an unsupported dtype.
        """
        pattern = KSPattern.of(pattern)
        xp = arrays.plain_array_module(D, "dense matrix")
        arrays.check_dtype(D.dtype)
        if D.shape != pattern.shape:
            raise ValueError(f"dense matrix of shape {D.shape} does not match pattern "
                             f"{tuple(pattern)}, whose shape is {pattern.shape}")
        rows, cols = pattern.indices(xp)
        return cls.of_factor(Factor.of_blocks(xp.ascontiguousarray(D[rows, cols]), pattern))

    # -- attributes ----------------------------------------------------------------------
    @property
    def factor(self) -> Factor:
        """What the execution layers see: storage, stored pattern, view flags, cache."""
        return self._factor

    @property
    def pattern(self) -> KSPattern:
        return self._factor.pattern

    @property
    def shape(self) -> tuple[int, int]:
        return self._factor.shape

    @property
    def dtype(self) -> numpy.dtype:
        return self._factor.dtype

    @property
    def nnz(self) -> int:
        return self.pattern.nnz

    @property
    def structure(self):
        """The structure the stored values were declared to have
        (:class:`kscupy.DFTStage`), when they still have it, else None.

        Declared with ``KSMatrix(values, structure=...)`` (the DFT and Hadamard factories
        do), checked then and again after every write of the values; kernels may compute
        such blocks instead of loading them. It describes the stored values: ``K.T`` and
        ``K.H`` share it and apply it transposed or conjugated."""
        return self._factor.structure

    @property
    def blocks(self):
        """The ``(a, d, b, c)`` array of dense group blocks of this matrix, not writable (see
        :attr:`values`)."""
        return arrays.read_only(self._factor.blocks)

    @property
    def values(self):
        """Canonical values ``w`` of shape ``(a, b, c, d)`` (see the class docstring).

        Reading gives an array that refuses writes (``ValueError: assignment destination is
        read-only``): a read-only view on NumPy; on CuPy, which has no write flag, a copy
        whose item assignment, in-place operators, ``fill`` and ``put`` raise (writes that
        bypass the array's methods, ``cupy.copyto`` or ``out=``, reach the copy only).
        Writing goes through assignment, ``K.values = w``: ``w`` of shape ``(a, b, c, d)``,
        the matrix's array module and a dtype that casts safely to ``K.dtype``. The new
        values are copied into a new storage, complete, which then replaces the old one in a
        single step: the views ``K.T``, ``K.H`` (and chains holding ``K``) see the new values,
        what was derived from the old ones (dense matrix, converted copies, merged chain
        factors, prepared GPU runs) is dropped, and a product running in another thread at
        that moment gives the result of the old values or of the new ones, never of a mix.
        To change a few entries::

            w = K.values.copy(); w[0, 1, 2, 0] = 5.0; K.values = w
        """
        return arrays.read_only(self._canonical_values())

    @values.setter
    def values(self, w):
        if foreign.is_foreign(w):               # a PyTorch, JAX, ... array: through DLPack
            w = foreign.native(w, "values")
        if arrays.plain_array_module(w, "values") is not self._xp:
            raise TypeError(f"new values must be a {self._xp.__name__} array like the matrix's, "
                            f"got a {arrays.array_module(w).__name__} array")
        if w.shape != tuple(self.pattern):
            raise ValueError(f"new values must have the shape {tuple(self.pattern)} of the "
                             f"pattern, got {w.shape}")
        arrays.check_dtype(w.dtype)                 # as the constructor: no ints, bools, ...
        if not numpy.can_cast(w.dtype, self.dtype, "safe"):
            raise TypeError(f"new values of dtype {w.dtype} do not cast safely to the matrix's "
                            f"{self.dtype}; convert them explicitly (or use K.astype)")
        self._factor.write(w.transpose(0, 3, 1, 2))

    def _canonical_values(self):
        # the (a, b, c, d) view of the stored blocks: for this class's own reading only
        return self._factor.blocks.transpose(0, 2, 3, 1)

    # -- views and conversions -------------------------------------------------------------
    @property
    def T(self) -> "KSMatrix":
        """Transpose, pattern ``(a, c, b, d)``; shares the stored values."""
        return KSMatrix.of_factor(self._factor.T)

    @property
    def H(self) -> "KSMatrix":
        """Conjugate transpose; shares the stored values."""
        return KSMatrix.of_factor(self._factor.H)

    def conj(self) -> "KSMatrix":
        """Complex conjugate; shares the stored values."""
        return KSMatrix.of_factor(self._factor.conj())

    def astype(self, dtype) -> "KSMatrix":
        """A copy with values converted to ``dtype`` (one of the supported dtypes)."""
        return KSMatrix.of_factor(self._factor.astype(dtype))

    def trace(self):
        """The trace (a NumPy scalar of the dtype), from the stored values: a square KS
        matrix has ``b == c`` and its diagonal is ``w[i, k, k, j]``; ValueError when the
        matrix is not square."""
        if self.shape[0] != self.shape[1]:
            raise ValueError(f"the trace of a square operator; this one is {self.shape[0]} x "
                             f"{self.shape[1]}")
        # this view's values (conjugated for H and conj()); a transpose keeps the diagonal
        w = self._canonical_values()
        return self.dtype.type(w.diagonal(axis1=1, axis2=2).sum().item())

    def todense(self):
        """The dense ``(M, N)`` matrix, in the array module of the values (MemoryError when
        it cannot fit)."""
        memory.check_fits(self.shape[0] * self.shape[1] * self.dtype.itemsize, self._xp,
                          f"the dense {self.shape[0]} x {self.shape[1]} matrix of {self!r}")
        return self._factor.todense()

    def dense_cached(self):
        """The dense matrix, formed once and kept (shared with this matrix's T/H views) when
        it takes at most :data:`kscupy.core.factor.DENSE_CACHE_BYTES`; formed anew otherwise.

        The ``dense`` backend (which ``auto`` picks on the GPU for small, nearly dense
        factors where cuBLAS on the dense matrix beats both KS algorithms) uses it, except
        for float32 at default precision, whose products read the transpose's
        (``K.T.dense_cached()``, the GEMM forms cuBLAS runs fastest there);
        :meth:`clear_cache` releases both. It refuses writes as :attr:`values` does, without
        being copied: it is the kept matrix itself.
        """
        return self._factor.dense()

    def clear_cache(self):
        """Release what is kept for products (dense and CSR matrices, values converted to
        another dtype, prepared GPU runs), for this matrix and its views."""
        self._factor.cache.clear()

    def tocsr(self):
        """The matrix in CSR format (``scipy.sparse`` or ``cupyx.scipy.sparse``). SciPy has
        no 16-bit sparse matrices: TypeError for float16 and bfloat16
        (``K.astype(numpy.float32)`` first)."""
        if arrays.is_half(self.dtype):
            raise TypeError(f"scipy.sparse and cupyx have no {self.dtype} CSR matrices: "
                            f"convert first, K.astype(numpy.float32).tocsr()")
        return reference.tocsr(self._factor.blocks, self._xp)

    def __repr__(self) -> str:
        f = self._factor
        where = "cpu" if self._xp is numpy else f"cuda:{f.tiles.device.id}"
        view = {(False, False): "", (True, False): ", transposed view",
                (False, True): ", conjugated view", (True, True): ", adjoint view"}
        a, b, c, d = self.pattern
        return (f"KSMatrix(pattern=({a}, {b}, {c}, {d}), shape={self.shape}, "
                f"dtype={self.dtype}, device={where}"
                f"{view[(f.transposed, f.conjugated)]})")

    # -- multiplication --------------------------------------------------------------------
    @staticmethod
    def backends() -> tuple:
        """Backend names :meth:`matmul` accepts (see :mod:`kscupy.engine.registry`)."""
        return registry.names()

    def _prepare_apply(self, X, layout, backend):
        return engine.prepare(self._factor, X, layout, backend)

    def _runs(self):
        return None if self._xp is numpy else engine.runs_of(self._factor)

    def _values_key(self):
        return ("matrix",) + self._factor.name

    # -- ecosystem protocols (see KSOperator): pickling, copies and moves, scalars, sums ------
    @property
    def view_flags(self) -> tuple[bool, bool]:
        """``(transposed, conjugated)``: how this matrix is a view of its stored values
        (``K.T`` is ``(True, False)``, ``K.H`` is ``(True, True)`` for complex values)."""
        return self._factor.transposed, self._factor.conjugated

    def stored_values(self):
        """Canonical values of the stored matrix this one is a view of: ``K`` equals
        ``KSMatrix(K.stored_values())`` viewed by :attr:`view_flags`. Not writable, like
        :attr:`values`."""
        return arrays.read_only(self._stored_values())

    def _stored_values(self):
        return self._factor.tiles.transpose(0, 2, 3, 1)

    @staticmethod
    def _rebuild(values, transposed, conjugated, structure=None, values_id=None) -> "KSMatrix":
        """A fresh matrix from canonical stored values, viewed as asked (no caches);
        ``values_id``: the name of the values it copies (see
        :class:`~kscupy.core.factor.FactorCache`), which its copy keeps."""
        factor = KSMatrix(values, structure).factor
        if values_id is not None:
            factor.cache.values_id = values_id
        return KSMatrix.of_factor(factor.view(transposed, conjugated))

    def __reduce__(self):
        # pickle and deepcopy carry the stored values, the view flags, the structure that
        # still holds and the values' name, not the caches
        return KSMatrix._rebuild, ((self._stored_values(),) + self.view_flags
                                   + (self.structure, self._factor.cache.values_id))

    def _map_arrays(self, convert):
        return KSMatrix._rebuild(convert(self._stored_values()), *self.view_flags,
                                 self.structure, self._factor.cache.values_id)

    def _scaled(self, alpha, divide):
        # the result dtype held explicitly: CuPy's arithmetic may widen bfloat16 to float32
        dtype = arrays.result_dtype(self.dtype, alpha)
        values = self._canonical_values().astype(dtype)
        return KSMatrix((values / alpha if divide else values * alpha).astype(dtype, copy=False))

    def _added(self, other, sign):
        if not isinstance(other, KSMatrix):
            return super()._added(other, sign)
        if self._xp is not other.xp:
            raise TypeError(f"cannot add a KSMatrix holding {self._xp.__name__} values and one "
                            f"holding {other.xp.__name__} values; move one of them first")
        if self.pattern != other.pattern:
            raise ValueError(f"cannot add KS matrices of different patterns "
                             f"{tuple(self.pattern)} and {tuple(other.pattern)}: the sum is "
                             f"not KS")
        dtype = arrays.result_dtype(self.dtype, other.dtype)
        values = self._canonical_values().astype(dtype)
        theirs = other._canonical_values()
        return KSMatrix((values + theirs if sign > 0 else values - theirs).astype(dtype,
                                                                                  copy=False))
