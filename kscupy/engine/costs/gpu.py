"""The GPU cost model: the modelled time of every way kscupy runs a product on a GPU.

``auto`` ranks a factor's backends by these times (:mod:`kscupy.engine.decide`) and the
chain planner its segments (:mod:`kscupy.engine.planner`). A time is a ``max`` or sum of
three kinds of terms: bytes over bandwidth, flops over an efficiency times a peak rate,
and fixed costs (a launch, a chunk's latency). The rates are the device's own
(:class:`~kscupy.core.device.DeviceFacts`); the constants (efficiencies, fractions of the
bandwidth, fixed seconds) are fitted per device and live in data files
(:mod:`.constants`), so a fit carries over between GPUs only as far as their balance of
bandwidth, arithmetic and latency is alike. Where the tuner has run, its winners replace
the model (:mod:`kscupy.engine.tuning_cache`).

The model prices a kernel by its tile configuration (the copy order of the tensor-core
kernel, the reduction chunk, the tiles of a segment), which it reads from the kernel
families below it.
"""
from __future__ import annotations

import dataclasses

import numpy

from ...core import arrays
from ...core.device import DeviceFacts
from ...core.pattern import KSPattern
from ...core.problem import Problem
from ...kernels.ks_mma import ORDER_NAMES
from ...kernels.ks_skinny import MAX_NB
from . import constants

__all__ = ["kernel_seconds", "bmm_seconds", "group_gemm_variant", "gemm_peak", "tensor_peak",
           "dense_seconds", "mma_kernel_seconds", "mma_batch_last_seconds", "skinny_seconds",
           "direct_seconds", "block_dense_seconds", "segment_seconds", "pair_seconds",
           "rows_seconds", "gather_seconds", "transpose_seconds", "launch_seconds",
           "single_constants", "bsf_gradient_seconds"]


def _constants(device: DeviceFacts) -> constants.GpuConstants:
    return constants.gpu(device.name)


def launch_seconds(device: DeviceFacts) -> float:
    """One kernel launch with its Python dispatch."""
    return _constants(device).launch_seconds


def single_constants(device: DeviceFacts, key) -> tuple:
    """``(bytes_factor, efficiency, m0)`` of the single-factor model's ``key`` (an
    ``(algorithm, access or variant)`` pair) on ``device``."""
    return _constants(device).single[key]


def _flops_per_mac(dtype) -> int:
    return 8 if numpy.dtype(dtype).kind == "c" else 2


def tensor_peak(dtype, device: DeviceFacts) -> float:
    """Flop/s of the tensor-core kernel's arithmetic at default precision, in the units of
    :meth:`DeviceFacts.peak`: DMMA runs at twice the FP64 FMA rate (Ampere, Hopper); 3xTF32
    is counted against the FP32 FMA rate (its efficiency absorbs the ratio); float16 against
    ``half_tensor_ratio`` times it (mma.sync reaches about half the datasheet's dense FP16
    rate)."""
    dtype = numpy.dtype(dtype)
    if dtype in (numpy.float64, numpy.complex128):
        return 2 * device.flops64
    if arrays.is_half(dtype):
        return _constants(device).half_tensor_ratio * device.flops32
    return device.flops32


def _single_factor(problem: Problem, device: DeviceFacts, algorithm: str, peak=None,
                   variant=None, min_side=1, min_batch=1):
    """The single-factor model, keyed by ``(algorithm, variant or access)``::

        bytes_factor * bytes / bandwidth + flops * (m + m0) / (efficiency * peak * m)

    with ``bytes = itemsize * (B * (M + N) + nnz)`` and ``m = 2bc / (b + c)``, the harmonic
    mean of the block sides (small blocks run their products less efficiently), the
    arithmetic priced as if the block sides were at least ``min_side`` and the batch at
    least ``min_batch`` long."""
    a, b, c, d = problem.pattern
    M, N = problem.pattern.shape
    nnz, isz = problem.pattern.nnz, problem.itemsize
    factor, efficiency, m0 = single_constants(device, (algorithm, variant or problem.access))
    moved = isz * (problem.batch * (M + N) + nnz)
    b, c = max(b, min_side), max(c, min_side)
    m = 2.0 * b * c / (b + c)
    flops = _flops_per_mac(problem.dtype) * max(problem.batch, min_batch) * a * d * b * c
    return (factor * moved / device.bandwidth
            + flops * (m + m0) / (efficiency * (peak or device.peak(problem.dtype)) * m))


def kernel_seconds(problem: Problem, device: DeviceFacts, chunk: int) -> float:
    """The FMA kernel (``kernels_cu/ks_matmul.cu``) reducing in chunks of ``chunk``: at
    least ``chunk_seconds`` a chunk (a global-memory round trip, which sets the pace of thin
    batches with long reductions)."""
    C = _constants(device)
    chunks = -(-problem.pattern.c // chunk)
    return (max(_single_factor(problem, device, "kernel"), chunks * C.chunk_seconds)
            + C.launch_seconds)


def _dtype_suffix(dtype) -> str:
    """The model keys' suffix for a dtype whose tensor-core efficiency differs from
    float32's: ``_dmma`` for the FP64 tensor cores (float64, complex128), ``_hmma`` for
    float16 and bfloat16 (priced alike: the same MMA shape and rate), ``_complex`` for
    complex64."""
    dtype = numpy.dtype(dtype)
    return ("_dmma" if dtype in (numpy.float64, numpy.complex128)
            else "_hmma" if arrays.is_half(dtype)
            else "_complex" if dtype == numpy.complex64 else "")


def _gemm_suffix(dtype, precision: str) -> str:
    """A product's key suffix: ``_tf32`` where TF32 is allowed, else the dtype's."""
    return "_tf32" if precision == "tf32" else _dtype_suffix(dtype)


def mma_variant(problem: Problem, config, precision: str = "default") -> str:
    """The tensor-core kernel's key in the model: its copy order (``ks_mma.ORDER_NAMES``)
    with :func:`_gemm_suffix`."""
    return ORDER_NAMES[config.order] + _gemm_suffix(problem.dtype, precision)


def mma_kernel_seconds(problem: Problem, device: DeviceFacts, config,
                       precision: str = "default") -> float:
    """The tensor-core kernel (``kernels_cu/ks_mma.cu``) in tile configuration ``config``
    (its copy order and reduction chunk) at ``precision``.

    Its floor: a block walks its tile's reduction chunk by chunk (a cp.async round trip,
    then dependent MMAs), and the tiles run in waves of one block an SM, so at least
    ``waves x chunks x mma_chunk_seconds`` plus ``mma_fixed_seconds``. The waves count only
    below ``mma_exposed_batch``: wider batches give each block a run of tiles
    (``operands.TILE_RUN``) whose copy pipeline hides the chunks' latency."""
    C = _constants(device)
    a, b, c, d = problem.pattern
    chunks = -(-c // config.bk)
    tiles = -(-b // config.bm) * -(-problem.batch // config.bn) * -(-(a * d) // config.slots)
    waves = -(-tiles // device.sms) if problem.batch < C.mma_exposed_batch else 1
    compute = _single_factor(problem, device, "mma", peak=tensor_peak(problem.dtype, device),
                             variant=mma_variant(problem, config, precision))
    return (max(compute, waves * chunks * C.mma_chunk_seconds) + C.launch_seconds
            + C.mma_fixed_seconds)


def mma_batch_last_seconds(problem: Problem, device: DeviceFacts, config) -> float:
    """The tensor-core kernel in its batch order between two transposes
    (``ks_mma.prepare_batch_last``): the batch-size-last product in ``config``, plus reading
    and writing X and Y once more at the transpose's bandwidth."""
    M, N = problem.pattern.shape
    return (mma_kernel_seconds(problem.in_batch_last(), device, config)
            + transpose_seconds(N, problem.batch, problem.itemsize, device)
            + transpose_seconds(M, problem.batch, problem.itemsize, device))


def transpose_seconds(n: int, batch: int, itemsize: int, device: DeviceFacts) -> float:
    """The tiled transpose (``kernels/transpose.py``) of ``batch`` vectors of length ``n``:
    read and write once at its share of the bandwidth (by itemsize: narrow elements move
    less of it), plus a launch."""
    C = _constants(device)
    moved = 2 * itemsize * n * batch
    return moved / (C.transpose_bandwidth[itemsize] * device.bandwidth) + C.launch_seconds


def skinny_seconds(problem: Problem, device: DeviceFacts) -> float:
    """The small-batch kernel (``kernels_cu/ks_skinny.cu``): the slowest of streaming the
    weights, operand and result once at ``skinny_bandwidth`` of the device's (and the
    weights again, from L2, for every further pass of ``MAX_NB`` columns), of its X loads
    (one per multiply-add, from shared memory, L1 or L2, at ``skinny_x_rate`` times the
    bandwidth) and of its SIMT arithmetic (``skinny_efficiency`` of the FMA units), plus a
    launch."""
    C = _constants(device)
    M, N = problem.pattern.shape
    nnz, isz = problem.pattern.nnz, problem.itemsize
    moved = isz * (nnz + problem.batch * (M + N))
    rereads = isz * nnz * (-(-problem.batch // MAX_NB) - 1)   # later passes, from L2
    x_loads = isz * problem.batch * nnz
    flops = _flops_per_mac(problem.dtype) * problem.batch * nnz
    return max(moved / (C.skinny_bandwidth * device.bandwidth)
               + rereads / (C.l2_factor * device.bandwidth),
               x_loads / (C.skinny_x_rate * device.bandwidth),
               flops / (C.skinny_efficiency * device.peak(problem.dtype))) + C.launch_seconds


def direct_seconds(problem: Problem, device: DeviceFacts) -> float:
    """The direct kernel (``kernels_cu/ks_direct.cu``): every multiply-add loads its weight
    and operand element from L1 and L2, so its rate follows the bandwidth whatever the dtype
    (``direct_macs_per_byte``, by layout)."""
    C = _constants(device)
    macs = problem.batch * problem.pattern.nnz
    return macs / (C.direct_macs_per_byte[problem.layout] * device.bandwidth) + C.launch_seconds


def group_gemm_variant(problem: Problem, precision: str = "default") -> str:
    """bmm's key in the model: ``groups`` with :func:`_gemm_suffix`, ``groups_rows`` where
    the batch runs along the rows of each group's GEMM (batch-size-first with ``d == 1``:
    ``Y_g (B x b) = X_g (B x c) W_g^T`` in place, a GEMM cuBLAS runs at another efficiency
    than the ``b x B`` products of the other forms)."""
    rows = problem.layout == "bsf" and problem.pattern.d == 1
    return ("groups_rows" if rows else "groups") + _gemm_suffix(problem.dtype, precision)


def gemm_peak(dtype, precision: str, device: DeviceFacts) -> float:
    """The rate cuBLAS's GEMMs compute at, in the model's units: the FP32 FMA rate for
    float32 and complex64 (SIMT), the tensor cores for float64, complex128 and float16
    (:func:`tensor_peak`), ``tf32_tensor_ratio`` times the FP32 rate where TF32 is
    allowed."""
    if precision == "tf32":
        return _constants(device).tf32_tensor_ratio * device.flops32
    dtype = numpy.dtype(dtype)
    return device.peak(dtype) if dtype in (numpy.float32, numpy.complex64) \
        else tensor_peak(dtype, device)


def bmm_seconds(problem: Problem, device: DeviceFacts, precision: str = "default") -> float:
    """cuBLAS's strided-batched GEMM on the groups where they lie
    (``kernels/gemm.prepare_groups``): the single-factor model at the GEMM's rate, one call
    per value of the shorter of ``a`` and ``d`` in batch-size-last (the first with its
    Python dispatch, ``gemm_first_call_seconds``, each further one its launch); in
    batch-size-first with ``d > 1`` between two transposes; an operand whose rows are not
    contiguous (the batch in bsf, the features in bsl) copied first.

    Block sides below ``gemm_min_side`` are priced as that long (cuBLAS's tiles run mostly
    empty there), and batches below ``gemm_min_batch`` likewise (the GEMM's other side:
    its tiles span 64 to 256 of it)."""
    C = _constants(device)
    a, b, c, d = problem.pattern
    M, N = problem.pattern.shape
    isz = problem.itemsize
    seconds = _single_factor(problem, device, "bmm",
                             peak=gemm_peak(problem.dtype, precision, device),
                             variant=group_gemm_variant(problem, precision),
                             min_side=C.gemm_min_side, min_batch=C.gemm_min_batch)
    in_bsl = problem.layout == "bsl" or d > 1
    seconds += C.gemm_first_call_seconds + ((min(a, d) if in_bsl else 1) - 1) * C.gemm_call_seconds
    if problem.layout == "bsf" and d > 1:
        seconds += (transpose_seconds(N, problem.batch, isz, device)
                    + transpose_seconds(M, problem.batch, isz, device))
    if problem.batch > 1 and problem.batch_contiguous != (problem.layout == "bsl"):
        seconds += transpose_seconds(N, problem.batch, isz, device)
    return seconds


def block_dense_seconds(problem: Problem, device: DeviceFacts) -> float:
    """cuBLAS's GEMMs on the dense diagonal blocks (``Factor.block_dense``): bmm's model
    (:func:`bmm_seconds`) of the problem whose pattern is ``(a, b*d, c*d, 1)``, which is
    what runs: ``d`` times the arithmetic and the values, no transposes."""
    a, b, c, d = problem.pattern
    return bmm_seconds(dataclasses.replace(problem, pattern=KSPattern(a, b * d, c * d, 1)),
                       device)


def bsf_gradient_seconds(pattern, batch: int, dtype, device: DeviceFacts) -> dict:
    """cuBLAS's values' gradient in batch-size-first with ``d > 1`` (``kernels/gemm.py``),
    both ways: ``"transposed"``, ``X`` and ``G`` transposed and the groups' products, and
    ``"diagonal"``, each ``i``'s whole product (``d`` times the arithmetic, no pass over
    the operands); each the slower of its arithmetic at cuBLAS's rate and reading the
    operands, the first plus its transposes."""
    a, b, c, d = pattern
    dtype = numpy.dtype(dtype)
    isz = dtype.itemsize
    flops = _flops_per_mac(dtype) * a * b * c * d * batch
    rate = gemm_peak(dtype, "default", device)
    read = isz * batch * a * d * (b + c) / device.bandwidth
    transposes = (transpose_seconds(a * c * d, batch, isz, device)
                  + transpose_seconds(a * b * d, batch, isz, device))
    return {"transposed": transposes + max(flops / rate, read),
            "diagonal": max(d * flops / rate, read)}


def dense_seconds(problem: Problem, device: DeviceFacts, kept: bool,
                  precision: str = "default") -> float:
    """cuBLAS GEMM on the dense matrix at ``precision`` (``dense_efficiency`` of
    :func:`gemm_peak`, by key suffix); ``kept``: the dense matrix is already formed (else
    forming it, a zero fill and a scatter, is part of every call). The fixed costs
    (``dense_fixed_seconds``) include the host's part of a call."""
    C = _constants(device)
    M, N = problem.pattern.shape
    isz = problem.itemsize
    moved = isz * (problem.batch * (M + N) + M * N)
    if not kept:
        moved += 2 * isz * M * N + (16 + isz) * problem.pattern.nnz
    flops = _flops_per_mac(problem.dtype) * problem.batch * M * N
    return (moved / device.bandwidth
            + flops / (C.dense_efficiency[_gemm_suffix(problem.dtype, precision)]
                       * gemm_peak(problem.dtype, precision, device))
            + C.dense_fixed_seconds["kept" if kept else "formed"])


def segment_seconds(segment, batch: int, dtype, device: DeviceFacts) -> float:
    """A fused chain segment (:class:`kscupy.kernels.ks_chain.FusedSegment`): the slowest of
    DRAM traffic (the batch in and out once), weight traffic (every tile re-reads the
    weights its work items use, from L2 at ``l2_factor`` times the bandwidth) and SIMT
    arithmetic at ``fused_efficiency`` of peak, plus a launch."""
    C = _constants(device)
    isz = numpy.dtype(dtype).itemsize
    AS, DS, nin, nout, _, _ = segment.geometry
    dram = isz * batch * AS * DS * (nin + nout) / device.bandwidth
    tiles = -(-batch // segment.rows) * (AS * DS // segment.slots)
    weights = sum(segment.slots * (p.a // AS) * (p.d // DS) * p.b * p.c * (segment.rows // rw)
                  for p, (_, rw) in zip(segment.patterns, segment.work))
    l2 = isz * tiles * weights / (C.l2_factor * device.bandwidth)
    per_mac = _flops_per_mac(dtype)
    compute = 0.0
    for p, (tm, rw) in zip(segment.patterns, segment.work):
        # a work item loads tm weights and rw inputs per tm·rw multiply-adds: below about
        # 4 real FMAs per load the loads, not the FMA units, set the pace
        per_load = (per_mac // 2) * tm * rw / (tm + rw)
        efficiency = C.fused_efficiency * min(1.0, per_load / 4.0)
        compute += per_mac * batch * p.nnz / (efficiency * device.peak(dtype))
    return max(dram, l2, compute) + C.launch_seconds


def pair_seconds(segment, batch: int, device: DeviceFacts) -> float:
    """A fused pair of factors (:class:`kscupy.kernels.ks_pair.PairSegment`) on float32
    batches: waves of one block an SM, each block its products (the busiest warp issues a
    TF32 MMA every ``pair_mma_cycles`` cycles), its copies of X and Y at its share of the
    bandwidth and ``pair_block_seconds`` (its barriers, the weights' first loads from L2);
    at least the weights' reads from L2, every block reading both factors' (3xTF32: two
    parts each), plus a launch."""
    C = _constants(device)
    sms = device.sms
    clock = device.flops32 / (2 * 128 * sms)          # flops32 = 2 x 128 FMA lanes x SMs x clock
    blocks = -(-batch // segment.columns)
    rows = 16 * segment.row_tiles
    mmas, weights = 0, 0
    for p in segment.patterns:
        units = p.a * p.d * -(-p.b // rows)
        steps = -(-p.c // 8)
        mmas += -(-units // segment.warps) * steps * segment.row_tiles * (segment.columns // 8) * 3
        weights += 2 * units * steps * rows * 8
    n_in, m_out = segment.patterns[0].shape[1], segment.patterns[1].shape[0]
    copies = 4 * segment.columns * (n_in + m_out) / (device.bandwidth / sms)
    block = mmas * C.pair_mma_cycles / clock + copies + C.pair_block_seconds
    l2 = 4 * blocks * weights / (C.l2_factor * device.bandwidth)
    return max(-(-blocks // sms) * block, l2) + C.launch_seconds


def rows_seconds(segment, batch: int, dtype, device: DeviceFacts, layout: str) -> float:
    """A whole-vector segment (:class:`kscupy.kernels.ks_rows.RowSegment`) in ``layout``.

    Three terms: DRAM (the batch in and out once, at ``rows_bandwidth`` of the device's in
    batch-size-first; in batch-size-last, where a tile's runs of a feature are shorter
    than a 32-byte sector, at ``rows_thin_runs`` of it); the SM's load/store path, priced
    per FP32 flop (``rows_datapath`` bytes a flop: the path is the SMs', so its rate
    follows their number and clock, not the DRAM's), which carries the tile's round trips
    through shared memory and each factor's blocks once per work item (``r`` values an
    element, shared by the rows the item walks, weighted by ``rows_weight_words`` where
    neighbouring lanes read neighbouring 16-byte words of the interleaved copy and by
    ``rows_weight_lines`` where each lane reads its own block's lines; a computed stage
    reads its twiddles or nothing); and SIMT arithmetic at ``rows_efficiency`` of peak
    (``stage_flops`` multiply-adds an element for a computed stage, ``r`` for stored
    blocks). In batch-size-first the slowest of the three sets the pace. In batch-size-last
    the first pass reads X and the last writes Y, so DRAM and the load/store path (at
    ``rows_bsl_datapath``, each global access counted ``rows_bsl_global`` times) follow
    one another, ``rows_lone_block`` times longer where a tile leaves one block an SM
    (nothing overlaps its loads)."""
    C = _constants(device)
    isz = numpy.dtype(dtype).itemsize
    elements = batch * segment.n
    sectors = 1.0
    if layout == "bsl" and segment.rows * isz < 32 and batch > 1:
        sectors = C.rows_thin_runs                  # runs of a feature shorter than a sector
    passes = segment.pass_patterns()
    tile = 2 * isz * elements * segment.tile_round_trips
    weights, macs = 0.0, 0.0          # values read per element, multiply-adds per element
    vector = iter(segment.vector_blocks)
    for pats, stages, rg in passes:
        E = int(numpy.prod([p.b for p in pats]))
        low = min(p.d for p in pats)
        for p, (stage, _), words in zip(pats, stages, vector):
            if stage == 0:                                   # STORED
                per_value = C.rows_weight_words if words else C.rows_weight_lines
                weights += p.b * per_value / rg
                macs += p.b
            else:
                weights += (p.d // low) / E / rg if stage == 2 else 0.0
                macs += C.stage_flops[stage]
    compute = _flops_per_mac(dtype) * elements * macs / (C.rows_efficiency * device.peak(dtype))
    if layout == "bsl":
        dram = 2 * isz * elements / (sectors * device.bandwidth)
        datapath = (tile + isz * elements * weights + C.rows_bsl_global * 2 * isz * elements) \
            / (C.rows_bsl_datapath * device.flops32)
        lone = segment.blocks_per_sm(isz, device) == 1
        memory = (dram + datapath) * (C.rows_lone_block if lone else 1)
        return max(memory, compute) + C.launch_seconds
    dram = 2 * isz * elements / (C.rows_bandwidth * sectors * device.bandwidth)
    datapath = (tile + isz * elements * weights) / (C.rows_datapath * device.flops32)
    return max(dram, datapath, compute) + C.launch_seconds


def gather_seconds(n: int, batch: int, dtype, device: DeviceFacts) -> float:
    """A permutation pass over ``batch`` vectors of length ``n``: read and write once."""
    return (2.0 * numpy.dtype(dtype).itemsize * n * batch / device.bandwidth
            + launch_seconds(device))
