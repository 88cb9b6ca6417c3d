"""How a KSChain runs on the GPU under ``auto``: the cheapest plan the cost model finds.

:func:`plan` first merges adjacent factors whose product is again KS with small blocks
(two radix-2 FFT stages make one radix-4 stage; :func:`~.algebra.merge_all`), where that
adds no arithmetic. Then a dynamic program over the factors, in the order they are applied,
picks the cheapest split of the chain into steps (:mod:`.steps`) under the cost model
(:mod:`.costs.gpu`): runs of small square factors on whole vectors
(:class:`~kscupy.kernels.ks_rows.RowSegment`), runs of small-block factors in shared
memory (:class:`~kscupy.kernels.ks_chain.FusedSegment`), two float32 factors on the
tensor cores (:class:`~kscupy.kernels.ks_pair.PairSegment`), a run applied as its product
(:class:`~.steps.ProductStep`) and per-factor steps, each priced as the backend ``auto``
picks for it (:func:`kscupy.engine.decide.seconds`). Permutations next to a segment are
folded into its reads and writes; the others are gathers. The plan for the other layout,
between two transposes (:class:`~.steps.Relayout`), is weighed too.

Segments of the shared-memory kernel are fused under ``fuse="auto"`` only when every
factor's blocks are small enough for a work item to hold whole (16-byte loads, at most 256
bytes: FFT, Hadamard, butterfly stages): larger blocks stream their weights from L2 inside
the reduction loop, many times slower than applying the factors one by one.
``fuse="always"`` (fewest launches, whatever the blocks) and ``fuse="never"`` exist for
the kernels' tests and probes.

:func:`cached_plan` keeps plans per layout, dtype and batch bucket, valid while the
decisions they were priced with and the factors' values stand (a plan may hold merged
factors), in the chain and in a table shared by the process, keyed by the names of the
values and permutations (:class:`~kscupy.core.factor.FactorCache`): a copy of a chain
(unpickled on a dask worker, deep-copied, moved) finds the plan of the chain it copies.
"""
from __future__ import annotations

import collections
import math
import threading

import numpy

from ..core import device as devices
from ..core.device import DeviceFacts
from ..core.factor import Factor, FactorChain
from ..core.problem import batch_bucket
from ..core.shuffle import inverse_permutation
from ..kernels.ks_chain import make_segment
from ..kernels.ks_pair import make_pair_segment
from ..kernels.ks_rows import make_row_segment, stage_of, STORED
from . import decide
from .algebra import merge_all, product, product_fits, product_pattern
from .costs import gpu as gpu_costs
from .steps import ChainPlan, FactorStep, Gather, ProductStep, Relayout, step_problem

__all__ = ["plan", "cached_plan", "RELAYOUT_MARGIN", "PAIR_MARGIN", "PLAN_BUCKET_CAP"]

#: A chain is planned in the other layout between two transposes only when the model finds
#: that faster by this factor: the model's error on a whole per-factor chain is of this
#: order, and the plans it wins by more (whole-vector segments of long vectors in
#: batch-size-last: 2x and more) do not depend on it.
RELAYOUT_MARGIN = 0.75
#: The planner takes a fused pair where its price is below this share of the alternatives':
#: the per-factor model overprices short batches, and without the margin close calls went
#: to pairs slower than the per-factor steps.
PAIR_MARGIN = 0.85
#: Plans for batches of this size or more are shared (the plan no longer changes with B).
#: Below it every power-of-two bucket is planned apart: a fused pair's price is a whole
#: number of waves of one block per SM, cheaper than two launches at a few thousand
#: columns and dearer at tens of thousands.
PLAN_BUCKET_CAP = 65536


#: Plans the process keeps for copies of chains (:func:`cached_plan`), the least recently
#: used dropped first. A kept plan holds the values of the chain it was made for (its
#: steps hold the factors, even after the chain's values were replaced), so the table is
#: small in count and in the bytes of those values (counting the factors' stored values,
#: not merged or converted copies; a chain larger than that is not kept).
SHARED_PLANS = 32
SHARED_PLAN_BYTES = 256 * 2**20
_SHARED = collections.OrderedDict()     # name -> (decide.epoch, plan, bytes of values)
_SHARED_LOCK = threading.Lock()


def cached_plan(chain: FactorChain, layout: str, dtype, batch: int, plans: dict,
                fuse: str = "auto") -> ChainPlan:
    """:func:`plan` for the current GPU, kept in ``plans`` (the chain's, see
    :class:`kscupy.engine.runs.PreparedRuns`) per layout, dtype, batch bucket and ``fuse``,
    and made anew when the decisions or the factors' values it was made with changed. A
    plan made for a chain of the same values and permutations (a copy of this one) under
    the same decisions on the same device is taken from the process's table instead of
    made again."""
    dtype = numpy.dtype(dtype)
    chain = chain.pinned()       # a kept plan holds the values of this moment, never later ones
    key = (layout, dtype, min(batch_bucket(batch), PLAN_BUCKET_CAP), fuse)
    valid_for = (decide.epoch, tuple(f.cache.generation for f in chain.factors))
    found = plans.get(key)
    if found is None or found[0] != valid_for:
        found = plans[key] = (valid_for, _shared_plan(chain, key, batch))
    return found[1]


def _shared_plan(chain: FactorChain, key: tuple, batch: int) -> ChainPlan:
    """The plan of ``chain`` for ``key`` from the process's table, made and kept there
    when it is not (or was made under other decisions)."""
    layout, dtype, _, fuse = key
    nbytes = sum(f.tiles.nbytes for f in chain.factors)
    permuted = chain.input_permutation is not None or chain.output_permutation is not None
    if nbytes > SHARED_PLAN_BYTES or (permuted and not chain.permutations_id):
        return plan(chain, layout, dtype, max(batch, 1), fuse=fuse)
    tiles = chain.factors[0].tiles
    device_id = tiles.device.id if hasattr(tiles, "device") and \
        hasattr(tiles.device, "id") else None       # copies on two equal GPUs differ here
    named = (chain.name, device_id, devices.current()) + key
    with _SHARED_LOCK:
        found = _SHARED.pop(named, None)
        if found is not None and found[0] == decide.epoch:
            _SHARED[named] = found                      # now the most recently used
            return found[1]
    made = plan(chain, layout, dtype, max(batch, 1), fuse=fuse)
    with _SHARED_LOCK:
        _SHARED[named] = (decide.epoch, made, nbytes)
        while len(_SHARED) > SHARED_PLANS or \
                sum(entry[2] for entry in _SHARED.values()) > SHARED_PLAN_BYTES:
            _SHARED.popitem(last=False)
    return made


def _factor_seconds(factor, batch, dtype, layout, device, backend):
    problem = step_problem(factor.pattern, factor.transposed, batch, dtype, layout)
    return decide.seconds(problem, backend, device)


def plan(chain: FactorChain, layout: str, dtype, batch: int, *, fuse: str = "auto",
         merge: bool = True, factor_backend: str = "auto", device: DeviceFacts | None = None,
         rows: bool = True) -> ChainPlan:
    """The plan of ``chain`` for a batch of ``batch`` rows of ``dtype`` in ``layout`` on
    ``device`` (default: the current GPU).

    ``fuse``: ``"auto"`` (cost model), ``"always"`` (fewest launches) or ``"never"``
    (per-factor steps with ``factor_backend``, a backend with a cost model or ``"auto"``).
    ``merge``: merge adjacent small-block factors first. ``rows``: runs of small square
    factors may go to the whole-vector kernel as well as to the shared-memory segment
    kernel. Under ``fuse="auto"`` (with ``rows``) the plan for the other layout between two
    transposes is weighed as well, and taken when the model finds it faster by
    :data:`RELAYOUT_MARGIN`.
    """
    if fuse not in ("auto", "always", "never"):
        raise ValueError(f'fuse must be "auto", "always" or "never", got {fuse!r}')
    if device is None:
        device = devices.current()
    dtype = numpy.dtype(dtype)
    factors = [f.in_dtype(dtype) for f in chain.applied]
    options = [factors]
    if merge and fuse != "never":
        # merged factors have stored blocks: where ks_rows would compute DFT or Hadamard
        # stages instead (see kernels/ks_rows.stage_of), the unmerged chain is planned too
        options = [merge_all(factors[::-1])[::-1]]      # merge() takes (left, right)
        if rows and any(stage_of(f)[0] != STORED for f in factors):
            options.append(factors)

    def best_in(layout):
        return min((_plan_factors(chain, f, layout, dtype, batch, fuse, factor_backend, device,
                                  rows) for f in options), key=lambda p: p.seconds)
    best = best_in(layout)
    if fuse == "auto" and rows and batch > 1:
        other = "bsf" if layout == "bsl" else "bsl"
        there = best_in(other)
        M, N = chain.shape
        itemsize = dtype.itemsize
        seconds = (there.seconds + gpu_costs.transpose_seconds(N, batch, itemsize, device)
                   + gpu_costs.transpose_seconds(M, batch, itemsize, device))
        if seconds < RELAYOUT_MARGIN * best.seconds:
            best = ChainPlan((Relayout(there, other, (M, N)),), seconds)
    return best


class _PlannedProduct:
    """A :class:`ProductStep` the dynamic program weighs, formed only once chosen
    (:meth:`formed`). ``factors`` in application order; ``src`` / ``out_perm``: chain
    permutations folded into a dense product's columns / rows."""

    def __init__(self, factors, backend, src=None, out_perm=None):
        self.factors, self.backend, self.src, self.out_perm = factors, backend, src, out_perm

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


def _product_candidate(factors, src, out_perm, with_gathers, batch, dtype, layout, device,
                       backend):
    """``(steps, seconds)`` of applying ``factors`` (application order) as their product; a
    dense product absorbs the chain permutations pending at its ends (``src``, ``out_perm``;
    None where none is), any other product gathers them (``with_gathers``)."""
    pattern = product_pattern(factors[::-1])
    seconds = decide.seconds(step_problem(pattern, False, batch, dtype, layout), backend,
                             device)
    if pattern.a == pattern.d == 1:
        return (_PlannedProduct(tuple(factors), backend, src, out_perm),), seconds
    return with_gathers(_PlannedProduct(tuple(factors), backend), seconds,
                        src is not None, out_perm is not None)


def _plan_factors(chain, factors, layout, dtype, batch, fuse, factor_backend, device, rows):
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
            seconds += gpu_costs.gather_seconds(chain.shape[1], batch, dtype, device)
            steps = (Gather(src),) + steps
        if last and dst is not None:
            seconds += gpu_costs.gather_seconds(chain.shape[0], batch, dtype, device)
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
            _factor_seconds(factors[i], batch, dtype, layout, device, factor_backend),
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
            if fuse == "auto" and j - i > 1 and product_fits(factors[i:j]):
                candidates.append(_product_candidate(
                    factors[i:j], folds["src"], out_perm if last else None, with_gathers,
                    batch, dtype, layout, device, factor_backend))
            if rows_fit:
                row_segment = make_row_segment(factors[i:j], dtype, layout, batch, **folds,
                                               device=device)
                rows_fit = row_segment is not None     # longer runs hold the same factors
                if rows_fit:
                    candidates.append(((row_segment,), gpu_costs.rows_seconds(
                        row_segment, batch, dtype, device, layout)))
            if fuse == "auto" and j - i == 2:
                pair = make_pair_segment(factors[i:j], dtype, layout, device=device)
                if pair is not None:           # priced with a margin (the plan's seconds too)
                    candidates.append(with_gathers(
                        pair, gpu_costs.pair_seconds(pair, batch, device) / PAIR_MARGIN,
                        first, last))
            lone = j - i == 1 and folds["src"] is None and folds["dst"] is None
            if segments_fit and not lone:        # a lone factor: the single-factor path
                seg = make_segment(factors[i:j], dtype, layout, batch, **folds, device=device)
                segments_fit = seg is not None   # longer segments only need more memory
                if seg is not None and (fuse == "always" or all(vec for _, vec in seg.reads)):
                    # under auto, large blocks are never fused (see the module)
                    candidates.append(((seg,), gpu_costs.segment_seconds(seg, batch, dtype,
                                                                         device)))
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
