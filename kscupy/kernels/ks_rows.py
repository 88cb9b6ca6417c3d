"""The whole-vector chain kernel family (``kernels_cu/ks_rows.cu``): a run of small square
factors applied to whole feature vectors from registers, in passes of nesting factors.

A :class:`RowSegment` is what a chain plan runs: its factors (in application order), the
passes they are grouped into (:func:`group_passes`), the tile (``rows`` whole vectors per
block, laid out for one layout: in batch-size-first a work item walks several rows with its
blocks in registers; in batch-size-last the first pass reads X, the last writes Y and the
lanes of a work item's group take neighbouring rows) and the folded gathers. It
applies where every factor is square with blocks of at most :data:`MAX_RADIX` and a tile of
one vector fits in shared memory (:func:`make_row_segment` returns None otherwise): FFT,
Hadamard and butterfly chains up to a few thousand features. Radix-2 factors whose values
hold a declared :class:`~kscupy.core.structure.DFTStage` are computed (a butterfly, twiddles from
a table of ``d`` values) instead of loaded (:func:`stage_of`).
"""
from __future__ import annotations

import dataclasses
import functools
import threading

import numpy

from ..core import arrays, device as devices
from ..core.device import DeviceFacts
from ..core.problem import pow2_at_least
from ..core.shuffle import bit_reversal, int32_indices
from . import nvrtc
from .launcher import KernelRun, Launcher
from .operands import copying_odd_strides, geometry

__all__ = ["RowSegment", "make_row_segment", "group_passes", "pass_registers", "rows_smem",
           "stage_of", "MAX_RADIX", "PORTABLE_CLUSTER", "ALONG_T", "ALONG_ROW", "STORED",
           "HADAMARD_STAGE", "TWIDDLED_STAGE"]

#: Largest block (b = c) of a factor the family applies.
MAX_RADIX = 16
#: Shared memory of a block holding one vector at most (less where a block may have less:
#: DeviceFacts.smem_per_block).
SMEM_MAX = 200 * 1024
#: Shared memory a block holding several vectors may use: three blocks per SM.
SMEM_TARGET = 72 * 1024
#: Most elements of a pass (the product of its radices), by layout. Batch-size-last items
#: hold one row of a pass of 32 (rows_per_lane), and fewer passes save round trips of the
#: tile; batch-size-first items hold their twiddles in registers as well, which passes of
#: more than 16 elements spill (DFT).
MAX_ELEMENTS = {"bsf": 16, "bsl": 32}
#: Blocks per SM that a launch asks the registers to allow (at most; fewer when the shared
#: memory of a block allows fewer): one block's loads overlap another's arithmetic.
MIN_BLOCKS = 3
#: Blocks per SM, of 128 threads, for segments whose tiles keep enough rows (all those
#: wanted, or MIN_SMALL_ROWS for computed stages in bsf: :func:`_configure`).
SMALL_BLOCKS = 6
MIN_SMALL_ROWS = 4
#: Most rows of a batch-size-first float32 tile of stored blocks that takes two 512-thread
#: blocks per SM instead of three of 256 (:func:`_configure`): tiles of long vectors.
WIDE_BLOCK_MAX_ROWS = 4
#: Rows a batch-size-first tile wants: a pass's blocks, read once per work item, serve the
#: rows the item walks (rows_per_item).
BSF_ROWS = 16
#: Most rows of a one-block batch-size-first tile of stored blocks that a thread-block
#: cluster takes over (:func:`_bsf_cluster_config`): each block holds a share of the
#: features of more rows, which share each read of the blocks. Tiles of more rows already
#: share their reads enough, and computed stages read no blocks: a cluster's barriers cost
#: them more than it saves.
BSF_CLUSTER_MAX_ROWS = 4
#: Bytes of a feature's run a batch-size-last tile wants (a warp's access one 128-byte line),
#: and the least it takes where a lone tile fits (a 32-byte sector).
BSL_RUN, SECTOR = 128, 32
#: 32-bit registers a work item needs besides its elements and weights (addresses, indices,
#: loop counters; from ptxas's counts for DFT and Hadamard passes).
REGISTER_OVERHEAD = 32
#: ``Along`` in ks_rows.cu: the axis global accesses walk (t in a row, or the batch row).
ALONG_T, ALONG_ROW = 0, 1
#: Most blocks of a thread-block cluster holding one tile (``ks_rows_cluster``): the device's
#: ``max_cluster`` (:mod:`kscupy.core.device`: 16 on Hopper, where more blocks a tile let
#: it keep the rows a whole 128-byte run needs; the portable 8 elsewhere), at most
#: ``MAX_CLUSTER``, the most the kernel is written for. Clusters beyond the portable size
#: need a function attribute that ``prepare`` sets
#: (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED).
PORTABLE_CLUSTER, MAX_CLUSTER = 8, 16
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14     # CUfunction_attribute
#: Cluster sizes launched with the load-balancing scheduling policy (the hardware may put
#: several of a cluster's blocks on one SM) instead of the default one (one block of a
#: cluster an SM): clusters of 4 ran faster with it, those of 8 and 16 slower, those of 2
#: alike.
LOAD_BALANCED_CLUSTERS = (4,)
_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 15   # CUfunction_attribute
_LOAD_BALANCING = 2                          # CUclusterSchedulingPolicy
#: Most blocks a launch has: its blocks (or clusters) walk the tiles, one each while they
#: are fewer (tests lower it to make clusters walk several tiles).
MAX_GRID_BLOCKS = 2**31 - 1
#: ``META`` in ks_rows.cu: entries of the kernel's meta table per factor.
_META = 3
#: Serialises the first making of a segment's kernel tables (:attr:`RowSegment.meta`).
_TABLES_LOCK = threading.Lock()


def _words(dtype) -> int:
    """32-bit registers per value in the kernel's compute type (float16 computes in float)."""
    return max(1, dtype.itemsize // 4)


#: ``Stage`` in ks_rows.cu: how a factor's blocks are had.
STORED, HADAMARD_STAGE, TWIDDLED_STAGE = 0, 1, 2


def stage_of(factor) -> tuple:
    """``(stage, scaled)``: how ks_rows has the blocks of ``factor`` (a Factor). A factor
    whose values hold a radix-2 :class:`~kscupy.core.structure.DFTStage` (checked, see
    :attr:`Factor.structure`) is computed: a Hadamard stage (no twiddles, or d = 1 where
    all twiddles are 1) or a twiddled one; ``scaled`` when its scale is not 1. Any other
    factor's blocks are loaded (STORED, False)."""
    stage = factor.structure
    if stage is None or factor.pattern.b != 2:
        return STORED, False
    kind = TWIDDLED_STAGE if stage.twiddled and factor.pattern.d > 1 else HADAMARD_STAGE
    return kind, stage.scale != 1.0


def _pass_weights(trial) -> int:
    """``PassWeights::COUNT`` of ks_rows.cu for a pass of ``(r, d, (stage, scaled))``."""
    elements = int(numpy.prod([r for r, _, _ in trial]))
    low = min(d for _, d, _ in trial)
    count = 0
    for r, d, (stage, scaled) in trial:
        if stage == STORED:
            count += elements * r
        else:
            count += (d // low if stage == TWIDDLED_STAGE else 0) + int(scaled)
    return count


def _nests(radices_strides) -> bool:
    """``Pass::nests`` of ks_rows.cu: distinct strides, each the smallest one times the
    product of the radices below it."""
    ds = [d for _, d in radices_strides]
    if len(set(ds)) != len(ds):
        return False
    low = min(ds)
    for r, d in radices_strides:
        below = 1
        for r2, d2 in radices_strides:
            if d2 < d:
                below *= r2
        if below * low != d:
            return False
    return True


def pass_registers(trial, words: int) -> int:
    """32-bit registers a work item of a pass of ``(r, d, stage)`` needs: its E elements and
    the values it keeps (``PassWeights``), ``words`` each, plus REGISTER_OVERHEAD."""
    elements = int(numpy.prod([r for r, _, _ in trial]))
    return words * (elements + _pass_weights(trial)) + REGISTER_OVERHEAD


def group_passes(patterns, max_elements: int, max_registers: int = 2**31, stages=None,
                 words: int = 1) -> tuple:
    """Consecutive factors (patterns in application order) grouped into passes: a factor
    joins the current pass while the pass's digits still nest, the product E of its radices
    stays at most ``max_elements`` and a work item's registers (:func:`pass_registers`:
    its elements, and E times the radix for stored blocks or the twiddles of a computed
    stage; ``stages[f]`` is factor f's :func:`stage_of`, default stored; values of
    ``words`` registers) at most ``max_registers``: fewer stages per pass cost a round trip
    through shared memory, spilled or fewer resident warps cost more (measured on DFTs).
    Returns the number of factors of each pass."""
    stages = stages or [(STORED, False)] * len(patterns)
    passes, current = [], []
    for p, stage in zip(patterns, stages):
        trial = current + [(p.b, p.d, stage)]
        elements = int(numpy.prod([r for r, _, _ in trial]))
        if current and (elements > max_elements or not _nests([(r, d) for r, d, _ in trial])
                        or pass_registers(trial, words) > max_registers):
            passes.append(len(current))
            trial = [(p.b, p.d, stage)]
        current = trial
    passes.append(len(current))
    return tuple(passes)


def rows_per_item(rows: int, q: int, threads: int) -> int:
    """``rows_per_item`` of ks_rows.cu: the rows a work item of a pass with ``q`` items per
    vector walks with its weights in registers."""
    rg = 1
    while rows % (2 * rg) == 0 and (rows // (2 * rg)) * q >= threads:
        rg *= 2
    return rg


def rows_smem(n: int, rows: int, itemsize: int, layout: str) -> int:
    """``SMEM_BYTES`` of the tile's layout: ``rows`` vectors of ``n`` elements, batch-size-first
    (``RowsLayout``) rounded up to whole 128-byte lines plus one element per row."""
    if layout == "bsl":
        return rows * n * itemsize
    return rows * _row_elements(n, itemsize) * itemsize


def _row_elements(n, itemsize):
    padq = max(1, 128 // itemsize)
    return -(-n // padq) * padq + 1


def _spread(n, rows, itemsize):
    """``ColsLayout::SPREAD``: the features a 128-byte wavefront covers with runs of ``rows``
    elements, at most what divides ``n``."""
    s = max(1, 128 // (rows * itemsize))
    while n % s:
        s //= 2
    return s


@dataclasses.dataclass(frozen=True, eq=False)
class RowSegment:
    """Factors (:class:`~kscupy.core.factor.Factor`, application order, all square with the same
    length ``n``) applied by one launch of ``ks_rows``.

    ``layout``: the operands' layout it is built for (``"bsf"`` or ``"bsl"``); ``passes``:
    factors per pass; ``rows``: vectors per block; ``threads``: per block; ``min_blocks``:
    blocks per SM the registers must allow; ``src`` / ``dst``: the folded
    permutations as the planner gives them (element t of the input is column ``src[t]``,
    element t of the output goes to column ``dst[t]``); ``vector_blocks[f]``: factor f's
    blocks are read as 16-byte words from ``Factor.interleaved_words``; ``stages[f]``:
    factor f's :func:`stage_of` (computed radix-2 DFT and Hadamard stages); ``to_y``: the
    last pass writes Y itself, saving a round trip of the tile through shared memory (always
    in batch-size-last, where the first pass reads X too; in batch-size-first without an
    output gather, where its stores are whole sectors: :func:`writes_whole_sectors`);
    ``cluster``: blocks of a thread-block cluster that hold one tile together
    (``ks_rows_cluster``), each the features whose rank bits are its rank (1: one block a
    tile; :func:`_cluster_fits`): ``log2(cluster) - last_rank_bits`` bits from
    ``rank_shift`` on and ``last_rank_bits`` at the top of the last pass's digits.
    Batch-size-last, the first among the first pass's digits and no later pass's, so that
    the first pass writes to other blocks, and the last pass reads from them where it holds
    the others; batch-size-first, without gathers, t's top bits (each block loads and
    stores a contiguous share of a row), all among one pass's digits, the pass that reads
    and writes other blocks.
    Building one touches no device memory (the planner prices many); the kernel's tables
    are made on the first launch.
    """
    layout: str
    factors: tuple
    passes: tuple
    rows: int
    threads: int
    min_blocks: int
    vector_blocks: tuple
    stages: tuple
    src: object = None
    dst: object = None
    to_y: bool = False
    cluster: int = 1
    rank_shift: int = 0
    last_rank_bits: int = 0

    def __post_init__(self):
        if self.layout not in ("bsf", "bsl"):
            raise ValueError(f"layout must be 'bsf' or 'bsl', got {self.layout!r}")
        if self.cluster != 1 and not (
                _cluster_fits(self.layout, self.n, self.cluster, self.pass_bits,
                              self.rank_shift, self.last_rank_bits)
                and (self.layout == "bsl" or (self.src is None and self.dst is None))):
            where = ("among the first pass's digits, the rest (last_rank_bits) at the top of "
                     "the last pass's, and no other pass's" if self.layout == "bsl"
                     else "the top bits of t, all among one pass's digits, and no gathers")
            raise ValueError(
                f"a cluster of {self.cluster} needs a power-of-two length and its rank bits "
                f"({self.rank_shift} on) {where} (passes' bits {self.pass_bits})")
        if self.layout == "bsl" and not self.to_y:
            raise ValueError("a batch-size-last RowSegment's last pass writes Y (to_y)")
        if self.layout == "bsf" and self.to_y and self.dst is not None:
            raise ValueError("a batch-size-first last pass that writes Y itself has no output "
                             "gather to fold")

    @property
    def tile_round_trips(self) -> int:
        """Times the tile goes through shared memory (written, then read): batch-size-first,
        one per pass and one more, less one when the last pass writes Y itself;
        batch-size-last, where the first pass reads X, one per pass after the first."""
        if self.layout == "bsl":
            return len(self.passes) - 1
        return len(self.passes) + 1 - int(self.to_y)

    @functools.cached_property
    def reversed_input(self) -> bool:
        """Whether ``src`` is the bit reversal, which the kernel computes instead of reading
        a table (:func:`is_bit_reversal`)."""
        return is_bit_reversal(self.src)

    @functools.cached_property
    def in_map(self):
        """The kernel's ``in_map`` (int32), None without an input gather or where the kernel
        computes the bit reversal: batch-size-first, where input column t lands in the tile
        (the inverse of ``src``); batch-size-last, the column element t is read from
        (``src``)."""
        if self.src is None or self.reversed_input:
            return None
        return int32_indices(self.src, inverse=self.layout == "bsf")

    @functools.cached_property
    def out_map(self):
        """The kernel's ``out_map`` (int32), None without an output gather: batch-size-first,
        which tile element output column t takes (the inverse of ``dst``); batch-size-last,
        the column element t goes to (``dst``)."""
        if self.dst is None:
            return None
        return int32_indices(self.dst, inverse=self.layout == "bsf")

    @functools.cached_property
    def _twiddle_tables(self):
        """Each twiddled stage's table (``Factor.stage_twiddles``), else None; held here
        so that the addresses in :attr:`meta` stay valid while the segment lives."""
        return tuple(f.stage_twiddles() if stage == TWIDDLED_STAGE else None
                     for f, (stage, _) in zip(self.factors, self.stages))

    @functools.cached_property
    def _interleaved(self):
        """Each factor read as 16-byte words (``vector_blocks``): its blocks interleaved by
        word (``Factor.interleaved_words``), else None; held here so that the addresses in
        :attr:`meta` stay valid while the segment lives."""
        return tuple(f.interleaved_words(conjugated=f.conjugated) if vec else None
                     for f, vec in zip(self.factors, self.vector_blocks))

    @functools.cached_property
    def meta(self):
        """``META`` int64 entries per factor (``load_weights`` in ks_rows.cu): the address
        of its values (their interleaved copy for ``vector_blocks``, of the conjugated
        values for a conjugated view; its twiddle table; or 0 for a Hadamard stage), 1 to
        use their conjugates (stored blocks read in place), the bits of its scale as a
        float64 (stages).

        Made once, under a lock: two threads launching a new segment at once would otherwise
        each make the tables the addresses point into, and the segment would keep one
        thread's tables while the other's launch read addresses into the freed ones."""
        with _TABLES_LOCK:
            made = self.__dict__.get("meta")          # another thread made it meanwhile
            return made if made is not None else self._meta_table()

    def _meta_table(self):
        table = numpy.zeros(_META * len(self.factors), dtype=numpy.int64)
        for i, (f, (stage, _), tw, words) in enumerate(zip(
                self.factors, self.stages, self._twiddle_tables, self._interleaved)):
            if stage == STORED:
                table[_META * i] = f.address if words is None else arrays.address(words)
                table[_META * i + 1] = int(f.conjugated and words is None)
            else:
                table[_META * i] = 0 if tw is None else arrays.address(tw)
                table[_META * i + 2] = numpy.float64(f.structure.scale).view(numpy.int64)
        return self.factors[0].xp.asarray(table)

    @property
    def n(self) -> int:
        return self.factors[0].shape[1]

    @property
    def result_features(self) -> int:
        """The features of the new C-contiguous array a run returns (square factors)."""
        return self.n

    @property
    def pass_bits(self) -> tuple:
        """Per pass ``(lo, hi)``: its digits are bits lo ... hi - 1 of t (:func:`_pass_bits`)."""
        return _passes_bits(self.patterns, self.passes)

    @property
    def first_pass_bits(self) -> tuple:
        return self.pass_bits[0]

    @property
    def patterns(self):
        return tuple(f.pattern for f in self.factors)

    def pass_patterns(self):
        """Per pass: its factors' patterns, their :func:`stage_of`, and the rows one load of
        a work item's blocks serves (batch-size-first: the rows an item walks; batch-size-
        last: the tile's rows, whose lanes read the same addresses)."""
        out, f = [], 0
        for count in self.passes:
            pats = self.patterns[f:f + count]
            elements = int(numpy.prod([p.b for p in pats]))
            served = self.rows if self.layout == "bsl" else \
                rows_per_item(self.rows, self.n // elements, self.threads * self.cluster)
            out.append((pats, self.stages[f:f + count], served))
            f += count
        return out

    def smem_bytes(self, itemsize: int) -> int:
        """Shared memory of one block's share of the tile."""
        return rows_smem(self.n // self.cluster, self.rows, itemsize, self.layout)

    def launch_smem_bytes(self, itemsize: int) -> int:
        """Shared memory a block is launched with: its share of the tile and, batch-size-last
        on a cluster, the mbarrier that counts the bytes the first pass writes to it
        (``Launch::BAR_OFFSET`` in ks_rows.cu: 8 bytes, 8-aligned after the tile; used where
        the first pass writes rows of 4 bytes or more, ``Launch::async_rows``)."""
        tile = self.smem_bytes(itemsize)
        if self.layout == "bsl" and self.cluster > 1:
            return -(-tile // 8) * 8 + 8
        return tile

    def blocks_per_sm(self, itemsize: int, device: DeviceFacts) -> int:
        """Blocks an SM of ``device`` holds at once, as shared memory and threads allow.
        Registers are not counted: a block may hold fewer where its registers a thread (at
        most what ``min_blocks`` leaves) are many, e.g. two 512-thread blocks where this
        says three."""
        return device.blocks_per_sm(self.launch_smem_bytes(itemsize), self.threads)

    def tile_layout(self, itemsize: int) -> tuple:
        """What ``ks_rows_layout`` reports, as this module computes it: ``(SMEM_BYTES, ROW,
        PADQ)`` of ``RowsLayout`` (bsf) or ``(SMEM_BYTES, RT, SPREAD)`` of ``ColsLayout``
        (bsl)."""
        if self.layout == "bsl":
            return (self.smem_bytes(itemsize), self.rows,
                    _spread(self.n // self.cluster, self.rows, itemsize))
        return (self.smem_bytes(itemsize), _row_elements(self.n // self.cluster, itemsize),
                max(1, 128 // itemsize))

    @property
    def along(self) -> int:
        """``ALONG`` of the kernel: the axis its global accesses walk."""
        return ALONG_ROW if self.layout == "bsl" else ALONG_T

    def _pass_arguments(self) -> str:
        out, f = [], 0
        for count in self.passes:
            radices = ", ".join(
                f"ks::Radix<{F.pattern.b}, {F.pattern.d}, {int(F.transposed)}, {int(v)}, "
                f"{stage}, {int(scaled)}>"
                for F, v, (stage, scaled) in zip(self.factors[f:f + count],
                                                 self.vector_blocks[f:f + count],
                                                 self.stages[f:f + count]))
            out.append(f"ks::Pass<{radices}>")
            f += count
        return ", ".join(out)

    def name(self, dtype, vx: int = 1, vy: int = 1) -> str:
        """The instantiation ``ks::ks_rows<T, N, RT, NT, MINB, ALONG, VX, VY, REVERSED, TO_Y,
        Pass<...>...>`` (batch-size-last: VX = VY), or on a cluster ``ks::ks_rows_cluster<...,
        TO_Y, CS, SH, LAST_BITS, Pass<...>...>`` (the same, then the cluster and the rank
        bits)."""
        flag = lambda b: "true" if b else "false"  # noqa: E731
        kernel, cluster = "ks_rows", ""
        if self.cluster > 1:
            kernel, cluster = ("ks_rows_cluster",
                               f"{self.cluster}, {self.rank_shift}, {self.last_rank_bits}, ")
        return (f"ks::{kernel}<{nvrtc.scalar_name(dtype)}, {self.n}, {self.rows}, "
                f"{self.threads}, {self.min_blocks}, {self.along}, {vx}, {vy}, "
                f"{flag(self.reversed_input)}, {flag(self.to_y)}, {cluster}"
                f"{self._pass_arguments()}>")

    def layout_probe_name(self, dtype) -> str:
        return (f"ks::ks_rows_layout<{nvrtc.scalar_name(dtype)}, {self.n // self.cluster}, "
                f"{self.rows}, {self.along}>")

    def __call__(self, X, layout):
        return prepare(self, X, layout)(X)

    def prepare(self, X, layout):
        """``run(X)`` for operands like ``X``: see :func:`prepare`."""
        return prepare(self, X, layout)

    def describe(self):
        pats = " ".join(str(tuple(p)) for p in self.patterns)
        extras = "".join(f", {n}" for n, v in (("src", self.src), ("dst", self.dst))
                         if v is not None)
        computed = sum(stage != STORED for stage, _ in self.stages)
        stages = f" computed={computed}" if computed else ""
        ends = " to Y" if self.to_y and self.layout == "bsf" else ""
        cluster = f" cluster={self.cluster}" if self.cluster > 1 else ""
        if self.last_rank_bits:
            cluster += f" ({self.last_rank_bits} rank bits in the last pass)"
        return (f"rows {self.layout} {len(self.factors)} factors [{pats}] "
                f"passes={list(self.passes)} rows={self.rows}{cluster}{stages}{extras}{ends}")


def is_bit_reversal(src) -> bool:
    """Whether the gather ``src`` (NumPy or CuPy) is the bit reversal of its length, a power
    of two above 1 (the input order of a radix-2 decimation-in-time FFT)."""
    if src is None or len(src) < 2 or len(src) & (len(src) - 1):
        return False
    return bool((arrays.numpy_copy(src) == bit_reversal(len(src))).all())


def writes_whole_sectors(patterns, itemsize: int) -> bool:
    """Whether a pass of these factors can write Y itself (``TO_Y`` in ks_rows.cu) in whole
    32-byte sectors: a warp's lanes take neighbouring items, whose elements ``t0 + u·DLO``
    form runs of DLO columns starting at multiples of DLO (DLO the pass's smallest d), so a
    run of ``DLO·itemsize`` bytes that is a multiple of 32 fills its sectors (Y is new,
    C-ordered and 256-byte aligned)."""
    return min(p.d for p in patterns) * itemsize % 32 == 0


# -- configuration ------------------------------------------------------------------------------
def eligible(patterns) -> bool:
    """Whether ``ks_rows`` applies these factors: square, blocks of at most MAX_RADIX."""
    return all(p.b == p.c and p.b <= MAX_RADIX for p in patterns) and \
        len({p.shape[1] for p in patterns}) == 1


def _pass_bits(patterns) -> tuple:
    """``(lo, hi)``: a pass of these (nesting) factors mixes bits lo ... hi - 1 of t, where
    its smallest stride and the product of its radices are powers of two; else ``(0, 0)``."""
    elements, low = int(numpy.prod([p.b for p in patterns])), min(p.d for p in patterns)
    if elements & (elements - 1) or low & (low - 1):
        return (0, 0)
    return (low.bit_length() - 1, (elements * low).bit_length() - 1)


def _passes_bits(patterns, passes) -> tuple:
    """:func:`_pass_bits` of each pass (``passes``: factors per pass)."""
    out, f = [], 0
    for count in passes:
        out.append(_pass_bits(patterns[f:f + count]))
        f += count
    return tuple(out)


def _cluster_fits(layout, n, cluster, pass_bits, rank_shift, last_rank_bits=0) -> bool:
    """Whether ``ks_rows_cluster`` holds a tile over ``cluster`` blocks with the rank bits
    at ``rank_shift`` (``last_rank_bits`` of them instead at the top of the last pass's
    digits): ``n`` and ``cluster`` powers of two (up to MAX_CLUSTER), and (``pass_bits``:
    each pass's digits)
    - batch-size-last: two passes or more, the rank bits (at least one) among the first
      pass's digits and no later pass's but the last's top ones (every pass's digits known:
      powers of two), and at least one value of q (one group of items) per block in the
      passes that hold them;
    - batch-size-first: the rank bits t's top bits, all among the digits of one pass and
      none of another's (every pass's digits known), that pass with a value of q per block.
    (Batch-size-first clusters also need a segment without gathers: RowSegment checks.)"""
    lcs = cluster.bit_length() - 1
    rank = set(range(rank_shift, rank_shift + lcs - last_rank_bits))
    if not (1 < cluster <= MAX_CLUSTER and not cluster & (cluster - 1) and not n & (n - 1)
            and 0 <= last_rank_bits < lcs):
        return False
    if layout == "bsl":
        if len(pass_bits) < 2 or not all(b > a for a, b in pass_bits):
            return False
        (lo, hi), (last_lo, last_hi) = pass_bits[0], pass_bits[-1]
        high = set(range(last_hi - last_rank_bits, last_hi))
        holding = [(lo, hi)] + ([(last_lo, last_hi)] if last_rank_bits else [])
        return (lo <= rank_shift and rank_shift + lcs - last_rank_bits <= hi
                and (not last_rank_bits or last_hi - last_rank_bits
                     >= max(last_lo, rank_shift + lcs - last_rank_bits))
                and not high & set(range(lo, hi))
                and not rank & set(range(last_lo, last_hi))
                and all(not (rank | high) & set(range(a, b)) for a, b in pass_bits[1:-1])
                and all(n >> (b - a) >= cluster for a, b in holding))
    if last_rank_bits:
        return False
    holding = [(a, b) for a, b in pass_bits if rank & set(range(a, b))]
    return (rank_shift + lcs == n.bit_length() - 1 and all(b > a for a, b in pass_bits)
            and len(holding) == 1 and rank <= set(range(*holding[0]))
            and n >> (holding[0][1] - holding[0][0]) >= cluster)


def _configure(patterns, stages, dtype, layout, batch, device, cluster=1):
    """``(passes, rows, threads, min_blocks)`` on ``device``, or None when one vector does
    not fit, for tiles held by ``cluster`` blocks each with ``1 / cluster`` of it."""
    n, isz, words = patterns[0].shape[1], dtype.itemsize, _words(dtype)
    smem = lambda rows: rows_smem(n // cluster, rows, isz, layout)  # noqa: E731
    sm_smem, reserved = device.smem_per_sm, device.smem_reserved_per_block
    registers = device.registers_per_sm
    if smem(1) > min(SMEM_MAX, device.smem_per_block):
        return None
    # Batch-size-last tiles want rows enough for 128-byte runs of a feature (a warp's access
    # one whole line); batch-size-first tiles rows enough for a pass's weights to serve
    # several; either a few tiles per SM.
    wanted = BSL_RUN // isz if layout == "bsl" else BSF_ROWS
    rows = min(wanted, pow2_at_least(batch))
    # SMALL_BLOCKS blocks per SM of 128 threads: the warps and registers of three 256-thread
    # blocks, in groups that wait less at their barriers. Taken where the tile keeps all the
    # rows wanted, and for computed stages (DFT, Hadamard) in bsf while it keeps
    # MIN_SMALL_ROWS; with fewer rows a pass's loads serve too few of them to pay.
    computed = all(stage != STORED for stage, _ in stages)
    small_rows = rows
    while small_rows > 1 and smem(small_rows) + reserved > sm_smem // SMALL_BLOCKS:
        small_rows //= 2
    if small_rows == rows or (computed and layout == "bsf"
                              and small_rows >= min(rows, MIN_SMALL_ROWS)):
        rows, resident, threads_max = small_rows, SMALL_BLOCKS, 128
    else:
        # fewer rows for several tiles per SM, but in bsl not below runs of a sector while
        # a lone tile fits (a thinner run wastes most of each sector it reads)
        while rows > 1 and (smem(rows) > SMEM_MAX or smem(rows) > SMEM_TARGET and (
                layout == "bsf" or rows * isz > SECTOR)):
            rows //= 2
        # 256 threads when several blocks share an SM (x 3 blocks leaves 85 registers a
        # thread), 512 for a lone block
        resident = max(1, min(MIN_BLOCKS, sm_smem // (smem(rows) + reserved)))
        threads_max = 256 if resident > 1 else 512
    # Passes are grouped to the registers that leaves (larger passes save round trips but
    # leave fewer blocks an SM); fewer threads when no pass has that many work items.
    budget = registers // (threads_max * resident)
    passes = group_passes(patterns, MAX_ELEMENTS[layout], budget, stages, words)
    # Batch-size-first float32 tiles of stored blocks alone and at most WIDE_BLOCK_MAX_ROWS
    # rows (vectors of 4096 and more): two blocks of 512 threads an SM instead of three of 256
    # (which fit, so two do) where every pass fits the 64 registers that leaves, 1024
    # threads instead of 768. Measured on float32 only: complex64's items need 72 registers
    # and were slower with it; the other dtypes keep three.
    if (layout == "bsf" and dtype == numpy.float32 and rows <= WIDE_BLOCK_MAX_ROWS
            and resident == 3 and all(stage == STORED for stage, _ in stages)):
        wide = registers // (512 * 2)
        if all(pass_registers(trial, words) <= wide
               for trial in _pass_trials(patterns, stages, passes)):
            resident, threads_max = 2, 512
    sizes, need = [], 0
    for trial in _pass_trials(patterns, stages, passes):
        sizes.append(int(numpy.prod([r for r, _, _ in trial])))
        need = max(need, pass_registers(trial, words))
    work = max(rows * (n // e) for e in sizes) // cluster     # a block's share of the items
    threads = min(threads_max, max(64, -(-work // 32) * 32))
    # fewer blocks per SM where the registers a work item needs (its elements and weights)
    # would not fit: spilling them costs more than the occupancy gives
    min_blocks = max(1, min(resident, registers // (threads * need)))
    return passes, rows, threads, min_blocks


def _pass_trials(patterns, stages, passes):
    """Each pass's ``(r, d, stage)`` of its factors (:func:`pass_registers`'s argument)."""
    f = 0
    for count in passes:
        yield [(p.b, p.d, st) for p, st in zip(patterns[f:f + count], stages[f:f + count])]
        f += count


def _cluster_config(patterns, stages, dtype, layout, batch, config, device, max_cluster,
                    gathers):
    """``(cluster, rank_shift, last_rank_bits, config)``, else ``(1, 0, 0, config)`` (one
    block a tile):
    - batch-size-last, where a tile of ``config`` is thinner than BSL_RUN bytes a feature:
      the smallest cluster (up to ``max_cluster``) whose blocks, each holding its share,
      take the rows for whole BSL_RUN runs at several blocks an SM, or failing that runs of
      half as many bytes, with the rank bits at the top of the first pass's digits, or
      where they are more, all its digits and the rest at the top of the last pass's;
    - batch-size-first without ``gathers``, where a tile of ``config`` holds fewer rows
      than a block wants: the smallest cluster that takes them (or the one of the most
      rows), the rank bits t's top bits (:func:`_bsf_cluster_config`)."""
    n, isz = patterns[0].shape[1], dtype.itemsize
    single = (1, 0, 0, config)
    if max_cluster < 2 or n & (n - 1):
        return single
    if layout == "bsf":
        if gathers:
            return single
        cluster, shift, config = _bsf_cluster_config(patterns, stages, dtype, batch, config,
                                                     device, max_cluster)
        return cluster, shift, 0, config
    rows = config[1]
    for run in (BSL_RUN, BSL_RUN // 2):
        wanted = min(max(1, run // isz), pow2_at_least(batch))
        if wanted <= rows:
            break                          # no more rows than the one-block tile has
        cluster = 2
        while cluster <= max_cluster:
            trial = _configure(patterns, stages, dtype, layout, batch, device, cluster)
            if trial is not None and trial[1] >= wanted and \
                    rows_smem(n // cluster, trial[1], isz, layout) <= SMEM_TARGET:
                bits = _passes_bits(patterns, trial[0])
                lcs, (lo, hi) = cluster.bit_length() - 1, bits[0]
                for shift, last in ((hi - lcs, 0), (lo, lcs - (hi - lo))):
                    if _cluster_fits(layout, n, cluster, bits, shift, last):
                        return cluster, shift, last, trial
            cluster *= 2
    return single


def _bsf_cluster_config(patterns, stages, dtype, batch, config, device, max_cluster):
    """:func:`_cluster_config` in batch-size-first, for stored blocks whose one-block tile
    (``config``) keeps at most BSF_CLUSTER_MAX_ROWS rows: clusters of up to ``max_cluster``
    blocks whose tiles keep more rows, the first that keeps all a block wants (BSF_ROWS),
    else the one of the most rows; the rank bits t's top bits."""
    n = patterns[0].shape[1]
    best = (1, 0, config)
    if config[1] > BSF_CLUSTER_MAX_ROWS or any(stage != STORED for stage, _ in stages):
        return best
    wanted = min(BSF_ROWS, pow2_at_least(batch))
    cluster = 2
    while cluster <= max_cluster and best[2][1] < wanted:
        trial = _configure(patterns, stages, dtype, "bsf", batch, device, cluster)
        shift = n.bit_length() - cluster.bit_length()
        if trial is not None and trial[1] > best[2][1] and _cluster_fits(
                "bsf", n, cluster, _passes_bits(patterns, trial[0]), shift):
            best = (cluster, shift, trial)
        cluster *= 2
    return best


def make_row_segment(factors, dtype, layout, batch, src=None, dst=None, *, device=None,
                     max_cluster=None):
    """A :class:`RowSegment` applying ``factors`` (Factors of ``dtype``, application order)
    to batches of about ``batch`` in ``layout`` on ``device`` (default: the current GPU's
    facts), folding the input gather ``src`` (element t of the segment's input is column
    ``src[t]``) and the output scatter ``dst`` (element t of its output goes to column
    ``dst[t]``); None when ``ks_rows`` does not apply. ``max_cluster``: most blocks of a
    cluster a tile may spread over (default: the device's; 1 for one block a tile)."""
    dtype = numpy.dtype(dtype)
    patterns = [f.pattern for f in factors]
    if not eligible(patterns):
        return None
    device = devices.current() if device is None else device
    if max_cluster is None:
        max_cluster = min(MAX_CLUSTER, device.max_cluster)
    stages = tuple(stage_of(f) for f in factors)
    config = _configure(patterns, stages, dtype, layout, batch, device)
    if config is None:
        return None
    cluster, rank_shift, last_rank_bits, config = _cluster_config(
        patterns, stages, dtype, layout, batch, config, device, max_cluster,
        gathers=src is not None or dst is not None)
    passes, rows, threads, min_blocks = config
    # stored blocks of whole 16-byte words are read from their interleaved copy
    vector_blocks = tuple(stage == STORED and not f.transposed
                          and f.pattern.b * f.pattern.c * dtype.itemsize % 16 == 0
                          for f, (stage, _) in zip(factors, stages))
    # the last pass writes Y itself: always in bsl, in bsf where it can (no output gather,
    # whole sectors)
    to_y = layout == "bsl" or (dst is None and writes_whole_sectors(
        patterns[len(patterns) - passes[-1]:], dtype.itemsize))
    return RowSegment(layout, tuple(factors), passes, rows, threads, min_blocks,
                      vector_blocks, stages, src, dst, to_y, cluster, rank_shift, last_rank_bits)


# -- launch -------------------------------------------------------------------------------------
def _vector_width(ptr, isz, contiguous, stride, extent):
    """Elements per access along the walked axis: the largest power of two (at most 16
    bytes) that divides ``extent`` (the walked axis's length in a tile) and ``stride`` (the
    other axis's, in elements), with ``ptr`` aligned to it; 1 unless ``contiguous``."""
    if not contiguous:
        return 1
    v = max(1, 16 // isz)
    while v > 1 and (ptr % (v * isz) or stride % v or extent % v):
        v //= 2
    return v


@copying_odd_strides
def prepare(segment: RowSegment, X, layout):
    """``run(X) -> Y`` applying the segment, ``K_F ... K_1 X`` (bsl, X ``(n, B)``) or the
    same on the rows of ``X`` (bsf, ``(B, n)``), for operands with ``X``'s shape, strides,
    dtype and 16-byte alignment: kernel, grid and arguments found here once. The segment's
    factors must have X's dtype."""
    import cupy
    if layout != segment.layout:
        raise ValueError(f"a RowSegment built for {segment.layout!r} run in {layout!r}")
    dtype, isz, n = X.dtype, X.dtype.itemsize, segment.n
    B, (sx_f, sx_b, sy_f, sy_b), y_shape = geometry(X, layout, n)
    if B == 0:
        return lambda X: cupy.empty(y_shape, dtype=dtype)
    if layout == "bsf":             # Y is new and C-ordered (256-byte aligned)
        if (sy_f, sy_b) != (1, n):   # ks_rows.cu's YSide writes element t of row b at b·n + t
            raise RuntimeError(f"batch-size-first Y must be C-ordered: strides {(sy_f, sy_b)}")
        share = n // segment.cluster            # the features a block loads and stores
        vx = _vector_width(X.data.ptr, isz, sx_f == 1, sx_b, share)
        vy = 1 if segment.to_y else _vector_width(0, isz, True, sy_b, share)
    else:                           # the passes read X and write Y by the same rows
        vx = vy = min(_vector_width(X.data.ptr, isz, sx_b == 1, sx_f, segment.rows),
                      _vector_width(0, isz, True, sy_f, segment.rows))
    smem = segment.launch_smem_bytes(isz)
    limit = min(MAX_CLUSTER, devices.current().max_cluster)
    if segment.cluster > limit:
        raise ValueError(f"a RowSegment on a cluster of {segment.cluster} blocks, more than "
                         f"this GPU runs ({limit})")
    fn = nvrtc.function("ks_rows.cu", segment.name(dtype, vx, vy), smem,
                        cupy.cuda.Device().id, prefer_shared=True)
    if segment.cluster > PORTABLE_CLUSTER:     # else its launches fail
        cupy.cuda.driver.funcSetAttribute(fn.kernel.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    if segment.cluster in LOAD_BALANCED_CLUSTERS:
        cupy.cuda.driver.funcSetAttribute(fn.kernel.ptr, _CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                                          _LOAD_BALANCING)
    tiles = -(-B // segment.rows)
    i64 = numpy.int64
    # a cluster's blocks share each tile; the clusters walk the tiles
    clusters = min(tiles, MAX_GRID_BLOCKS // segment.cluster)
    launch = Launcher(fn, (clusters * segment.cluster,), (segment.threads,), smem,
                      (segment.meta, i64(B), i64(sx_f), i64(sx_b), i64(sy_f), i64(sy_b),
                       segment.in_map, segment.out_map, i64(tiles)), keep=(segment,))
    return KernelRun(launch, y_shape, dtype)
