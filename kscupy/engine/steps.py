"""Chain plans and their steps: what a chain's product runs, one step per pass over the
batch.

A :class:`ChainPlan` is a list of steps, each reading the batch once and writing it once:

* :class:`~kscupy.kernels.ks_chain.FusedSegment`, :class:`~kscupy.kernels.ks_rows.RowSegment`
  and :class:`~kscupy.kernels.ks_pair.PairSegment` (the kernel families' multi-factor
  launches, made by :mod:`.planner`);
* :class:`FactorStep`: one factor through the single-factor path (:mod:`.single`: the
  tensor-core kernel, BMM, cuBLAS dense, ... as ``auto`` or the caller chose);
* :class:`ProductStep`: a run of factors applied as their product (:mod:`.algebra`);
* :class:`Gather`: a chain permutation that no step absorbed;
* :class:`Relayout`: a whole plan made for the other layout, between two tiled transposes;
* :class:`DirectStep`: one factor on the direct kernel, a permutation folded in (what
  ``auto`` runs while a kernel compiles: :func:`direct_plan`);
* :class:`InBatchOrder`: the batch copied to batch-contiguous storage (NumPy, see
  :func:`cpu_plan`).

Every step has ``prepare(X, layout) -> run(X)`` (the work that depends only on the operand's
shape, strides and dtype done once), ``__call__(X, layout)`` (once) and ``describe()``.
The plans here are built without pricing; :mod:`.planner` chooses among priced ones.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy

from ..core import arrays
from ..core.device import DeviceFacts
from ..core.factor import Factor
from ..core.problem import Problem
from ..core.shuffle import int32_indices
from ..kernels import ks_direct, nvrtc
from . import single
from .costs import gpu as gpu_costs

__all__ = ["ChainPlan", "FactorStep", "ProductStep", "Gather", "DirectStep", "Relayout",
           "InBatchOrder", "factor_by_factor", "direct_plan", "direct_seconds", "cpu_plan",
           "step_problem"]


def step_problem(pattern, transposed, batch, dtype, layout) -> Problem:
    """The single-factor problem of a step whose operand is a new C-contiguous array (the
    result of every GPU step but a factor on ``einsum`` or ``sparse``)."""
    return Problem(pattern=pattern, batch=batch, dtype=numpy.dtype(dtype), layout=layout,
                   batch_contiguous=(layout == "bsl" or batch == 1), transposed=transposed)


@dataclasses.dataclass(frozen=True, eq=False)
class Gather:
    """A permutation pass: ``X[perm]`` along the feature axis."""
    perm: object

    def __call__(self, X, layout):
        xp = arrays.array_module(X)
        return xp.take(X, self.perm, axis=0 if layout == "bsl" else 1)

    def prepare(self, X, layout):
        return lambda X: self(X, layout)

    @property
    def result_features(self) -> int:
        return self.perm.shape[0]

    def describe(self):
        return f"gather ({self.perm.shape[0]})"


@dataclasses.dataclass(frozen=True, eq=False)
class FactorStep:
    """One factor (a :class:`~kscupy.core.factor.Factor`) through the single-factor path
    with ``backend``."""
    factor: Factor
    backend: str

    def __call__(self, X, layout):
        return single.prepare(self.factor, X, layout, self.backend)(X)

    def prepare(self, X, layout):
        return single.prepare(self.factor, X, layout, self.backend)

    @property
    def result_features(self):
        # einsum and sparse call general routines whose results may be views
        return None if self.backend in ("einsum", "sparse") else self.factor.shape[0]

    def describe(self):
        return f"factor {tuple(self.factor.pattern)} ({self.backend})"


@dataclasses.dataclass(frozen=True, eq=False)
class ProductStep(FactorStep):
    """Several consecutive factors applied as their product
    (:func:`kscupy.engine.algebra.product`), formed once when the plan is made: what a run
    of factors whose product is small (a bottleneck such as ``96 -> 384 -> 96``) costs less
    as."""
    count: int = 2

    def describe(self):
        return (f"product of {self.count} factors: {tuple(self.factor.pattern)} "
                f"({self.backend})")


@dataclasses.dataclass(frozen=True, eq=False)
class DirectStep:
    """One factor on the direct kernel (``kernels_cu/ks_direct.cu``), with a chain
    permutation next to it folded into its reads (``x_rows``: int32 gather of the input
    features) or its writes (``y_rows``: int32 scatter of the output features)."""
    factor: Factor
    x_rows: object = None
    y_rows: object = None

    def __call__(self, X, layout):
        return self.prepare(X, layout)(X)

    def prepare(self, X, layout):
        return ks_direct.prepare(self.factor.in_dtype(X.dtype), X, layout,
                                 x_rows=self.x_rows, y_rows=self.y_rows)

    @property
    def result_features(self) -> int:
        return self.factor.shape[0]

    def describe(self):
        folded = [what for what, table in (("input gather", self.x_rows),
                                           ("output scatter", self.y_rows)) if table is not None]
        with_folded = f" with {' and '.join(folded)}" if folded else ""
        return f"factor {tuple(self.factor.pattern)} (direct{with_folded})"


@dataclasses.dataclass(frozen=True, eq=False)
class InBatchOrder:
    """The batch copied to batch-contiguous storage (a ``(B, N)`` batch in Fortran order):
    the NumPy algorithms then run it as batch-size-last (:func:`cpu_plan`)."""

    def __call__(self, X, layout):
        return numpy.asfortranarray(X)

    def prepare(self, X, layout):
        return lambda X: self(X, layout)

    def describe(self):
        return "copy to batch order"


#: Prepared runs a plan keeps (one per operand shape, strides, dtype, alignment, layout and
#: compiled kernels); beyond this many they are dropped and prepared again as used.
PLAN_RUNS = 16


@dataclasses.dataclass(frozen=True, eq=False)
class ChainPlan:
    """Steps applied in order; ``seconds`` is the model's estimate for the planned batch
    (nan for a plan that was not priced). On the GPU a plan keeps the runs it prepared
    (:meth:`prepare`): a plan is shared by the copies of a chain (the planner's table,
    :func:`kscupy.engine.planner.cached_plan`), so a fresh copy's first product finds its
    run prepared rather than preparing every step again."""
    steps: tuple
    seconds: float
    _runs: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def __call__(self, X, layout):
        for step in self.steps:
            X = step(X, layout)
        return X

    def prepare(self, X, layout):
        """``run(X)`` for operands shaped, strided, typed and aligned like ``X``: every step
        prepared once (a step's ``prepare(X, layout) -> run``) for the intermediate it
        receives. A GPU step whose run returns a new C-contiguous array says of how many
        features (``result_features``), and the next step is prepared for an uninitialised
        array of that shape; after any other step preparing runs the step on ``X``, to meet
        its result (a first product would otherwise run the plan twice). GPU runs are kept
        per operand signature and device, each stamped with the kernels compiled when it was
        prepared: one prepared before a compile finished is prepared again in its place (a
        run of the direct kernel gives way to the compiled one, as :mod:`kscupy.engine.runs`
        has it)."""
        if arrays.array_module(X) is numpy:
            return self._prepared(X, layout)
        key = (X.shape, X.strides, X.dtype, arrays.address(X) & 15, layout,
               arrays.device_id(X))
        compiled = nvrtc.compiles_finished
        found = self._runs.get(key)
        if found is not None and found[0] == compiled:
            return found[1]
        run = self._prepared(X, layout)
        if found is None and len(self._runs) >= PLAN_RUNS:
            self._runs.clear()
        self._runs[key] = (compiled, run)
        return run

    def _prepared(self, X, layout):
        runs = []
        for step in self.steps:
            run = step.prepare(X, layout)
            runs.append(run)
            if len(runs) < len(self.steps):
                like = _result_like(step, X, layout)
                X = like if like is not None else run(X)
        if len(runs) == 1:
            return runs[0]

        def run_all(X):
            for run in runs:
                X = run(X)
            return X
        return run_all

    def describe(self) -> str:
        return "\n".join(step.describe() for step in self.steps)

    @property
    def launches(self) -> int:
        return sum(getattr(step, "launches", 1) for step in self.steps)


def _result_like(step, X, layout):
    """An uninitialised CuPy array shaped, typed and aligned as ``step``'s result for
    operands like ``X`` (``result_features`` rows in bsl, columns in bsf, C order), or None
    where the step does not say (NumPy operands, a step whose result may be a view)."""
    features = getattr(step, "result_features", None)
    xp = arrays.array_module(X)
    if features is None or xp is numpy:
        return None
    B = X.shape[1] if layout == "bsl" else X.shape[0]
    return xp.empty((features, B) if layout == "bsl" else (B, features), dtype=X.dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class Relayout:
    """A plan made for the other layout (``layout``), between two tiled transposes
    (:mod:`kscupy.kernels.transpose`): a batch-size-last batch ``(N, B)`` runs a
    batch-size-first plan as ``(B, N)`` and comes back as ``(M, B)``, or the other way
    round. ``shape``: the chain's ``(M, N)``."""
    plan: ChainPlan
    layout: str
    shape: tuple

    def __call__(self, X, layout):
        return self.prepare(X, layout)(X)

    def prepare(self, X, layout):
        from ..kernels import transpose
        M = self.shape[0]
        B = X.shape[1] if layout == "bsl" else X.shape[0]
        result = (B, M) if self.layout == "bsf" else (M, B)      # the inner plan's result
        return transpose.around(X, lambda XT: self.plan.prepare(XT, self.layout), result)

    @property
    def result_features(self) -> int:
        return self.shape[0]

    def describe(self):
        inner = "\n".join("  " + line for line in self.plan.describe().splitlines())
        return f"transpose to {self.layout}\n{inner}\ntranspose back"

    @property
    def launches(self) -> int:
        return self.plan.launches + 2


def _gathers(perm):
    return [] if perm is None else [Gather(perm)]


def factor_by_factor(chain, backend: str) -> ChainPlan:
    """The chain (a :class:`~kscupy.core.factor.FactorChain`) applied one factor at a time
    with ``backend`` between its permutations: what a chain's product runs with a named
    backend. Not priced."""
    steps = (_gathers(chain.input_permutation)
             + [FactorStep(f, backend) for f in chain.applied]
             + _gathers(chain.output_permutation))
    return ChainPlan(tuple(steps), math.nan)


def cpu_plan(chain, backend: str, in_batch_order: bool) -> ChainPlan:
    """The chain on NumPy: :func:`factor_by_factor`, and with ``in_batch_order`` (under
    ``auto``, a batch-size-first batch that the CPU model finds cheaper in batch order,
    :func:`kscupy.engine.cpu_choice.chain_in_batch_order`) the batch copied to batch order
    after the input gather, so that every factor runs as batch-size-last."""
    plan = factor_by_factor(chain, backend)
    if not in_batch_order:
        return plan
    first = 1 if chain.input_permutation is not None else 0
    return ChainPlan(plan.steps[:first] + (InBatchOrder(),) + plan.steps[first:], math.nan)


def direct_plan(target) -> ChainPlan:
    """A factor (:class:`~kscupy.core.factor.Factor`) or a chain's factors
    (:class:`~kscupy.core.factor.FactorChain`) one by one on the direct kernel, a chain's
    permutations folded into the first and last (no gather pass, no CuPy kernel to
    compile): what ``auto`` runs while a kernel of its choice compiles. Not priced."""
    if isinstance(target, Factor):
        return ChainPlan((DirectStep(target),), math.nan)
    steps = [DirectStep(f) for f in target.applied]
    if target.input_permutation is not None:
        steps[0] = dataclasses.replace(steps[0],
                                       x_rows=int32_indices(target.input_permutation))
    if target.output_permutation is not None:
        steps[-1] = dataclasses.replace(
            steps[-1], y_rows=int32_indices(target.output_permutation, inverse=True))
    return ChainPlan(tuple(steps), math.nan)


def direct_seconds(factors, batch: int, dtype, layout: str, device: DeviceFacts) -> float:
    """The model's time for ``factors`` one by one on the direct kernel (priced once per
    shapes, batch, dtype, layout and device: every first product of an operator asks)."""
    return _direct_seconds(tuple((f.pattern, f.transposed) for f in factors), batch,
                           numpy.dtype(dtype), layout, device)


@functools.lru_cache(maxsize=256)
def _direct_seconds(shapes, batch, dtype, layout, device):
    return sum(gpu_costs.direct_seconds(step_problem(pattern, transposed, batch, dtype,
                                                     layout), device)
               for pattern, transposed in shapes)
