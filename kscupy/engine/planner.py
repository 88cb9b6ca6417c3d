"""How a KSChain is applied on the GPU: merged factors, fused segments, per-factor steps.

A plan is a list of steps, each reading the batch once and writing it once:

* :class:`~kscupy.kernels.ks_chain.FusedSegment` — several consecutive factors applied by
  one launch of ``kernels_cu/ks_chain.cu``: a tile of batch rows is loaded into shared
  memory, every factor of the segment is applied there, and the tile is stored. A chain
  permutation next to the segment is folded into its global reads (input) or writes
  (output).
* :class:`~kscupy.kernels.ks_rows.RowSegment` — the same for a run of small square factors
  on whole feature vectors (``kernels_cu/ks_rows.cu``): nesting factors (FFT, Hadamard and
  butterfly stages) are applied several at a time from registers, with one round trip
  through shared memory per pass instead of per factor.
* :class:`~kscupy.kernels.ks_pair.PairSegment` — two consecutive factors of any blocks by
  one launch of ``kernels_cu/ks_pair.cu`` on the tensor cores (float32): the intermediate of
  a tile of batch columns stays in shared memory, and every block reads both factors'
  weights from L2. Weighed under ``fuse="auto"`` (:func:`kscupy.costs.pair_seconds`,
  taken only by a margin, ``costs.PAIR_MARGIN``); a chain permutation next to it is a
  gather of its own.
* :class:`FactorStep` — one factor through :func:`kscupy.dispatch.apply` (the
  single-factor kernel, BMM or cuBLAS dense, as ``auto`` or the caller chose).
* :class:`ProductStep` — a run of factors applied as their product (:func:`product`, formed
  once when the plan is made): a chain through a wide middle (``96 -> 384 -> 96``) is
  cheaper as its ``96 x 96`` matrix. A dense product absorbs the chain's permutations.
* :class:`Gather` — a chain permutation that no segment absorbed.
* :class:`Relayout` — a whole plan made for the other layout, between two tiled transposes.

:func:`plan` chooses the steps. Adjacent factors whose product is again KS with small
blocks (two radix-2 FFT stages make one radix-4 stage) are first merged, when that does not
add arithmetic (``merge=True``). Then a dynamic program over the factors, in the order they
are applied, picks the cheapest split into fused segments and per-factor steps under the
cost model (:mod:`kscupy.costs`; a per-factor step, and a product, is priced as the backend
``auto`` picks for it, :func:`kscupy.tuning.seconds`), and fuses only factors with small
blocks (SMALL_BLOCKS_ONLY below); products up to :data:`PRODUCT_MAX_ENTRIES` are weighed
under ``fuse="auto"`` only. ``fuse="always"`` instead uses as few launches as the shared
memory allows, whatever the blocks. :class:`~kscupy.KSChain` caches plans per layout, dtype
and batch bucket.
"""
from __future__ import annotations

import dataclasses
import math

import numpy

from . import _arrays, costs, dispatch, tuning
from .factor import Factor
from .kernels import ks_direct
from .kernels.ks_chain import make_segment
from .kernels.ks_pair import make_pair_segment
from .kernels.ks_rows import make_row_segment, stage_of, STORED
from .pattern import KSPattern, super_pattern
from .problem import Problem
from .shuffle import int32_indices, inverse_permutation

__all__ = ["FactorStep", "ProductStep", "Gather", "DirectStep", "Relayout", "ChainPlan",
           "direct_plan", "plan", "merge", "merge_all", "product", "product_pattern",
           "MERGE_MAX_BLOCK", "PRODUCT_MAX_ENTRIES"]

#: Largest block (b·c) a merge may produce: merging is for small FFT-like blocks.
MERGE_MAX_BLOCK = 16

#: Largest product (entries of its super-group blocks) a plan may form of a run of factors:
#: the product is formed once per plan (see :func:`product`), in double precision.
PRODUCT_MAX_ENTRIES = 1 << 22

# SMALL_BLOCKS_ONLY: under fuse="auto" a segment is fused only when every factor's blocks are
# small enough for a work item to hold whole (16-byte loads, at most 256 bytes: FFT, Hadamard,
# butterfly stages). Larger blocks stream their weights from L2 inside the reduction loop; on
# an H200 that ran 8-30x slower than per-factor application for the paper's two-factor
# chains (benchmarks/results/fft_h200.json), so only fuse="always" (backend="fused") uses it.


# -- merging ------------------------------------------------------------------------------------
def _restricted_blocks(blocks, pattern: KSPattern, AS: int, DS: int):
    """A factor of ``pattern`` with ``(a, d, b, c)`` ``blocks`` as ``I_AS ⊗ D ⊗ I_DS``: the
    dense blocks D, shape ``(AS, DS, M/(AS DS), N/(AS DS))``, in the array module of
    ``blocks``."""
    xp = _arrays.array_module(blocks)
    a, b, c, d = pattern
    af, df = a // AS, d // DS
    blocks = blocks.reshape(AS, af, df, DS, b, c)      # group (i'·af + i_s, j_s·DS + j')
    # D[i', j'][i_s·b·df + k·df + j_s, i_s2·c·df + l·df + j_s2] = block[k, l] on i_s = i_s2,
    # j_s = j_s2
    D = xp.einsum("xsyzkl,st,yu->xzskytlu", blocks, xp.eye(af, dtype=blocks.dtype),
                  xp.eye(df, dtype=blocks.dtype))
    return D.reshape(AS, DS, af * b * df, af * c * df)


def merge(left: Factor, right: Factor):
    """``left @ right`` as one Factor when the product is KS with small blocks, else None.

    The product of two KS factors is supported on ``I_AS ⊗ 1 ⊗ I_DS`` (AS, DS the gcds of
    their a's and d's); it is merged only when its blocks have at most ``MERGE_MAX_BLOCK``
    entries and it has no more non-zeros than the two factors together (so the merged
    factor does no more arithmetic). Computed in double precision, returned in the dtype of
    the factors.
    """
    pattern = product_pattern([left, right])
    if (pattern.b * pattern.c > MERGE_MAX_BLOCK
            or pattern.nnz > left.pattern.nnz + right.pattern.nnz):
        return None
    return product([left, right])


def product_pattern(factors) -> KSPattern:
    """The KS pattern of the product of ``factors`` (written left to right): their
    super-groups' pattern ``(AS, M/(AS DS), N/(AS DS), DS)``."""
    AS, DS = super_pattern([f.pattern for f in factors])
    M, N = factors[0].shape[0], factors[-1].shape[1]
    return KSPattern(AS, M // (AS * DS), N // (AS * DS), DS)


def product(factors) -> Factor:
    """The product of ``factors`` (written left to right) as one Factor of
    :func:`product_pattern`, computed in double precision and returned in their common
    dtype; each factor is restricted to the super-groups, so the work is that of the dense
    super-group blocks (see :data:`PRODUCT_MAX_ENTRIES`)."""
    AS, DS = super_pattern([f.pattern for f in factors])
    dtype = numpy.result_type(*[f.dtype for f in factors])
    wide = numpy.complex128 if dtype.kind == "c" else numpy.float64
    elements = sum(f.tiles.size for f in factors)

    def restricted(factor):      # small factors are multiplied on the host
        blocks = factor.oriented(_arrays.on_host_if_small(factor.tiles, elements))
        return _restricted_blocks(blocks.astype(wide), factor.pattern, AS, DS)
    P = restricted(factors[0])
    for factor in factors[1:]:
        P = P @ restricted(factor)
    module = _arrays.array_module(P)
    P = module.ascontiguousarray(P.astype(dtype))
    return Factor.of_blocks(factors[0].xp.asarray(P), product_pattern(factors))


def _product_fits(factors) -> bool:
    """Whether :func:`plan` may form the product of ``factors``: its blocks and every
    factor restricted to the super-groups have at most :data:`PRODUCT_MAX_ENTRIES`
    entries."""
    AS, DS = super_pattern([f.pattern for f in factors])
    sizes = [f.shape[0] * f.shape[1] for f in factors] + [factors[0].shape[0]
                                                           * factors[-1].shape[1]]
    return max(sizes) // (AS * DS) <= PRODUCT_MAX_ENTRIES


def merge_all(factors):
    """Greedily merge adjacent factors (left to right, see :func:`merge`); a new list."""
    out = list(factors)
    i = 0
    while i < len(out) - 1:
        merged = merge(out[i], out[i + 1])
        if merged is None:
            i += 1
        else:
            out[i:i + 2] = [merged]
    return out


# -- steps --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class Gather:
    """A permutation pass: ``X[perm]`` along the feature axis."""
    perm: object

    def __call__(self, X, layout):
        xp = _arrays.array_module(X)
        return xp.take(X, self.perm, axis=0 if layout == "bsl" else 1)

    def prepare(self, X, layout):
        return lambda X: self(X, layout)

    def describe(self):
        return f"gather ({self.perm.shape[0]})"


@dataclasses.dataclass(frozen=True, eq=False)
class FactorStep:
    """One factor (a :class:`~kscupy.factor.Factor`) through :func:`kscupy.dispatch.apply`."""
    factor: Factor
    backend: str

    def __call__(self, X, layout):
        return dispatch.apply(self.factor, X, layout, self.backend)

    def prepare(self, X, layout):
        return dispatch.prepare(self.factor, X, layout, self.backend)

    def describe(self):
        return f"factor {tuple(self.factor.pattern)} ({self.backend})"


@dataclasses.dataclass(frozen=True, eq=False)
class ChainPlan:
    """Steps applied in order; ``seconds`` is the model's estimate for the planned batch."""
    steps: tuple
    seconds: float

    def __call__(self, X, layout):
        for step in self.steps:
            X = step(X, layout)
        return X

    def prepare(self, X, layout):
        """``run(X)`` for operands shaped, strided, typed and aligned like ``X``: every step
        prepared once (a step's ``prepare(X, layout) -> run``) for the intermediate it
        receives. Preparing applies the plan to ``X`` once, to meet those intermediates
        (results are new C-contiguous arrays, so later calls' intermediates are alike)."""
        runs = []
        for step in self.steps:
            run = step.prepare(X, layout)
            runs.append(run)
            X = run(X)

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


@dataclasses.dataclass(frozen=True, eq=False)
class Relayout:
    """A plan made for the other layout (``layout``), between two tiled transposes
    (:mod:`kscupy.kernels.transpose`): a batch-size-last batch ``(N, B)`` runs a
    batch-size-first plan as ``(B, N)`` and comes back as ``(M, B)``, or the other way
    round. Planned where the model finds the other layout cheaper by more than the two
    passes (whole-vector segments of long vectors read runs shorter than a sector in
    batch-size-last). ``shape``: the chain's ``(M, N)``."""
    plan: ChainPlan
    layout: str
    shape: tuple

    def __call__(self, X, layout):
        return self.prepare(X, layout)(X)

    def prepare(self, X, layout):
        from .kernels import transpose
        M = self.shape[0]
        B = X.shape[1] if layout == "bsl" else X.shape[0]
        result = (B, M) if self.layout == "bsf" else (M, B)      # the inner plan's result
        return transpose.around(X, lambda XT: self.plan.prepare(XT, self.layout), result)

    def describe(self):
        inner = "\n".join("  " + line for line in self.plan.describe().splitlines())
        return f"transpose to {self.layout}\n{inner}\ntranspose back"

    @property
    def launches(self) -> int:
        return self.plan.launches + 2


def factor_by_factor(chain, backend: str) -> ChainPlan:
    """The chain applied one factor at a time with ``backend`` (a registry name) between its
    permutations: what ``matmul(backend=name)`` runs on the GPU. Not priced (``seconds`` is
    nan)."""
    gathers = lambda p: [] if p is None else [Gather(p)]  # noqa: E731
    steps = (gathers(chain.input_permutation)
             + [FactorStep(K.factor, backend) for K in reversed(chain.factors)]
             + gathers(chain.output_permutation))
    return ChainPlan(tuple(steps), math.nan)


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

    def describe(self):
        folded = [what for what, table in (("input gather", self.x_rows),
                                           ("output scatter", self.y_rows)) if table is not None]
        with_folded = f" with {' and '.join(folded)}" if folded else ""
        return f"factor {tuple(self.factor.pattern)} (direct{with_folded})"


def direct_plan(chain) -> ChainPlan:
    """The chain's factors one by one on the direct kernel, its permutations folded into the
    first and last (no gather pass, no CuPy kernel to compile): what ``auto`` runs while a
    kernel of its plan compiles (see :func:`kscupy.dispatch.prepare`). Not priced."""
    factors = [K.factor for K in reversed(chain.factors)]
    steps = [DirectStep(f) for f in factors]
    if chain.input_permutation is not None:
        steps[0] = dataclasses.replace(steps[0], x_rows=int32_indices(chain.input_permutation))
    if chain.output_permutation is not None:
        steps[-1] = dataclasses.replace(
            steps[-1], y_rows=int32_indices(chain.output_permutation, inverse=True))
    return ChainPlan(tuple(steps), math.nan)


def direct_seconds(chain, layout: str, dtype, batch: int) -> float:
    """The model's time for the chain's factors one by one on the direct kernel (what
    ``auto`` runs while a kernel of its plan compiles; see :func:`kscupy.dispatch.prepare`)."""
    rates = costs.device_rates()
    return sum(costs.direct_seconds(_factor_problem(K.factor, batch, dtype, layout), rates)
               for K in chain.factors)


@dataclasses.dataclass(frozen=True, eq=False)
class ProductStep(FactorStep):
    """Several consecutive factors applied as their product (:func:`product`), formed once
    when the plan is made: what a run of factors whose product is small (a bottleneck such
    as ``96 -> 384 -> 96``) costs less as."""
    count: int = 2

    def describe(self):
        return (f"product of {self.count} factors: {tuple(self.factor.pattern)} "
                f"({self.backend})")


@dataclasses.dataclass(frozen=True, eq=False)
class _PlannedProduct:
    """A :class:`ProductStep` the dynamic program chose, formed only then (``formed``).
    ``factors`` in application order; ``src``/``out_perm``: chain permutations folded into a
    dense product's columns / rows."""
    factors: tuple
    backend: str
    src: object = None
    out_perm: object = None

    def formed(self) -> ProductStep:
        factor = product(self.factors[::-1])          # product() takes them left to right
        if self.src is not None or self.out_perm is not None:
            # dense (1, 1, M, N): y = (P x[src])[out] = P[out][:, inverse(src)] x
            xp = factor.xp
            P = factor.tiles[0, 0]
            if self.out_perm is not None:
                P = P[xp.asarray(self.out_perm)]
            if self.src is not None:
                P = P[:, inverse_permutation(xp.asarray(self.src), xp)]
            factor = Factor.of_blocks(xp.ascontiguousarray(P)[None, None], factor.pattern)
        return ProductStep(factor, self.backend, count=len(self.factors))


def _product_candidate(factors, src, out_perm, with_gathers, batch, dtype, layout, rates,
                       backend):
    """``(steps, seconds)`` of applying ``factors`` (application order) as their product; a
    dense product absorbs the chain permutations pending at its ends (``src``, ``out_perm``;
    None where none is), any other product gathers them (``with_gathers``)."""
    pattern = product_pattern(factors[::-1])
    seconds = tuning.seconds(_problem(pattern, False, batch, dtype, layout), backend, rates)
    if pattern.a == pattern.d == 1:
        return (_PlannedProduct(tuple(factors), backend, src, out_perm),), seconds
    return with_gathers(_PlannedProduct(tuple(factors), backend), seconds,
                        src is not None, out_perm is not None)


# -- planning ------------------------------------------------------------------------------------
def _problem(pattern, transposed, batch, dtype, layout):
    """The single-factor problem of a step whose operand is a new C-contiguous array."""
    return Problem(pattern=pattern, batch=batch, dtype=numpy.dtype(dtype), layout=layout,
                   batch_contiguous=(layout == "bsl" or batch == 1), transposed=transposed)


def _factor_problem(factor, batch, dtype, layout):
    return _problem(factor.pattern, factor.transposed, batch, dtype, layout)


def _factor_seconds(factor, batch, dtype, layout, rates, backend):
    return tuning.seconds(_factor_problem(factor, batch, dtype, layout), backend, rates)


def plan(chain, layout: str, dtype, batch: int, *, fuse: str = "auto", merge: bool = True,
         factor_backend: str = "auto", rates=None, rows: bool = True) -> ChainPlan:
    """Plan ``chain.matmul(X, layout=layout)`` for a batch of ``batch`` rows of ``dtype``.

    ``fuse``: ``"auto"`` (cost model), ``"always"`` (fewest launches) or ``"never"``
    (per-factor steps with ``factor_backend``, a backend with a cost model or ``"auto"``).
    ``merge``: merge adjacent small-block factors first. ``rows``: runs of small square
    factors may go to the whole-vector kernel (:class:`RowSegment`) as well as to the
    segment kernel (:class:`FusedSegment`); the cost model chooses. Under ``fuse="auto"``
    (with ``rows``) the plan for the other layout between two transposes
    (:class:`Relayout`) is weighed as well, and taken when the model finds it faster by
    ``costs.RELAYOUT_MARGIN``.
    """
    if fuse not in ("auto", "always", "never"):
        raise ValueError(f'fuse must be "auto", "always" or "never", got {fuse!r}')
    if rates is None:
        rates = costs.device_rates()
    dtype = numpy.dtype(dtype)
    factors = [K.factor.in_dtype(dtype) for K in reversed(chain.factors)]   # application order
    options = [factors]
    if merge and fuse != "never":
        # merged factors have stored blocks: where ks_rows would compute DFT or Hadamard
        # stages instead (see kernels/ks_rows.stage_of), the unmerged chain is planned too
        options = [merge_all(factors[::-1])[::-1]]      # merge() takes (left, right)
        if rows and any(stage_of(f)[0] != STORED for f in factors):
            options.append(factors)
    def best_in(layout):
        return min((_plan_factors(chain, f, layout, dtype, batch, fuse, factor_backend, rates,
                                  rows) for f in options), key=lambda p: p.seconds)
    best = best_in(layout)
    if fuse == "auto" and rows and batch > 1:
        other = "bsf" if layout == "bsl" else "bsl"
        there = best_in(other)
        M, N = chain.shape
        itemsize = dtype.itemsize
        seconds = (there.seconds + costs.transpose_seconds(N, batch, itemsize, rates)
                   + costs.transpose_seconds(M, batch, itemsize, rates))
        if seconds < costs.RELAYOUT_MARGIN * best.seconds:
            best = ChainPlan((Relayout(there, other, (M, N)),), seconds)
    return best


def _plan_factors(chain, factors, layout, dtype, batch, fuse, factor_backend, rates, rows):
    """:func:`plan`'s dynamic program over ``factors`` (application order)."""
    src, out_perm = chain.input_permutation, chain.output_permutation
    # y = z[out]  <=>  y[inv[p]] = z[p]: the segment writes element p to column inv[p]
    dst = None if out_perm is None else inverse_permutation(out_perm, chain.xp)
    L = len(factors)

    def with_gathers(step, seconds, first, last):
        """``(steps, seconds)``: ``step`` with a gather before it for a pending input
        permutation and after it for the output permutation, and their price."""
        steps = (step,)
        if first and src is not None:
            seconds += costs.gather_seconds(chain.shape[1], batch, dtype, rates)
            steps = (Gather(src),) + steps
        if last and dst is not None:
            seconds += costs.gather_seconds(chain.shape[0], batch, dtype, rates)
            steps = steps + (Gather(out_perm),)
        return steps, seconds

    # best[i]: (seconds, steps) applying factors[:i]; the input permutation is pending at 0.
    INF = (math.inf, ())
    best = [INF] * (L + 1)
    best[0] = (0.0, ())
    for i in range(L):
        if best[i] is INF:
            continue
        base_s, base_steps = best[i]
        first = i == 0
        steps, s = with_gathers(
            FactorStep(factors[i], factor_backend),
            _factor_seconds(factors[i], batch, dtype, layout, rates, factor_backend),
            first, i + 1 == L)
        if fuse == "always":
            s = len(steps) + s * 1e-9             # count launches, break ties by the model
        if base_s + s < best[i + 1][0]:
            best[i + 1] = (base_s + s, base_steps + steps)
        if fuse == "never":
            continue
        rows_fit, segments_fit = rows, True
        for j in range(i + 1, L + 1):
            last = j == L
            folds = dict(src=src if first else None, dst=dst if last else None)
            candidates = []
            if fuse == "auto" and j - i > 1 and _product_fits(factors[i:j]):
                candidates.append(_product_candidate(
                    factors[i:j], folds["src"], out_perm if last else None, with_gathers,
                    batch, dtype, layout, rates, factor_backend))
            if rows_fit:
                row_segment = make_row_segment(factors[i:j], dtype, layout, batch, **folds)
                rows_fit = row_segment is not None     # longer runs hold the same factors
                if rows_fit:
                    candidates.append(((row_segment,), costs.rows_seconds(
                        row_segment, batch, dtype, rates, layout)))
            if fuse == "auto" and j - i == 2:
                pair = make_pair_segment(factors[i:j], dtype, layout)
                if pair is not None:           # priced with a margin (the plan's seconds too)
                    candidates.append(with_gathers(
                        pair, costs.pair_seconds(pair, batch, rates) / costs.PAIR_MARGIN,
                        first, last))
            lone = j - i == 1 and folds["src"] is None and folds["dst"] is None
            if segments_fit and not lone:        # a lone factor: the single-factor path
                seg = make_segment(factors[i:j], dtype, layout, batch, **folds)
                segments_fit = seg is not None   # longer segments only need more memory
                if seg is not None and (fuse == "always" or all(vec for _, vec in seg.reads)):
                    # under auto, large blocks are never fused: see SMALL_BLOCKS_ONLY
                    candidates.append(((seg,), costs.segment_seconds(seg, batch, dtype,
                                                                     rates)))
            if not (rows_fit or segments_fit) and fuse != "auto":
                break                            # (a longer run's product may be smaller)
            for new_steps, s in candidates:
                if fuse == "always":
                    s = 1.0 + s * 1e-9            # count launches, break ties by the model
                if base_s + s < best[j][0]:
                    best[j] = (base_s + s, base_steps + new_steps)
    seconds, steps = best[L]
    return ChainPlan(tuple(step.formed() if isinstance(step, _PlannedProduct) else step
                           for step in steps), seconds)
