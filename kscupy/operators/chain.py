"""KSChain: a product ``K1 @ K2 @ ... @ KL`` of KS factors, applied right to left."""
from __future__ import annotations

import numpy

from . import _arrays, backends, costs, dispatch, planner, tuning
from .kernels import nvrtc
from .factor import Factor
from .operator import KSOperator
from .problem import batch_bucket
from .shuffle import inverse_permutation

__all__ = ["KSChain", "compose"]

#: Plans for batches of this size or more are shared (the plan no longer changes with B).
#: A fused pair's price (planner, costs.pair_seconds) is a whole number of waves of one
#: block per SM per 8 to 64 columns: at a few thousand columns one wave, cheaper than two
#: per-factor launches, at 25088 twelve, dearer; with plans shared from 1024 on, the
#: first batch planned decided for every larger one ((1, 128, 128, 3)·(6, 64, 256, 1)
#: batch-size-last ran its pair at 25088 columns, 0.48 ms against 0.23 per factor).
_PLAN_BUCKET_CAP = 65536


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

    On the GPU, ``backend="auto"`` follows a plan (:mod:`kscupy.planner`, see :meth:`plan`):
    runs of factors are applied by one kernel each (the batch is read and written once per
    run, every factor of the run applied in shared memory), adjacent small-block factors
    are merged, and the rest goes factor by factor; runs of small square factors (FFT,
    Hadamard, butterfly stages) go to a whole-vector kernel that applies several of them
    per round trip through shared memory. ``backend="fused"`` puts as many factors per
    launch of the shared-memory segment kernel as its memory allows; the other backends
    apply every factor with that backend.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> C = ks.KSChain([ks.KSMatrix.random((1, 4, 2, 2), seed=0),
    ...                 ks.KSMatrix.random((2, 2, 4, 1), seed=1)])
    >>> C.shape, C.patterns
    ((8, 8), (KSPattern(a=1, b=4, c=2, d=2), KSPattern(a=2, b=2, c=4, d=1)))
    """

    def __init__(self, factors, *, input_permutation=None, output_permutation=None):
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
        self._factors = tuple(flat)
        self._xp = xp
        self._in = self._check_permutation(input_permutation, flat[-1].shape[1], "input")
        self._out = self._check_permutation(output_permutation, flat[0].shape[0], "output")
        # (layout, dtype, batch bucket, backend) -> ((generations, tuning epoch), plan)
        self._plans = {}
        self._views = {}      # "T", "H" -> the transposed / adjoint chain (see T)
        self._runs = {}       # prepared runs (KSOperator.matmul); each looks its plan up

    def _check_permutation(self, perm, n, which):
        if perm is None:
            return None
        xp = _arrays.array_module(perm)
        if xp is not self._xp:
            raise TypeError(f"the {which} permutation is a {xp.__name__} array but the factors "
                            f"hold {self._xp.__name__} values")
        if perm.ndim != 1 or perm.shape[0] != n or perm.dtype.kind not in "iu":
            raise ValueError(f"the {which} permutation must be an integer array of shape ({n},), "
                             f"got {perm.dtype} of shape {perm.shape}")
        small = _arrays.on_host_if_small(perm)     # checked on the host when small
        module = _arrays.array_module(small)
        if not bool((module.sort(small) == module.arange(n)).all()):
            raise ValueError(f"the {which} permutation is not a permutation of range({n})")
        return perm

    @classmethod
    def _make(cls, factors, input_permutation, output_permutation):
        """A chain from already validated parts."""
        obj = cls.__new__(cls)
        obj._factors = tuple(factors)
        obj._xp = factors[0].xp
        obj._in, obj._out = input_permutation, output_permutation
        obj._plans, obj._views, obj._runs = {}, {}, {}
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
    def input_permutation(self):
        return self._in

    @property
    def output_permutation(self):
        return self._out

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
        return KSChain._make([op(f) for f in reversed(self._factors)], inv(self._out), inv(self._in))

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
        return KSChain._make([f.conj() for f in self._factors], self._in, self._out)

    # -- multiplication --------------------------------------------------------------------
    @staticmethod
    def backends() -> tuple:
        """Backend names :meth:`matmul` accepts: a single factor's, and ``"fused"``."""
        return backends.names() + (backends.FUSED,)

    def _prepared_runs(self):
        return self._runs

    def _prepare_apply(self, X, layout, backend):
        # On the GPU the steps of a plan (under auto or fused: the planner's; for a named
        # backend: factor by factor) are prepared once (see ChainPlan.prepare); the run is
        # valid while the factors' values are those it was prepared from (a plan may hold
        # merged factors, a step converted copies), and prepares anew when one moved.
        if self._xp is numpy:
            return lambda X: self._apply(X, layout, backend)
        B = X.shape[1] if layout == "bsl" else X.shape[0]

        def prepared(X):
            if backend == backends.AUTO and planner.direct_seconds(
                    self, layout, X.dtype, B) <= costs.DIRECT_MAX_SECONDS:
                # while a kernel of the plan compiles in the background (kernels/nvrtc.py),
                # the factors one by one on the direct kernel (planner.direct_plan; as dispatch does)
                try:
                    with nvrtc.unless_compiled():
                        return self.plan(layout, X.dtype, B, backend).prepare(X, layout)
                except nvrtc.StillCompiling:
                    return planner.direct_plan(self).prepare(X, layout)
            if backend in (backends.AUTO, backends.FUSED):
                return self.plan(layout, X.dtype, B, backend).prepare(X, layout)
            return planner.factor_by_factor(self, backend).prepare(X, layout)
        generations, run = self._generations(), prepared(X)

        def run_chain(X):
            nonlocal generations, run
            if self._generations() != generations:
                generations, run = self._generations(), prepared(X)
            return run(X)
        return run_chain

    def _generations(self) -> tuple:
        """The write counts of the factors' storages (see FactorCache.generation)."""
        return tuple(f.factor.cache.generation for f in self._factors)

    def _apply(self, X, layout, backend):
        # NumPy (on the GPU every product goes through _prepare_apply's prepared plans)
        xp = self._xp
        if backend == backends.FUSED and xp is numpy:
            raise TypeError("backend='fused' runs on the GPU and needs CuPy operands")
        feature_axis = 0 if layout == "bsl" else 1
        if self._in is not None:
            X = xp.take(X, self._in, axis=feature_axis)
        if xp is numpy and backend == backends.AUTO and layout == "bsf" and \
                tuning.cpu_chain_in_batch_order([K.factor for K in reversed(self._factors)],
                                                X.shape[0], X.dtype):
            X = numpy.asfortranarray(X)       # every factor then runs as bsl (dispatch)
        for factor in reversed(self._factors):
            X = dispatch.apply(factor.factor, X, layout, backend)
        if self._out is not None:
            X = xp.take(X, self._out, axis=feature_axis)
        return X

    def plan(self, layout="bsl", dtype=None, batch=1, backend="auto"):
        """The :class:`kscupy.planner.ChainPlan` that ``matmul`` follows on the GPU for a
        batch of ``batch`` in ``layout`` (cached per batch size bucket); ``print(plan.describe())``
        lists its launches. ``backend``: "auto" (cost model) or "fused" (fewest launches of
        the segment kernel)."""
        dtype = numpy.dtype(self.dtype if dtype is None else dtype)
        key = (layout, dtype, min(batch_bucket(batch), _PLAN_BUCKET_CAP), backend)
        # a plan may hold values derived from the factors' (merged factors): it is valid for
        # the generations of the factors' storage it was built from (see FactorCache); and
        # it is priced with auto's decisions of its tuning epoch (a close call timed since,
        # a tuning cache changed: kscupy.tuning.expire_prepared_runs)
        valid_for = (self._generations(), tuning.epoch)
        found = self._plans.get(key)
        if found is None or found[0] != valid_for:
            fused = backend == backends.FUSED       # the segment kernel, fewest launches
            found = self._plans[key] = (valid_for, planner.plan(
                self, layout, dtype, max(batch, 1), fuse="always" if fused else "auto",
                rows=not fused))
        return found[1]

    # -- ecosystem protocols (see KSOperator): pickling, copies and moves, scalars ---------
    def __reduce__(self):
        # pickle and deepcopy carry the factors and the permutations; plans and kept views
        # are rebuilt on first use
        return KSChain._make, (self._factors, self._in, self._out)

    def _map_arrays(self, convert):
        perm = lambda p: None if p is None else convert(p)  # noqa: E731
        return KSChain._make([f._map_arrays(convert) for f in self._factors], perm(self._in),
                             perm(self._out))

    def _scaled(self, alpha, divide):
        # the product is scaled once: through its leftmost factor
        first = self._factors[0]._scaled(alpha, divide)
        return KSChain._make([first, *self._factors[1:]], self._in, self._out)


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
                         "chain's input or the right chain's output permutation)")
    return KSChain(lf + rf, input_permutation=r_in, output_permutation=l_out)

