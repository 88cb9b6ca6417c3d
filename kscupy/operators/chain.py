"""KSChain: a product ``K1 @ K2 @ ... @ KL`` of KS factors, applied right to left."""
from __future__ import annotations

import uuid

import numpy

from .. import engine
from ..core import arrays
from ..core.argument_checks import check_layout, positive_int
from ..core.factor import Factor, FactorChain
from ..core.shuffle import check_permutation, inverse_permutation
from ..engine import registry
from .base import KSOperator

__all__ = ["KSChain", "compose"]


class KSChain(KSOperator):
    """The product ``P_out @ K1 @ K2 @ ... @ KL @ P_in`` of KS factors (applied right to left).

    Parameters
    ----------
    factors : sequence of KSMatrix (or KSChain, flattened), all NumPy or all CuPy.
        Factor ``l`` must have as many columns as factor ``l + 1`` has rows.
    input_permutation, output_permutation : optional gather index arrays.
        ``P_in x = x[input_permutation]`` is applied first and
        ``P_out y = y[output_permutation]`` last (the DFT factories put the digit reversal of
        the FFT there). On the GPU a fused segment folds them into its reads and writes;
        elsewhere each is a gather pass.

    ``C @ X`` (``X`` of shape ``(N,)`` or ``(N, B)``), ``X @ C.T`` (``(B, N)``) and ``Z @ C``
    work as for :class:`KSMatrix`; so do ``T``, ``H`` (no value copies), ``todense()`` and
    :func:`kscupy.aslinearoperator`. ``C @ K`` and ``K @ C`` with KS matrices or chains give
    chains. The result dtype is ``numpy.result_type`` of the factors and the operand.

    On the GPU, ``backend="auto"`` follows a plan (:mod:`kscupy.engine.planner`, see
    :meth:`plan`): runs of small square factors (FFT, Hadamard, butterfly stages) go to a
    whole-vector kernel that applies several of them per round trip through shared memory,
    runs of small-block factors to a kernel that applies them in shared memory, two float32
    factors may share one tensor-core launch, adjacent small-block factors are merged, and
    the rest goes factor by factor; the permutations are folded into the reads and writes
    where a launch allows. The other backends apply every factor with that backend.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> C = ks.KSChain([ks.KSMatrix.random((1, 4, 2, 2), seed=0),
    ...                 ks.KSMatrix.random((2, 2, 4, 1), seed=1)])
    >>> C.shape, C.patterns
    ((8, 8), (KSPattern(a=1, b=4, c=2, d=2), KSPattern(a=2, b=2, c=4, d=1)))
    """

    def __init__(self, factors, *, input_permutation=None, output_permutation=None):
        if isinstance(factors, KSOperator) or not hasattr(factors, "__iter__"):
            raise TypeError(f"KSChain takes a sequence of factors (KSMatrix or KSChain), got "
                            f"a {type(factors).__name__}; for one factor: KSChain([K])")
        flat = []
        for f in factors:
            if isinstance(f, KSChain):
                if f._in is not None or f._out is not None:
                    raise ValueError("cannot nest a KSChain with permutations inside another chain")
                flat.extend(f.factors)
            # a single factor: any operator backed by one Factor (a KSMatrix; checked this
            # way so that chain.py need not import matrix.py)
            elif isinstance(f, KSOperator) and isinstance(getattr(f, "factor", None), Factor):
                flat.append(f)
            else:
                raise TypeError(f"KSChain factors must be KSMatrix or KSChain, got {type(f).__name__}")
        if not flat:
            raise ValueError("a KSChain needs at least one factor")
        xp = flat[0].xp
        for idx, f in enumerate(flat):
            if f.xp is not xp:
                raise TypeError(f"factor {idx} holds {f.xp.__name__} values but factor 0 holds "
                                f"{xp.__name__} values; move them to one device first")
        for idx in range(len(flat) - 1):
            left, right = flat[idx].pattern, flat[idx + 1].pattern
            if not left.chains_with(right):
                raise ValueError(
                    f"factors {idx} and {idx + 1} cannot be chained: factor {idx} (pattern "
                    f"{tuple(left)}, shape {left.shape}) has {left.shape[1]} columns but factor "
                    f"{idx + 1} (pattern {tuple(right)}, shape {right.shape}) has "
                    f"{right.shape[0]} rows")
        self._xp = xp
        self._set(flat, self._check_permutation(input_permutation, flat[-1].shape[1], "input"),
                  self._check_permutation(output_permutation, flat[0].shape[0], "output"))

    def _check_permutation(self, perm, n, which):
        """The chain's own copy of a permutation given to it (the caller's array may change
        later)."""
        if perm is None:
            return None
        check_permutation(perm, n, f"the {which} permutation")
        xp = arrays.array_module(perm)
        if xp is not self._xp:
            raise TypeError(f"the {which} permutation is a {xp.__name__} array but the factors "
                            f"hold {self._xp.__name__} values")
        with arrays.device_of(perm):
            return perm.copy()

    def _set(self, factors, input_permutation, output_permutation, permutations_id=None):
        self._factors = tuple(factors)
        self._xp = self._factors[0].xp
        self._in, self._out = input_permutation, output_permutation
        # the permutations never change: copies of the chain carry this name of them
        self._permutations_id = permutations_id or uuid.uuid4().hex
        self._target = FactorChain(tuple(f.factor for f in self._factors),
                                   input_permutation, output_permutation,
                                   self._permutations_id)
        self._views = {}      # "T", "H" -> the transposed / adjoint chain (see T)
        self._prepared = None if self._xp is numpy else engine.PreparedRuns(self._target)

    @classmethod
    def _make(cls, factors, input_permutation, output_permutation, permutations_id=None):
        """A chain from already validated parts (``permutations_id``: that of the chain
        whose permutations these are, for a copy)."""
        obj = cls.__new__(cls)
        obj._set(factors, input_permutation, output_permutation, permutations_id)
        return obj

    # -- attributes ----------------------------------------------------------------------
    @property
    def factors(self) -> tuple:
        return self._factors

    @property
    def patterns(self) -> tuple:
        return tuple(f.pattern for f in self._factors)

    @property
    def shape(self) -> tuple:
        return (self._factors[0].shape[0], self._factors[-1].shape[1])

    @property
    def dtype(self) -> numpy.dtype:
        return numpy.result_type(*[f.dtype for f in self._factors])

    @property
    def nnz(self) -> int:
        """Stored values over all factors (the chain's parameter count)."""
        return sum(f.nnz for f in self._factors)

    @property
    def nbytes(self) -> int:
        """Device (or host) memory held: factor values and permutations."""
        total = sum(f.factor.tiles.nbytes for f in self._factors)
        return total + sum(p.nbytes for p in (self._in, self._out) if p is not None)

    @property
    def factor_chain(self) -> FactorChain:
        """What the execution layers see: the factors' :class:`~kscupy.core.factor.Factor`
        and the permutations."""
        return self._target

    # The permutations are handed out unwritable (arrays.frozen): a write into one would
    # bypass every check and every plan made from it.
    @property
    def input_permutation(self):
        """Gather applied to the input first (``(N,)`` integers), or None; not writable."""
        return None if self._in is None else arrays.frozen(self._in)

    @property
    def output_permutation(self):
        """Gather applied to the output last (``(M,)`` integers), or None; not writable."""
        return None if self._out is None else arrays.frozen(self._out)

    def __len__(self) -> int:
        return len(self._factors)

    def __repr__(self) -> str:
        perms = "".join(f", {w} permutation" for w, p in (("input", self._in), ("output", self._out))
                        if p is not None)
        return (f"KSChain({len(self._factors)} factors, shape={self.shape}, dtype={self.dtype}, "
                f"patterns={[tuple(p) for p in self.patterns]}{perms})")

    # -- views -------------------------------------------------------------------------------
    def _reversed(self, op):
        # (P_out K1 ... KL P_in)^T = P_in^T KL^T ... K1^T P_out^T, and P^T gathers by P^{-1}.
        inv = lambda p: None if p is None else inverse_permutation(p, self._xp)  # noqa: E731
        return KSChain._make([op(f) for f in reversed(self._factors)], inv(self._out),
                             inv(self._in), self._permutations_id + ":reversed")

    # T and H are kept (and link back), so that `X @ C.T`, which applies C.T.T, finds the
    # chain whose plans are already cached instead of planning a fresh copy on every call.
    def _kept_view(self, name, op):
        if self._views.get(name) is None:
            view = self._reversed(op)
            view._views[name], self._views[name] = self, view
        return self._views[name]

    @property
    def T(self) -> "KSChain":
        return self._kept_view("T", lambda f: f.T)

    @property
    def H(self) -> "KSChain":
        return self._kept_view("H", lambda f: f.H)

    def conj(self) -> "KSChain":
        return KSChain._make([f.conj() for f in self._factors], self._in, self._out,
                             self._permutations_id)

    # -- multiplication --------------------------------------------------------------------
    @staticmethod
    def backends() -> tuple:
        """Backend names :meth:`matmul` accepts (see :mod:`kscupy.engine.registry`)."""
        return registry.names()

    def _runs(self):
        return self._prepared

    def _values_key(self):
        return ("chain",) + self._target.name

    def _prepare_apply(self, X, layout, backend):
        plans = None if self._prepared is None else self._prepared.plans
        return engine.prepare(self._target, X, layout, backend, plans)

    def plan(self, layout="bsl", dtype=None, batch=1):
        """The plan (:class:`kscupy.engine.steps.ChainPlan`) that ``matmul`` follows under
        ``auto`` on the current GPU for a batch of ``batch`` in ``layout`` (kept per batch
        size bucket); ``print(plan.describe())`` lists its launches."""
        check_layout(layout)
        dtype = arrays.check_dtype(self.dtype if dtype is None else dtype)
        batch = positive_int("batch", batch)
        plans = None if self._prepared is None else self._prepared.plans
        return engine.plan(self._target, layout, dtype, batch, plans)

    # -- ecosystem protocols (see KSOperator): pickling, copies and moves, scalars ---------
    def __reduce__(self):
        # pickle and deepcopy carry the factors and the permutations; plans and kept views
        # are rebuilt on first use
        return KSChain._make, (self._factors, self._in, self._out, self._permutations_id)

    def _map_arrays(self, convert):
        perm = lambda p: None if p is None else convert(p)  # noqa: E731
        return KSChain._make([f._map_arrays(convert) for f in self._factors], perm(self._in),
                             perm(self._out), self._permutations_id)

    def _scaled(self, alpha, divide):
        # the product is scaled once: through its leftmost factor
        first = self._factors[0]._scaled(alpha, divide)
        return KSChain._make([first, *self._factors[1:]], self._in, self._out,
                             self._permutations_id)


def compose(left, right) -> KSChain:
    """``left @ right`` for KS matrices and chains, as a chain."""
    def parts(op):
        if isinstance(op, KSChain):
            return list(op.factors), op._in, op._out
        if not isinstance(getattr(op, "factor", None), Factor):
            raise TypeError(f"a {type(op).__name__} does not compose with other KS operators "
                            f"into a chain; apply the operators one after the other")
        return [op], None, None

    lf, l_in, l_out = parts(left)
    rf, r_in, r_out = parts(right)
    if l_in is not None or r_out is not None:
        raise ValueError("cannot multiply chains with a permutation between them (the left "
                         "chain's input or the right chain's output permutation) into one "
                         "chain: apply them in turn, F @ (G @ X), or compose "
                         "ks.aslinearoperator(F) @ ks.aslinearoperator(G)")
    return KSChain(lf + rf, input_permutation=r_in, output_permutation=l_out)

