"""The fused chain-segment kernel family (``kernels_cu/ks_chain.cu``): tile configuration,
the shared-memory layout, the instantiation name and the launch.

A segment is a run of consecutive factors of a chain applied by one launch: a block loads a
tile of ``rows`` batch rows × ``slots`` super-groups (see :func:`kscupy.core.pattern.super_pattern`)
into shared memory, applies every factor there and stores the tile once. Each factor's work
items compute ``tm`` outputs (``k``) of one sub-group for ``rw`` rows.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy

from ..core import device as devices
from ..core.pattern import super_group_lengths, super_pattern
from ..core.problem import pow2_at_least
from ..core.shuffle import int32_indices
from . import nvrtc
from .launcher import KernelRun, Launcher
from .operands import copying_odd_strides, geometry

__all__ = ["FusedSegment", "make_segment", "segment_smem", "SMEM_BUDGET", "WALK_ROW",
           "WALK_SLOT", "WALK_T"]

#: Shared memory one fused block may use (less where a block may have less:
#: DeviceFacts.smem_per_block): two blocks of this size share a Hopper SM.
SMEM_BUDGET = 100 * 1024

#: WalkOrder in ks_chain.cu: which tile axis neighbouring threads walk in global memory
#: (the batch row, the super-group slot, or the position t inside a super-group).
WALK_ROW, WALK_SLOT, WALK_T = 0, 1, 2


@dataclasses.dataclass(frozen=True, eq=False)
class FusedSegment:
    """Factors (:class:`~kscupy.core.factor.Factor`, in application order) applied by one launch.

    ``rows × slots`` is the tile (batch rows × super-groups) a block owns; ``work[f] = (tm,
    rw)`` the register tile of factor f's work items; ``reads[f] = (transposed, vector)`` how
    its blocks are read (vector: whole blocks by 16-byte loads, the stored orientation fixed
    at compile time); ``src`` / ``dst`` the folded input / output permutations as column
    tables; ``gorder`` the order tiles take the super-groups in; ``meta`` the kernel's
    per-factor table (addresses, weight strides, conjugation flags).
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
    meta: object = None

    @property
    def patterns(self):
        return tuple(f.pattern for f in self.factors)

    @functools.cached_property       # read on every launch
    def geometry(self):
        """``(AS, DS, NIN, NOUT, NMAX, in_place)`` as the kernel derives them."""
        AS, DS = super_pattern(self.patterns)
        lengths = [super_group_lengths(p, AS, DS) for p in self.patterns]
        return (AS, DS, lengths[0][0], lengths[-1][1], max(max(n) for n in lengths),
                _in_place(self.patterns, self.work))

    @property
    def result_features(self) -> int:
        """The features of the new C-contiguous array a run returns (``M = AS * DS * NOUT``)."""
        AS, DS, _, nout, _, _ = self.geometry
        return AS * DS * nout

    def smem_bytes(self, itemsize: int) -> int:
        """``ChainLayout::SMEM_BYTES`` (dynamic shared memory of the launch)."""
        _, _, _, _, nmax, in_place = self.geometry
        return segment_smem(nmax, self.rows, self.slots, in_place, itemsize)

    def _factor_arguments(self) -> str:
        return ", ".join(f"ks::Factor<{p.a}, {p.b}, {p.c}, {p.d}, {tm}, {rw}, {tr}, {vec}>"
                         for p, (tm, rw), (tr, vec) in zip(self.patterns, self.work, self.reads))

    def name(self, dtype) -> str:
        """The instantiation ``ks::ks_chain<T, RT, SLOTS, NT, Factor<...>...>``."""
        return (f"ks::ks_chain<{nvrtc.scalar_name(dtype)}, {self.rows}, {self.slots}, "
                f"{self.threads}, {self._factor_arguments()}>")

    def layout_probe_name(self, dtype) -> str:
        """``ks::ks_chain_layout<...>``, which reports :meth:`layout` as the kernel sees it."""
        return (f"ks::ks_chain_layout<{nvrtc.scalar_name(dtype)}, {self.rows}, {self.slots}, "
                f"{self._factor_arguments()}>")

    def layout(self, itemsize: int) -> tuple:
        """``(SMEM_BYTES, AS, DS, NIN, NOUT, NMAX, BUFFERS)`` of ``ChainLayout``, as this
        module computes them."""
        AS, DS, nin, nout, nmax, in_place = self.geometry
        return (self.smem_bytes(itemsize), AS, DS, nin, nout, nmax, 1 if in_place else 2)

    def __call__(self, X, layout):
        return prepare(self, X, layout)(X)

    def prepare(self, X, layout):
        """``run(X)`` for operands like ``X``: see :func:`prepare`."""
        return prepare(self, X, layout)

    def describe(self):
        pats = " ".join(str(tuple(p)) for p in self.patterns)
        extras = "".join(f", {n}" for n, v in (("src", self.src), ("dst", self.dst),
                                                ("gorder", self.gorder)) if v is not None)
        return (f"fused {len(self.factors)} factors [{pats}] rows={self.rows} "
                f"slots={self.slots}{extras}")


def _in_place(patterns, work):
    """``all_in_place<Fs...>()``: one buffer suffices when every stage is square with
    whole-block work items (each reads its c inputs before writing its b outputs over them)."""
    return all(p.b == p.c and tm == p.b for p, (tm, _) in zip(patterns, work))


def segment_smem(nmax, rows, slots, in_place, itemsize):
    """Bytes of ``Tile<T, NMAX, SLOTS>::elements(rows)``, one or two buffers: a row holds
    ``nmax*slots`` elements plus one padding element every 128 bytes and one at its end."""
    pad = max(1, 128 // itemsize)
    row = nmax * slots + (nmax * slots) // pad + 1
    return (1 if in_place else 2) * rows * row * itemsize


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


def _configure(patterns, dtype, layout, batch, folds_input, smem_limit):
    """The tile configuration of a fused segment, or None when its tile cannot fit in
    ``smem_limit`` bytes."""
    itemsize, complex_ = dtype.itemsize, dtype.kind == "c"
    AS, DS = super_pattern(patterns)
    nmax = max(max(super_group_lengths(p, AS, DS)) for p in patterns)
    line = max(1, 128 // itemsize)                       # elements per 128-byte line
    # Slots: runs of adjacent super-groups, so that a tile's global accesses are whole lines.
    if DS > 1:
        slots = _pow2_divisor(DS, line)
    elif folds_input and AS > 1:
        slots = _pow2_divisor(AS, line)                  # with gorder, see _gorder
    else:
        slots = 1
    rows_wanted = max(1, line) if layout == "bsl" else (8 if complex_ else 16)
    rows_wanted = min(rows_wanted, pow2_at_least(batch))
    # More slots while the tile is small (short segments): fewer, fuller blocks.
    while (AS * DS) % (2 * slots) == 0 and slots < 64 and rows_wanted * nmax * slots < 2048:
        slots *= 2
    for rows in (rows_wanted >> s for s in range(rows_wanted.bit_length())):
        work = tuple(_work_shape(p, rows, complex_) for p in patterns)
        if segment_smem(nmax, rows, slots, _in_place(patterns, work), itemsize) <= smem_limit:
            break
    else:
        return None
    items = max(slots * (p.a // AS) * (p.d // DS) * (p.b // tm) * (rows // rw)
                for p, (tm, rw) in zip(patterns, work))
    threads = 256 if items >= 256 else max(64, -(-items // 32) * 32)
    if layout == "bsl":
        load_order = store_order = WALK_ROW
    else:
        load_order = WALK_SLOT if slots > 1 and (DS > 1 or folds_input) else WALK_T
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


def _vector_readable(factor, tm, itemsize):
    """Whether a work item can fetch the factor's whole block with 16-byte loads."""
    block = factor.pattern.b * factor.pattern.c * itemsize
    return tm == factor.pattern.b and block % 16 == 0 and block <= 256 and factor.address % 16 == 0


def make_segment(factors, dtype, layout, batch, src=None, dst=None, device=None):
    """A :class:`FusedSegment` applying ``factors`` (Factors of ``dtype``, in application
    order) to batches of about ``batch`` in ``layout``, folding the input gather ``src``
    and the output scatter ``dst``; None when its tile cannot fit in shared memory."""
    dtype = numpy.dtype(dtype)
    patterns = [f.pattern for f in factors]
    device = devices.current() if device is None else device
    config = _configure(patterns, dtype, layout, batch, src is not None,
                        min(SMEM_BUDGET, device.smem_per_block))
    if config is None:
        return None
    xp = factors[0].xp
    AS, DS = super_pattern(patterns)
    nin = super_group_lengths(patterns[0], AS, DS)[0]
    # (cast on the host when small: in a fresh process a CuPy cast compiles a kernel)
    as_int32 = lambda p: None if p is None else int32_indices(p)  # noqa: E731
    gorder = _gorder(src, AS, DS, nin, xp) if src is not None and AS * DS > 1 else None
    reads = tuple((int(f.transposed), int(_vector_readable(f, tm, dtype.itemsize)))
                  for f, (tm, _) in zip(factors, config["work"]))
    meta = None
    if xp is not numpy:
        # meta[f] address, meta[NF + f] sk, meta[2 NF + f] sl, meta[3 NF + f] conjugate
        n = len(factors)
        table = numpy.zeros(4 * n, dtype=numpy.int64)
        for f, factor in enumerate(factors):
            table[f] = factor.address
            table[n + f], table[2 * n + f] = factor.weight_strides
            table[3 * n + f] = int(factor.conjugated)
        meta = xp.asarray(table)
    return FusedSegment(tuple(factors), src=as_int32(src), dst=as_int32(dst), gorder=gorder,
                        meta=meta, reads=reads, **config)


# -- launch -------------------------------------------------------------------------------------
@copying_odd_strides
def prepare(segment: FusedSegment, X, layout):
    """``run(X) -> Y`` applying a fused segment, ``K_F ... K_1 X`` (bsl, X ``(N, B)``) or the
    same on the rows of ``X`` (bsf, ``(B, N)``), for operands with ``X``'s shape, strides and
    dtype: kernel, grid and arguments found here once. Same contract as
    :func:`kscupy.kernels.ks_matmul.prepare`; the segment's factors must have X's dtype."""
    import cupy
    dtype = X.dtype
    AS, DS, nin, nout, _, _ = segment.geometry
    M = segment.result_features
    B, (sx_f, sx_b, sy_f, sy_b), y_shape = geometry(X, layout, M)
    if B == 0:
        return lambda X: cupy.empty(y_shape, dtype=dtype)
    smem = segment.smem_bytes(dtype.itemsize)
    fn = nvrtc.function("ks_chain.cu", segment.name(dtype), smem, cupy.cuda.Device().id,
                        prefer_shared=True)
    tiles = -(-B // segment.rows) * (AS * DS // segment.slots)
    i32, i64 = numpy.int32, numpy.int64
    # column offsets within a row fit in 32 bits: the kernel's cheap addressing applies
    narrow = max(abs(sx_f) * X.shape[1 if layout == "bsf" else 0], abs(sy_f) * M) < 2**31
    launch = Launcher(fn, (min(tiles, 2**31 - 1),), (segment.threads,), smem,
                      (segment.meta, i64(B), i64(sx_f), i64(sx_b), i64(sy_f), i64(sy_b),
                       segment.src, segment.dst, segment.gorder,
                       i32(segment.load_order), i32(segment.store_order), i32(narrow),
                       i64(tiles)), keep=(segment,))
    return KernelRun(launch, y_shape, dtype)
