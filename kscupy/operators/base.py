"""What every KS operator shares: array interop, ``@``, the product's one entry.

:meth:`KSOperator.matmul` is the entry of every product: it checks the operand, decides
the result dtype (``numpy.result_type``, once, here), converts the operand, turns a vector
into a batch of one and answers an empty batch; the rest is the execution layer's
(:mod:`kscupy.engine`). Operators that keep prepared runs on the GPU (:meth:`_runs`) answer
a repeated product with one lookup and the launch.
"""
from __future__ import annotations

import numpy

from ..core import arrays, captured, foreign, memory
from ..core.argument_checks import LAYOUTS, check_layout
from ..dask import is_dask_array, matmul as dask_matmul
from ..engine.runs import for_vectors
from ..kernels.launcher import KernelRun

__all__ = ["KSOperator", "LAYOUTS"]

#: Identity columns :meth:`KSOperator.trace` applies an operator to at once.
TRACE_COLUMNS = 1024


def _an_operand(other) -> bool:
    """Whether ``@`` takes ``other`` to ``matmul`` (an array, or a kind of operand its checks
    refuse with a message of their own) rather than leave it to ``other``'s ``@``."""
    try:
        arrays.array_module(other)
        return True
    except TypeError:
        return arrays.is_refused_operand(other) or foreign.is_foreign(other)


def _sum_error(left, right) -> TypeError:
    # SciPy's matrix functions (expm_multiply, ...) shift their operand by arrays: they
    # take the LinearOperator, whose sums are lazy
    return TypeError(f"only two KSMatrix of the same pattern can be added, got "
                     f"{type(left).__name__} and {type(right).__name__} (a sum of chains is "
                     f"not a KS chain; for a lazy sum, or a SciPy function such as "
                     f"expm_multiply, use kscupy.aslinearoperator(op))")


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
        # NumPy and SciPy ask for this in np.asarray(op), and SciPy in sparse @ op
        raise TypeError(f"a {type(self).__name__} is not converted to an array implicitly "
                        f"(np.asarray(op), or a SciPy sparse matrix @ op, asks for that); "
                        f"multiply dense arrays (X.toarray() @ op for a sparse X) or call "
                        f"op.todense() for the dense matrix")

    def todense(self):
        """The dense ``(M, N)`` matrix: the operator applied to an identity matrix
        (MemoryError when the identity and the result cannot fit)."""
        M, N = self.shape
        memory.check_fits((N * N + M * N) * self.dtype.itemsize, self._xp,
                          f"the identity and the dense {M} x {N} matrix of {self!r}")
        return self.matmul(self._xp.eye(N, dtype=self.dtype))

    def trace(self):
        """The trace of a square operator (a NumPy scalar of its dtype), exact: the diagonal
        of the operator applied to the identity, ``TRACE_COLUMNS`` columns at a time (the
        cost of a dense matrix's worth of products, not its memory). ValueError when the
        operator is not square. (SciPy's ``expm_multiply`` asks for it.)"""
        M, N = self.shape
        if M != N:
            raise ValueError(f"the trace of a square operator; this one is {M} x {N}")
        xp, total = self._xp, self.dtype.type(0)
        for start in range(0, N, TRACE_COLUMNS):
            stop = min(N, start + TRACE_COLUMNS)
            E = xp.zeros((N, stop - start), dtype=self.dtype)
            E[xp.arange(start, stop), xp.arange(stop - start)] = 1
            total += self.matmul(E)[start:stop].diagonal().sum().item()
        return self.dtype.type(total)

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
            ``"auto"`` (the best available choice), ``"auto_tf32"`` (opt-in, CuPy only:
            the cost model's choice among ``"kernel_tf32"``, ``"bmm_tf32"`` and
            ``"dense_tf32"``, one TF32 product per term, about 1e-3 relative error,
            float32/complex64; where none applies, as while its kernel compiles in the
            background, a product at default precision) or a name from ``backends()``, the
            registry of :mod:`kscupy.engine.registry` (``"kernel"``: the fused CUDA
            kernel on the tensor cores at float32-grade accuracy, CuPy only;
            ``"kernel_tf32"``: the same with one TF32 product, opt-in only;
            ``"kernel_bsl"``: the tensor-core kernel in its batch-size-last order, a
            ``"bsf"`` operand transposed there and back (two extra passes over X and Y);
            ``"kernel_fma"``: the fused kernel on the FMA
            units; ``"kernel_skinny"``: the small-batch kernel; ``"direct"``: one thread per
            output, fast to compile, slow to run (what ``auto`` runs while its kernel
            compiles in the background); ``"bmm"``: one GEMM per group (on CuPy
            cuBLAS's strided-batched GEMM on the groups where they lie, with no permutation
            except two transposes in ``"bsf"`` with ``d > 1``); ``"block_dense"``: one
            GEMM per row of groups on the dense matrix's ``(b*d) x (c*d)`` diagonal block
            (``d`` times the arithmetic, no transposes; on CuPy); ``"bmm_tf32"``: ``"bmm"``
            with TF32 allowed, opt-in only; ``"einsum"``: one tensor contraction (the
            paper's Appendix A); ``"dense_tf32"``: ``"dense"`` with TF32 allowed, opt-in
            only; ``"dense"``: GEMM on the dense matrix, kept when small;
            ``"sparse"``: a CSR product, the CSR matrix kept). On the GPU a chain under
            ``"auto"`` follows its plan (several factors per launch where that pays, see
            :meth:`kscupy.KSChain.plan`); with a named backend it applies every factor with
            it.

        Returns
        -------
        Array of dtype ``numpy.result_type(op.dtype, X.dtype)`` (one of float32, float64,
        complex64, complex128), in the module of ``X``. When the dtypes differ, the operand
        is converted for the product and the operator's values are converted once and kept
        (``clear_cache()`` releases the copy).

        On the GPU, a product repeated with an operand of the same shape, strides, dtype and
        alignment reuses every decision of the first (``auto``'s choice, the kernel and its
        launch), until the values change, ``clear_cache()`` is called, ``kscupy.tune`` /
        ``kscupy.engine.clear_tuning_cache`` change the tuning decisions, ``auto`` times a
        close call whose verdict differs from its model's or ``kscupy.warmup`` expires what
        its pool prepared, or a kernel finishes compiling in the background (``auto`` runs
        the direct kernel until the one it chose is compiled, see
        :mod:`kscupy.engine.execute`); :mod:`kscupy.engine.runs` keeps this. (Pointing
        ``KSCUPY_CACHE_DIR`` elsewhere during a run does not reach shapes already seen.)
        """
        runs = self._runs()
        if runs is None or type(X) is not self._xp.ndarray:
            if foreign.is_foreign(X):           # a PyTorch, JAX, ... array: through DLPack
                if runs is not None:            # a repeated PyTorch product, launched as is
                    Y = foreign.tensor_product(X, runs, layout, backend)
                    if Y is not None:
                        return Y
                taken = foreign.take(X)
                # the producer's stream, where it has one (in its graph capture, the
                # product's memory is the graph's: kscupy.core.captured)
                with taken.stream, captured.memory(self._xp, torch_stream=True):
                    return taken.back(self.matmul(taken.native, layout=layout,
                                                  backend=backend))
            if is_dask_array(X):                # lazy, chunk by chunk, as op @ X does
                check_layout(layout)
                if backend != "auto":
                    raise ValueError(f"a dask operand is multiplied with backend='auto', got "
                                     f"{backend!r}")
                return dask_matmul(self, X, layout=layout)
            with captured.memory(self._xp):     # an operator that keeps no runs: its
                return self._prepare(X, layout, backend)(X)     # padding, parts, ...
        run = runs.get(X, layout, backend)
        if run is None:
            valid_for = runs.stamp()
            run = runs.keep(X, layout, backend, self._prepare(X, layout, backend), valid_for)
        if type(run) is KernelRun:          # one launch into a new result: nothing else held
            return run(X)
        with captured.memory(self._xp):     # copies and intermediates a graph replays into
            return run(X)

    def _prepare(self, X, layout, backend):
        """``run(X)`` for operands like ``X``: the operand checked, the result dtype decided,
        a vector made a batch of one, an empty batch answered, the rest prepared by
        :meth:`_prepare_apply`."""
        self._check_operand(X, layout, backend)
        dtype = arrays.result_dtype(self.dtype, X.dtype)
        M = self.shape[0]
        # (operands of the run's dtype are passed on as they are: astype costs host time)
        same = X.dtype == dtype
        if X.ndim == 1:   # a vector is a BSL batch of one
            inner = self._prepare_apply(X.astype(dtype, copy=False).reshape(-1, 1), "bsl",
                                        backend)
            run = for_vectors(inner, M)
            return run if same else (lambda X: run(X.astype(dtype)))
        B = X.shape[1] if layout == "bsl" else X.shape[0]
        if B == 0:
            shape = (M, 0) if layout == "bsl" else (0, M)
            return lambda X: self._xp.empty(shape, dtype=dtype)
        inner = self._prepare_apply(X.astype(dtype, copy=False), layout, backend)
        return inner if same else (lambda X: inner(X.astype(dtype)))

    def _prepare_apply(self, X, layout, backend):
        """``run(X)`` for 2-D operands like ``X`` (result dtype, ``B >= 1``); subclasses that
        can decide ahead override it, the others apply anew each time."""
        return lambda X: self._apply(X, layout, backend)

    def _runs(self):
        """The operator's :class:`~kscupy.engine.PreparedRuns` on the GPU, or None to keep
        none (products then prepare anew each time)."""
        return None

    def _values_key(self):
        """A name of what the operator applies as its values stand: equal for its views and
        copies that apply the same values the same way, new after a write; None where it
        keeps no such record. How a copy shipped elsewhere (:mod:`kscupy.dask`) is known
        to be current."""
        return None

    def _check_operand(self, X, layout, backend):
        """Known layout and backend, same array module, 1-D or 2-D, ``N`` features along the
        layout's feature axis. Raises ValueError or TypeError naming the problem."""
        name = type(self).__name__
        check_layout(layout)
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a string, one of {self.backends()}, got "
                            f"{type(backend).__name__} {backend!r}")
        if backend not in self.backends():
            raise ValueError(f"backend must be one of {self.backends()}, got {backend!r}")
        xp = arrays.operand_module(X)
        if xp is not self._xp:
            raise TypeError(f"cannot multiply a {name} holding {self._xp.__name__} values "
                            f"with a {xp.__name__} array; move one of them first")
        if X.ndim not in (1, 2):
            hint = " (a scalar scales the operator: op * alpha)" if X.ndim == 0 else ""
            raise ValueError(f"operand must be 1-D or 2-D, got shape {X.shape}{hint}")
        N = self.shape[1]
        n_in = X.shape[0] if (X.ndim == 1 or layout == "bsl") else X.shape[1]
        if n_in != N:
            expected = "(N,) or (N, B)" if layout == "bsl" else "(B, N) or (N,)"
            raise ValueError(f"shape mismatch: {name} of shape {self.shape} cannot be applied "
                             f"to an operand of shape {X.shape} in layout {layout!r} (expected "
                             f"{expected} with N={N})")

    def __matmul__(self, other):
        if type(other) is self._xp.ndarray:          # the common case, with one check
            return self.matmul(other, layout="bsl")
        if isinstance(other, KSOperator):            # a product of factors is a chain
            from .chain import compose
            return compose(self, other)
        if is_dask_array(other):                     # a lazy dask.array product
            return dask_matmul(self, other, layout="bsl")
        if not _an_operand(other):
            return NotImplemented
        return self.matmul(other, layout="bsl")

    def __rmatmul__(self, other):
        # other @ op: a row vector (M,) or a batch (B, M) on the left is op.T applied in BSF.
        if isinstance(other, KSOperator):
            from .chain import compose
            return compose(other, self)
        if is_dask_array(other):
            return dask_matmul(self.T, other, layout="bsf")
        if not _an_operand(other):
            return NotImplemented
        M = self.shape[0]
        if getattr(other, "ndim", 0) in (1, 2) and other.shape[-1] != M:
            raise ValueError(f"shape mismatch in Z @ op: op of shape {self.shape} takes Z of "
                             f"shape (B, {M}) or ({M},), got {other.shape}")
        return self.T.matmul(other, layout="bsf")

    # -- ecosystem protocols: copies, devices, scalars, duck-typed solvers -----------------
    # Each operator kind implements _map_arrays (the same operator with every array it holds
    # converted), _scaled and, where sums exist, _added; pickling is its __reduce__.
    def _map_arrays(self, convert):
        raise TypeError(f"a {type(self).__name__} cannot be copied or moved")

    def copy(self):
        """A deep copy: new value (and permutation) arrays on the same device, no caches."""
        return self._map_arrays(lambda x: x.copy())

    def get(self):
        """A copy of this operator with NumPy values (like ``cupy.ndarray.get``); on a NumPy
        operator, a copy."""
        return self._map_arrays(arrays.numpy_copy)

    def to_device(self, device):
        """A copy of this operator on ``device``: ``"cpu"`` (NumPy values, as :meth:`get`),
        ``"gpu"`` (CuPy values on the current device), a device id or a ``cupy.cuda.Device``
        (CuPy values on that device). RuntimeError when the GPU is not available."""
        return self._map_arrays(arrays.device_mover(device))

    def _scaled(self, alpha, divide):
        raise TypeError(f"a {type(self).__name__} cannot be scaled")

    def __mul__(self, alpha):
        """``op * alpha`` for a Python or NumPy scalar or a 0-d NumPy or CuPy array.

        The dtype is ``numpy.result_type(op.dtype, alpha)``, NumPy 2's rule for an array and
        a scalar: a Python scalar is "weak" (``2.5 * K`` keeps a float32 or bfloat16 ``K`` so,
        ``1j * K`` makes it complex64) while a NumPy scalar keeps its precision
        (``numpy.float64(2) * K`` is float64). Nothing is downcast; a result outside the
        supported dtypes raises TypeError. A matrix scales its values; a chain scales one
        factor (the leftmost), so the product is scaled once.
        """
        scalar = arrays.scalar_of(alpha)
        if scalar is None:
            return self._not_a_scale(alpha)
        return self._scaled(scalar, divide=False)

    __rmul__ = __mul__

    def __truediv__(self, alpha):
        """``op / alpha`` (see :meth:`__mul__`); ZeroDivisionError for ``alpha == 0``."""
        scalar = arrays.scalar_of(alpha)
        if scalar is None:
            return self._not_a_scale(alpha)
        if scalar == 0:
            raise ZeroDivisionError(f"division of a {type(self).__name__} by zero")
        return self._scaled(scalar, divide=True)

    def _not_a_scale(self, alpha):
        # bools and arrays get an answer of their own; anything else is left to Python
        name = type(self).__name__
        if isinstance(alpha, (bool, numpy.bool_)):
            raise TypeError(f"a {name} is scaled by a number, not by a bool")
        if getattr(alpha, "ndim", None) is not None and hasattr(alpha, "dtype"):
            what = (f"an array of shape {alpha.shape}; for the product use op @ X"
                    if alpha.ndim else f"a 0-d array of dtype {alpha.dtype}")
            raise TypeError(f"a {name} is scaled by a number, not by {what}")
        return NotImplemented

    def __neg__(self):
        return self._scaled(-1, divide=False)

    def _added(self, other, sign):
        raise _sum_error(self, other)

    def __add__(self, other):
        """``K1 + K2`` for two KSMatrix of the same pattern and array module: a KSMatrix of
        dtype ``numpy.result_type(K1.dtype, K2.dtype)``; ValueError for different patterns,
        TypeError for anything else."""
        return self._added(other, 1)

    def __sub__(self, other):
        return self._added(other, -1)

    def __radd__(self, other):
        # reached only when `other` is not a KS operator (else its __add__ answers)
        raise _sum_error(other, self)

    __rsub__ = __radd__

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
