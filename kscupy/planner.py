"""How a KSChain is applied on the GPU: merged factors, fused segments, per-factor steps.

A plan is a list of steps, each reading the batch once and writing it once:

* :class:`FusedSegment` — several consecutive factors applied by one launch of
  ``kernels_cu/ks_chain.cu``: a tile of batch rows is loaded into shared memory, every factor
  of the segment is applied there, and the tile is stored. A chain permutation next to the
  segment is folded into its global reads (input) or writes (output).
* :class:`FactorStep` — one factor through :meth:`KSMatrix.matmul` (the single-factor
  kernel, BMM or cuBLAS dense, as ``auto`` or the caller chose).
* :class:`Gather` — a chain permutation that no segment absorbed.

:func:`plan` chooses the steps. Adjacent factors whose product is again KS with small
blocks (two radix-2 FFT stages make one radix-4 stage) are first merged, when that does not
add arithmetic (``merge=True``). Then a dynamic program over the factors, in the order they
are applied, picks the cheapest split into fused segments and per-factor steps under a
simple cost model (:func:`segment_seconds`; the per-factor costs are the single-factor
model of :mod:`kscupy.tuning`), and fuses only factors with small blocks (SMALL_BLOCKS_ONLY
below). ``fuse="always"`` instead uses as few launches as the shared memory allows, whatever
the blocks. Plans are cached on the chain per layout, dtype and batch bucket.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy

from . import _arrays
from .matrix import KSMatrix
from .pattern import KSPattern

__all__ = ["FusedSegment", "FactorStep", "Gather", "ChainPlan", "plan", "merge", "super_pattern",
           "segment_seconds"]

#: Shared memory one fused block may use: two blocks of this size fit on an H100/H200 SM.
SMEM_BUDGET = 100 * 1024
#: Largest block (b·c) a merge may produce: merging is for small FFT-like blocks.
MERGE_MAX_BLOCK = 16
# Fused-segment cost model: weights are re-read from L2 by every tile (L2_FACTOR × DRAM
# bandwidth), the SIMT core reaches FUSED_EFFICIENCY of peak, each launch costs LAUNCH_SECONDS.
L2_FACTOR = 2.0
FUSED_EFFICIENCY = 0.3
LAUNCH_SECONDS = 8e-6

# SMALL_BLOCKS_ONLY: under fuse="auto" a segment is fused only when every factor's blocks are
# small enough for a work item to hold whole (16-byte loads, at most 256 bytes: FFT, Hadamard,
# butterfly stages). Larger blocks stream their weights from L2 inside the reduction loop; on
# an H200 that ran 8-30x slower than per-factor application for the paper's two-factor
# chains (benchmarks/results/fft_h200.json), so only fuse="always" (backend="fused") uses it.

# The kernel's WalkOrder: which tile axis neighbouring threads walk in global memory.
WALK_ROW, WALK_SLOT, WALK_T = 0, 1, 2


def super_pattern(patterns) -> tuple:
    """``(AS, DS)``: every factor is ``I_AS ⊗ (dense) ⊗ I_DS`` with AS = gcd(a), DS = gcd(d)."""
    return (math.gcd(*[p.a for p in patterns]), math.gcd(*[p.d for p in patterns]))


def _spans(pattern, AS, DS):
    """Input and output length of a factor inside one super-group of (AS, DS)."""
    a, b, c, d = pattern
    return (a // AS) * c * (d // DS), (a // AS) * b * (d // DS)


# -- merging ------------------------------------------------------------------------------------
def _restricted_blocks(K: KSMatrix, AS: int, DS: int):
    """K as ``I_AS ⊗ D ⊗ I_DS``: the dense blocks D of shape ``(AS, DS, M/(AS DS), N/(AS DS))``."""
    xp = K.xp
    a, b, c, d = K.pattern
    af, df = a // AS, d // DS
    blocks = K.blocks.reshape(AS, af, df, DS, b, c)          # group (i'·af + i_s, j_s·DS + j')
    # D[i', j'][i_s·b·df + l·df + j_s, i_s2·c·df + k·df + j_s2] = block, on i_s = i_s2, j_s = j_s2
    D = xp.einsum("xsyzlk,st,yu->xzslytku", blocks, xp.eye(af, dtype=blocks.dtype),
                  xp.eye(df, dtype=blocks.dtype))
    return D.reshape(AS, DS, af * b * df, af * c * df)


def merge(left: KSMatrix, right: KSMatrix):
    """``left @ right`` as one KSMatrix when the product is KS with small blocks, else None.

    The product of two KS factors is supported on ``I_AS ⊗ 1 ⊗ I_DS`` (AS, DS the gcds of
    their a's and d's); it is merged only when its blocks have at most ``MERGE_MAX_BLOCK``
    entries and it has no more non-zeros than the two factors together (so the merged
    factor does no more arithmetic). Computed in double precision, returned in the dtype of
    the factors.
    """
    AS, DS = super_pattern([left.pattern, right.pattern])
    M, N = left.shape[0], right.shape[1]
    b, c = M // (AS * DS), N // (AS * DS)
    if b * c > MERGE_MAX_BLOCK or AS * DS * b * c > left.nnz + right.nnz:
        return None
    dtype = numpy.result_type(left.dtype, right.dtype)
    wide = numpy.complex128 if dtype.kind == "c" else numpy.float64
    P = _restricted_blocks(left.astype(wide), AS, DS) @ _restricted_blocks(right.astype(wide), AS, DS)
    tiles = left.xp.ascontiguousarray(P.astype(dtype))
    return KSMatrix._from_tiles(tiles, KSPattern(AS, b, c, DS))


def merge_all(factors):
    """Greedily merge adjacent factors (see :func:`merge`); returns a new list."""
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

    def describe(self):
        return f"gather ({self.perm.shape[0]})"


@dataclasses.dataclass(frozen=True, eq=False)
class FactorStep:
    """One factor through :meth:`KSMatrix.matmul` with ``backend``."""
    factor: KSMatrix
    backend: str

    def __call__(self, X, layout):
        return self.factor.matmul(X, layout=layout, backend=self.backend)

    def describe(self):
        return f"factor {tuple(self.factor.pattern)} ({self.backend})"


@dataclasses.dataclass(frozen=True, eq=False)
class FusedSegment:
    """Factors applied by one launch of ``ks_chain`` (``factors`` in application order).

    ``rows × slots`` is the tile (batch rows × super-groups) a block owns; ``work[f] =
    (tm, rw)`` the register tile of factor f's work items; ``reads[f] = (transposed,
    vector)`` how its blocks are read (vector: whole blocks by 16-byte loads, with the
    stored orientation fixed at compile time); ``src`` / ``dst`` the folded
    input / output permutations as column tables; ``gorder`` the order tiles take the
    super-groups in.
    """
    factors: tuple
    rows: int
    slots: int
    threads: int
    work: tuple
    load_order: int
    store_order: int
    reads: tuple = ()
    src: object = None
    dst: object = None
    gorder: object = None
    meta: object = None       # the kernel's per-factor table (addresses, strides, conj flags)

    @property
    def patterns(self):
        return tuple(f.pattern for f in self.factors)

    @functools.cached_property       # read on every launch
    def geometry(self):
        """``(AS, DS, NIN, NOUT, NMAX, in_place)`` as the kernel derives them."""
        AS, DS = super_pattern(self.patterns)
        spans = [_spans(p, AS, DS) for p in self.patterns]
        return (AS, DS, spans[0][0], spans[-1][1], max(max(s) for s in spans),
                _in_place(self.patterns, self.work))

    def smem_bytes(self, itemsize: int) -> int:
        """Dynamic shared memory (mirrors Tile::elements and the buffer count in the kernel)."""
        _, _, _, _, nmax, in_place = self.geometry
        return segment_smem(nmax, self.rows, self.slots, in_place, itemsize)

    def __call__(self, X, layout):
        from . import _kernels
        return _kernels.launch_segment(self, X, layout)

    def describe(self):
        pats = " ".join(str(tuple(p)) for p in self.patterns)
        extras = "".join(f", {n}" for n, v in (("src", self.src), ("dst", self.dst),
                                                ("gorder", self.gorder)) if v is not None)
        return (f"fused {len(self.factors)} factors [{pats}] rows={self.rows} "
                f"slots={self.slots}{extras}")


def _in_place(patterns, work):
    """Whether the kernel needs one buffer: every stage square with whole-block work items
    (Factor::in_place in kernels_cu/ks_chain.cu)."""
    return all(p.b == p.c and tm == p.b for p, (tm, _) in zip(patterns, work))


def segment_smem(nmax, rows, slots, in_place, itemsize):
    """Bytes of ``Tile<T, NMAX, JT>::elements(rows)`` per buffer, one or two buffers."""
    pad = max(1, 128 // itemsize)
    row = nmax * slots + (nmax * slots) // pad + 1
    return (1 if in_place else 2) * rows * row * itemsize


@dataclasses.dataclass(frozen=True, eq=False)
class ChainPlan:
    """Steps applied in order; ``seconds`` is the model's estimate for the planned batch."""
    steps: tuple
    seconds: float

    def __call__(self, X, layout):
        for step in self.steps:
            X = step(X, layout)
        return X

    def describe(self) -> str:
        return "\n".join(step.describe() for step in self.steps)

    @property
    def launches(self) -> int:
        return len(self.steps)


# -- configuration ------------------------------------------------------------------------------
def _pow2_divisor(n: int, at_most: int) -> int:
    p = 1
    while n % (2 * p) == 0 and 2 * p <= at_most:
        p *= 2
    return p


def _work_shape(pattern, rows, complex_):
    """(tm, rw): the register tile of one work item (at most 16 complex / 32 real values)."""
    budget = 16 if complex_ else 32
    tm_cap = 4 if complex_ else 8
    tm = max(t for t in range(1, min(pattern.b, tm_cap) + 1) if pattern.b % t == 0)
    rw = 1
    while 2 * rw <= rows and rows % (2 * rw) == 0 and tm * 2 * rw <= budget:
        rw *= 2
    return tm, rw


def configure(factors, dtype, layout, batch, src=None):
    """The tile configuration of a fused segment, or None when its tile cannot fit."""
    dtype = numpy.dtype(dtype)
    itemsize, complex_ = dtype.itemsize, dtype.kind == "c"
    patterns = [f.pattern for f in factors]
    AS, DS = super_pattern(patterns)
    nmax = max(max(_spans(p, AS, DS)) for p in patterns)
    line = max(1, 128 // itemsize)                       # elements per 128-byte line
    # Slots: runs of adjacent super-groups, so that a tile's global accesses are whole lines.
    if DS > 1:
        slots = _pow2_divisor(DS, line)
    elif src is not None and AS > 1:
        slots = _pow2_divisor(AS, line)                  # with gorder, see _gorder
    else:
        slots = 1
    rows_wanted = max(1, line) if layout == "bsl" else (8 if complex_ else 16)
    rows_wanted = min(rows_wanted, 1 << max(0, batch - 1).bit_length())
    # More slots while the tile is small (short segments): fewer, fuller blocks.
    while (AS * DS) % (2 * slots) == 0 and slots < 64 and rows_wanted * nmax * slots < 2048:
        slots *= 2
    for rows in (rows_wanted >> s for s in range(rows_wanted.bit_length())):
        work = tuple(_work_shape(p, rows, complex_) for p in patterns)
        if segment_smem(nmax, rows, slots, _in_place(patterns, work), itemsize) <= SMEM_BUDGET:
            break
    else:
        return None
    items = max(slots * (p.a // AS) * (p.d // DS) * (p.b // tm) * (rows // rw)
                for p, (tm, rw) in zip(patterns, work))
    threads = 256 if items >= 256 else max(64, -(-items // 32) * 32)
    if layout == "bsl":
        load_order = store_order = WALK_ROW
    else:
        load_order = WALK_SLOT if slots > 1 and (DS > 1 or src is not None) else WALK_T
        store_order = WALK_SLOT if slots > 1 and DS > 1 else WALK_T
    return dict(rows=rows, slots=slots, threads=threads, work=work,
                load_order=load_order, store_order=store_order)


def _gorder(src, AS, DS, nin, xp):
    """Super-groups sorted by the column their first element reads, so that the slots of a
    tile read adjacent columns (a digit-reversed input then streams in whole lines)."""
    g = numpy.arange(AS * DS)
    first = (g // DS) * nin * DS + g % DS
    cols = src.get()[first] if hasattr(src, "get") else numpy.asarray(src)[first]
    order = numpy.argsort(cols, kind="stable")
    if (order == g).all():
        return None
    return xp.asarray(order.astype(numpy.int32))


def make_segment(factors, dtype, layout, batch, src=None, dst=None):
    """A :class:`FusedSegment` for ``factors`` (application order), or None if none fits."""
    config = configure(factors, dtype, layout, batch, src)
    if config is None:
        return None
    xp = factors[0].xp
    AS, DS = super_pattern([f.pattern for f in factors])
    nin = _spans(factors[0].pattern, AS, DS)[0]
    as_int32 = lambda p: None if p is None else xp.asarray(p, dtype=xp.int32)  # noqa: E731
    gorder = _gorder(src, AS, DS, nin, xp) if src is not None and AS * DS > 1 else None
    itemsize = numpy.dtype(dtype).itemsize
    reads = tuple((int(K._transposed), int(_vector_readable(K, tm, itemsize)))
                  for K, (tm, _) in zip(factors, config["work"]))
    meta = None
    if xp is not numpy:
        n = len(factors)
        table = numpy.zeros(4 * n, dtype=numpy.int64)
        for f, K in enumerate(factors):
            b, c = K.pattern.b, K.pattern.c
            table[f] = K._tiles.data.ptr
            table[n + f], table[2 * n + f] = (1, b) if K._transposed else (c, 1)
            table[3 * n + f] = int(K._conjugated)
        meta = xp.asarray(table)
    return FusedSegment(tuple(factors), src=as_int32(src), dst=as_int32(dst), gorder=gorder,
                        meta=meta, reads=reads, **config)


def _vector_readable(K, tm, itemsize):
    """Whether a work item can fetch K's whole block with 16-byte loads."""
    block = K.pattern.b * K.pattern.c * itemsize
    tiles = K._tiles
    address = tiles.data.ptr if hasattr(tiles.data, "ptr") else tiles.ctypes.data
    return tm == K.pattern.b and block % 16 == 0 and block <= 256 and address % 16 == 0


# -- cost model -----------------------------------------------------------------------------------
def segment_seconds(segment: FusedSegment, batch: int, dtype, rates) -> float:
    """Modelled time of a fused segment: the slowest of DRAM traffic (the batch in and out
    once), weight traffic (every tile re-reads the weights its work items use) and SIMT
    arithmetic, plus a launch."""
    dtype = numpy.dtype(dtype)
    isz = dtype.itemsize
    AS, DS, nin, nout, _, _ = segment.geometry
    dram = isz * batch * AS * DS * (nin + nout) / rates.bandwidth
    tiles = -(-batch // segment.rows) * (AS * DS // segment.slots)
    weights = sum(segment.slots * (p.a // AS) * (p.d // DS) * p.b * p.c * (segment.rows // rw)
                  for p, (_, rw) in zip(segment.patterns, segment.work))
    l2 = isz * tiles * weights / (L2_FACTOR * rates.bandwidth)
    peak = rates.flops64 if dtype in (numpy.float64, numpy.complex128) else rates.flops32
    flops_per_mac = 8 if dtype.kind == "c" else 2
    compute = 0.0
    for p, (tm, rw) in zip(segment.patterns, segment.work):
        # a work item loads tm weights and rw inputs per tm·rw multiply-adds: below about
        # 4 real FMAs per load the loads, not the FMA units, set the pace
        per_load = (flops_per_mac // 2) * tm * rw / (tm + rw)
        efficiency = FUSED_EFFICIENCY * min(1.0, per_load / 4.0)
        compute += flops_per_mac * batch * p.nnz / (efficiency * peak)
    return max(dram, l2, compute) + LAUNCH_SECONDS


def _factor_seconds(K, batch, dtype, layout, rates, backend):
    from . import tuning
    problem = tuning.Problem(pattern=K.pattern, batch=batch, dtype=numpy.dtype(dtype),
                             layout=layout, batch_contiguous=(layout == "bsl" or batch == 1),
                             transposed=K._transposed)
    if backend == "auto":
        options = ["kernel", "bmm"]
    else:
        options = [backend if backend in ("kernel", "bmm", "dense") else "kernel"]
    return min(tuning.estimate_seconds(problem, be, rates) for be in options)


def _gather_seconds(n, batch, dtype, rates):
    return 2.0 * numpy.dtype(dtype).itemsize * n * batch / rates.bandwidth + LAUNCH_SECONDS


# -- planning ------------------------------------------------------------------------------------
def plan(chain, layout: str, dtype, batch: int, *, fuse: str = "auto", merge: bool = True,
         factor_backend: str = "auto", rates=None) -> ChainPlan:
    """Plan ``chain.matmul(X, layout=layout)`` for a batch of ``batch`` rows of ``dtype``.

    ``fuse``: ``"auto"`` (cost model), ``"always"`` (fewest launches) or ``"never"`` (per-factor steps with
    ``factor_backend``). ``merge``: merge adjacent small-block factors first.
    """
    if fuse not in ("auto", "always", "never"):
        raise ValueError(f'fuse must be "auto", "always" or "never", got {fuse!r}')
    if rates is None:
        from . import tuning
        rates = tuning.device_rates()
    dtype = numpy.dtype(dtype)
    factors = [f if f.dtype == dtype else f.astype(dtype) for f in reversed(chain.factors)]
    if merge and fuse != "never":
        factors = merge_all(factors[::-1])[::-1]        # merge() takes (left, right)
    src, out_perm = chain.input_permutation, chain.output_permutation
    dst = None
    if out_perm is not None:                            # y = z[out]  <=>  y[inv[p]] = z[p]
        xp = chain.xp
        dst = xp.empty_like(out_perm)
        dst[out_perm] = xp.arange(out_perm.shape[0], dtype=out_perm.dtype)
    L = len(factors)

    # best[i]: (seconds, steps) applying factors[:i]; the input permutation is pending at 0.
    INF = (math.inf, ())
    best = [INF] * (L + 1)
    best[0] = (0.0, ())
    for i in range(L):
        if best[i] is INF:
            continue
        base_s, base_steps = best[i]
        first = i == 0
        # per-factor step (with gathers for pending permutations)
        s = _factor_seconds(factors[i], batch, dtype, layout, rates, factor_backend)
        steps = (FactorStep(factors[i], factor_backend),)
        if first and src is not None:
            s += _gather_seconds(chain.shape[1], batch, dtype, rates)
            steps = (Gather(src),) + steps
        if i + 1 == L and dst is not None:
            s += _gather_seconds(chain.shape[0], batch, dtype, rates)
            steps = steps + (Gather(out_perm),)
        if fuse == "always":
            s = len(steps) + s * 1e-9             # count launches, break ties by the model
        if base_s + s < best[i + 1][0]:
            best[i + 1] = (base_s + s, base_steps + steps)
        if fuse == "never":
            continue
        for j in range(i + 1, L + 1):
            if j - i == 1 and not ((first and src is not None) or (j == L and dst is not None)):
                continue          # a lone factor with nothing to fold: the single-factor path
            last = j == L
            seg = make_segment(factors[i:j], dtype, layout, batch,
                               src=src if first else None, dst=dst if last else None)
            if seg is None:
                break             # longer segments only need more shared memory
            if fuse == "auto" and not all(vec for _, vec in seg.reads):
                continue          # large blocks: see SMALL_BLOCKS_ONLY
            s = segment_seconds(seg, batch, dtype, rates)
            if fuse == "always":
                s = 1.0 + s * 1e-9            # count launches, break ties by the model
            cand = (base_s + s, base_steps + (seg,))
            if cand[0] < best[j][0]:
                best[j] = cand
    seconds, steps = best[L]
    return ChainPlan(steps, seconds)
