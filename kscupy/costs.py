"""The cost model: device rates and every modelled time that guides ``auto`` and the planner.

All constants of the model live here: the GPU's (below) and the CPU's (``cpu_seconds``, at
the end). Times are ``max``/sums of three kinds of terms:
bytes over bandwidth, flops over an efficiency times the peak rate, and fixed launch costs.
The constants were fitted to heuristic-configuration times on samples of the paper's grid
(``benchmarks/fit_costs.py`` on the engine runs of ``benchmarks/bench_patterns.py``), some on
an H200 and some on an H100: each constant's comment names its run. Where one GPU needs a
constant of its own, ``_SINGLE_BY_DEVICE`` holds it under a word of the device's name. The model's rates are in
units of the device's own (:class:`DeviceRates`), so a fit carries over between GPUs only as
far as their balance of bandwidth, arithmetic and latency is alike; the autotuner
(:mod:`kscupy.tuning`) replaces the model where it has run.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy

from .problem import Problem

__all__ = ["DeviceRates", "device_rates", "LAUNCH_SECONDS", "kernel_seconds", "bmm_seconds",
           "group_gemm_variant", "gemm_peak",
           "dense_seconds", "mma_kernel_seconds", "mma_batch_last_seconds", "skinny_seconds",
           "segment_seconds", "rows_seconds", "gather_seconds", "transpose_seconds",
           "KERNEL_MARGIN", "RELAYOUT_MARGIN", "cpu_terms", "cpu_seconds"]

#: One kernel launch with its Python dispatch, measured at B = 1 on an H200.
LAUNCH_SECONDS = 10e-6

# Single-factor algorithms:
#     bytes_factor * bytes / bandwidth + flops * (m + m0) / (efficiency * peak * m) + fixed
# with bytes = itemsize * (B * (M + N) + nnz) and m = 2bc/(b+c) (harmonic mean of the block
# sides: small blocks run GEMMs less efficiently). Keyed by (algorithm, access), access as
# in Problem.access, or by a variant of the algorithm (below).
_SINGLE = {  # (bytes_factor, efficiency, m0)
    ("kernel", "bsl"): (1.515, 0.424, 40.1), ("kernel", "bsf"): (0.835, 0.206, 25.8),
    # cuBLAS's strided-batched GEMM on the groups where they lie (bmm_seconds), keyed by
    # dtype and precision (group_gemm_variant); efficiency against the rate cuBLAS computes
    # at (gemm_peak: an estimate for float16 and TF32, hence efficiencies above 1). Fitted
    # with benchmarks/fit_costs.py --bmm on results/bmm_groups.json (an H100, 120 rows each:
    # RMS log error 0.11, 0.10, 0.21, 0.20, 0.17; the worst rows are small blocks with long
    # batches, e.g. (1, 48, 48, 6) float64, where cuBLAS runs up to 3.6x slower than modelled;
    # groups_tf32 is fitted on float32 and serves complex64 too)
    ("bmm", "groups"): (0.652, 0.872, 28.3), ("bmm", "groups_complex"): (0.510, 0.865, 19.2),
    ("bmm", "groups_dmma"): (0.844, 1.290, 43.5), ("bmm", "groups_hmma"): (1.072, 3.152, 40.1),
    ("bmm", "groups_tf32"): (1.103, 2.547, 68.0),
    # the tensor-core kernel, keyed by its copy order (ks_mma.heuristic_config) instead of
    # the access; efficiency against tensor_peak (benchmarks/fit_costs.py). Batch refitted
    # on the float32 rows of an H100 run at 3ae360a (RMS log error 0.12): with the H200's
    # constants (1.153, 0.908, 11.9) auto sent 29 of 60 batch-size-last patterns to bmm, up
    # to 1.4x slower than the kernel there. Group refitted on the float32 rows of the H100
    # run at 35ceb72 (64-column warp pieces; 117 rows, RMS log error 0.12)
    ("mma", "batch"): (0.661, 0.864, 7.4), ("mma", "ingroup"): (2.235, 1.050, 35.0),
    ("mma", "group"): (0.860, 0.654, 11.4),
    # ... on the FP64 tensor cores (DMMA m16n8k8: float64, complex128), batch and group
    # refitted on the float64 rows of the same H100 run (RMS log error 0.11 / 0.14). Every
    # in-group key (bsf, d = 1) is fitted on 16 random d = 1 patterns per dtype timed on the
    # H200 at 70d76f6 (benchmarks/probe_ingroup.py,
    # results/ingroup_h200.json; the engine grid has one such row): the guesses before
    # priced the kernel up to 1.75x too high, and auto sent (128, 128, 128, 1) to
    # kernel_bsl (4.4 ms) instead of kernel (2.8 ms)
    ("mma", "batch_dmma"): (0.734, 0.678, 8.8), ("mma", "group_dmma"): (1.002, 0.383, 14.0),
    ("mma", "ingroup_dmma"): (0.746, 0.606, 4.9),
    # ... float16 (m16n8k16 products, efficiency against _HALF_TENSOR_RATIO x the FP32 rate),
    # fitted on engine_f16.json (batch and group refitted on 37e38f1's kernel; the in-group
    # order as above)
    ("mma", "batch_hmma"): (1.297, 0.511, 15.8), ("mma", "group_hmma"): (1.813, 0.165, 59.9),
    ("mma", "ingroup_hmma"): (3.131, 0.675, 166.3),
    # ... complex64 (four real 3xTF32 products a complex one), batch fitted on
    # engine_c64.json at 07451d0 (H200; the H100's own: _SINGLE_BY_DEVICE), group refitted on
    # the complex64 rows of an H100 run at 803b87e (RMS log error 0.13). The in-group order
    # keeps _SINGLE's float32 constants (below; one engine row, not probed), also on the
    # H100, whose own float32 ones (_SINGLE_BY_DEVICE) were not tried on complex64
    ("mma", "batch_complex"): (1.103, 0.979, 12.7), ("mma", "group_complex"): (1.361, 0.810, 20.2),
}
_SINGLE[("mma", "ingroup_complex")] = _SINGLE[("mma", "ingroup")]
# bmm with the batch along each group's GEMM rows (batch-size-first, d = 1; group_gemm_variant):
# bmm_groups.json has one such row per key, too few to fit them apart, so they take the keys
# above, except on the H100 and the H200 (_SINGLE_BY_DEVICE: float32, fitted on
# probe_ingroup.py's rows)
_SINGLE.update({("bmm", "groups_rows" + suffix): _SINGLE[("bmm", "groups" + suffix)]
                for suffix in ("", "_complex", "_dmma", "_hmma", "_tf32")})
# ... one TF32 product per term (kernel_tf32, float32 and complex64 alike), fitted on the
# rows of engine_tf32.json (H200, 07451d0; no in-group row: _SINGLE's float32 in-group
# constants, on every device)
_SINGLE[("mma", "batch_tf32")] = (0.802, 1.557, 10.0)     # 60 rows, RMS log error 0.11
_SINGLE[("mma", "group_tf32")] = (1.274, 0.844, 16.9)     # 59 rows, 0.17
_SINGLE[("mma", "ingroup_tf32")] = _SINGLE[("mma", "ingroup")]
# Constants of one GPU where it differs from the value above: keyed by a word of the
# device's name (DeviceRates.name), they replace _SINGLE's for that device
# (single_constants). A device named in neither prices with _SINGLE. The word "H100" also
# matches the PCIe and NVL H100s, and "H200" the NVL H200 and the GH200, whose SM counts and
# bandwidths differ from the SXM cards these were fitted on (the model's rates are the
# device's own, which absorbs part of it).
_SINGLE_BY_DEVICE = {
    # complex64 in the batch order, fitted on engine_c64.json at c39f28c (60 rows, RMS log
    # error 0.06, 58 of 60 kernel-vs-bmm rankings right): with the H200's constants (in
    # _SINGLE) auto sent small-block rows to bmm, up to 1.3x slower than the kernel (auto
    # median 1.52 where the kernel's is 1.57; replayed with these, 1.57). Not in _SINGLE
    # because they move DFT(16384)'s batch-size-last plan on H200-like rates away from the
    # plan measured fastest there (tests/test_planner.py). On the H100 they move it too,
    # from the transpose and whole-vector plan to a fused segment and three products:
    # neither was timed on the H100 (B = 4096; not a benchmark row). No H200 entry for it:
    # the earlier H200 fits of the keys since refitted on the H100 cannot be checked against
    # the H200's engine runs, whose bmm was the permuting one (replayed, they send most
    # float32 bsl rows to bmm)
    # float32 in batch-size-first with d = 1, the kernel's in-group order and bmm's GEMMs
    # with the batch along their rows, fitted on 16 random d = 1 patterns timed on an H100
    # at 566f323 (probe_ingroup.py, results/ingroup_h100.json; RMS log error 0.12 and
    # 0.11): with the H200's in-group constants and the shared bmm ones (which priced bmm
    # there 0.84x its time, geometric mean) auto sent 13 of the 16 to bmm, which the kernel
    # beat on 11 of them by up to 1.45x, and the first factor of every Monarch and paper
    # chain in batch-size-first with them (chains.json: up to 27 us lost a chain). bmm's
    # refitted on those 16 and the 3 float32 d = 1 rows of engine.json at 35ceb72 (19 rows,
    # RMS log error 0.28; cuBLAS took 64 us for (1, 48, 48, 1), which the 16-row fit priced
    # at 21.65, a hair under the kernel's 21.83 where the kernel measured 24: replayed,
    # auto's pick there was bmm at 0.55 of the best baseline; this fit prices it at 22.69,
    # still far from 64, so the kernel is picked by under a microsecond; the 16 picks are
    # as before)
    "H100": {("mma", "batch_complex"): (0.773, 1.052, 9.5),
             ("mma", "ingroup"): (1.251, 0.932, 17.5),
             ("bmm", "groups_rows"): (1.029, 0.864, 65.6)},
    # The same two float32 keys on the H200, fitted on probe_ingroup.py's 16 patterns and the
    # six d = 1 factors of bench_fft.py's Monarch and paper chains timed there at 9f0c88f
    # (results/ingroup_h200_f32.json, 22 rows; RMS log error 0.14 and 0.17). With the shared
    # constants auto sent 8 of the 22 to bmm, which the kernel beat by 1.15-1.34x, among
    # them the first factor of the paper's (1, 192, 48, 2)·(2, 48, 192, 1) in batch-size-first
    # (a bench_fft.py run on an H200 at 9f0c88f, not kept: auto 0.85x the per-factor
    # baseline; 1.10x with these, chains_h200.json); replayed with these as auto decides
    # (close calls timed), every pick is the fastest of the three measured, but two rows
    # whose rival is dense, which the file did not time (tests/test_tuning.py).
    "H200": {("mma", "ingroup"): (1.354, 0.855, 19.2),
             ("bmm", "groups_rows"): (0.849, 0.737, 40.6)},
}
#: A chain is planned in the other layout between two transposes (``planner.Relayout``)
#: only when the model finds that faster by this factor: the model's error on a whole
#: per-factor chain is of this order, and the plans it wins by more (whole-vector segments
#: of long vectors in batch-size-last: 2x and more) do not depend on it.
RELAYOUT_MARGIN = 0.75
#: ``auto`` picks the FMA kernel over other backends only when predicted faster by this factor.
#: In BSL the model is unbiased (median predicted/measured 1.02) and any margin above 1 gave
#: away the kernel's wins; in BSF a wrong pick of the kernel costs up to 2x.
KERNEL_MARGIN = {"bsl": 1.0, "bsf": 1.5}
# cuBLAS GEMM on the dense matrix: fraction of gemm_peak, keyed by _gemm_suffix, fitted to
# the base_dense times of the engine runs (float32, float64, complex64 on an H200: RMS log
# error 0.07, 0.05, 0.02; float16 and TF32 on an H100: 0.11, 0.17; the estimate 0.75 for all
# had priced float16 and TF32 about 2x too high)
_DENSE_EFFICIENCY = {"": 0.76, "_dmma": 0.94, "_complex": 0.83, "_hmma": 1.76, "_tf32": 1.56}
_HALF_TENSOR_RATIO = 8            # float16 tensor-core flop/s over the FP32 FMA rate (estimate)
_TF32_TENSOR_RATIO = 4            # TF32 tensor-core flop/s over the FP32 FMA rate (estimate;
                                  # the datasheet's dense rate is about 7.4x on Hopper)
# bmm's cuBLAS calls (kernels/gemm.prepare_groups makes one per value of the shorter of a
# and d in batch-size-last): the first with its Python dispatch (as LAUNCH_SECONDS, plus
# setting cuBLAS's stream and pointer mode), each further one its launch on the GPU, the
# host's part overlapping earlier calls (estimates)
_GEMM_FIRST_CALL_SECONDS = 15e-6
_GEMM_CALL_SECONDS = 4e-6
# ... priced as if each block side were at least this long: the fit's data has b, c >= 48,
# and below that cuBLAS's tiles run mostly empty ((64, 16, 16, 1) float32 at B = 25088 took
# 1.4x the tensor-core kernel's time on an H200, results/bmm_bsl_d1_h200.json)
_GEMM_MIN_SIDE = 32
# ... and batches as if at least this wide (the GEMM's other side; cuBLAS's tiles span 64
# to 256 of it). The fit's batches are 8192 and more; at B = 1 and 64 (bench_latency.py)
# bmm was not measured since it stopped permuting, and the tensor-core and small-batch
# kernels were measured faster than its previous form there
_GEMM_MIN_BATCH = 128
# Fixed costs of one call, host time included: cuBLAS through cupy.matmul takes 17-25 us
# (H200, bench_latency.py); forming a dense matrix that is not kept takes ~15 small launches.
_DENSE_FIXED_SECONDS = {"kept": 20e-6, "formed": 300e-6}
# The direct kernel (what auto runs while a tuned kernel compiles in the background): its
# multiply-adds per byte of DRAM bandwidth, by layout, and the longest call for which auto
# runs it rather than wait for the compile (a tuned instantiation takes NVRTC 0.2 to 1.5 s).
# Each multiply-add loads its operands from L1/L2, so the rate hardly depends on the dtype:
# on an H200, 0.8-0.9e12 multiply-adds/s in bsl and 0.18-0.24e12 in bsf (float32, float64,
# complex64; patterns (1, 1024, 1024, 1) and (4, 256, 256, 4) at B = 4096).
_DIRECT_MACS_PER_BYTE = {"bsl": 0.18, "bsf": 0.04}
DIRECT_MAX_SECONDS = 0.1
# The single-factor kernel walks the reduction in chunks one after the other: at least this
# long per chunk (a global-memory round trip), whatever the size. It dominates thin batches
# with long reductions (B = 1, c = 1024: 128 chunks, 0.17 ms measured).
_CHUNK_SECONDS = 1.2e-6

# The tensor-core kernel's floor: a block walks its tile's reduction chunk by chunk (a
# cp.async round trip, then dependent MMAs), and the tiles run in waves of one block per SM:
# at least waves x chunks x _MMA_CHUNK_SECONDS, plus _MMA_FIXED_SECONDS beyond the launch.
# Fitted to the kernel's times at B = 1 and 64 on an H200 (bench_latency.py, latency.json:
# 80 rows, RMS log error 0.19; 3 us a chunk without waves or fixed part gave 0.34 and priced
# (1, 1024, 256, 64) at B = 1, 512 tiles, at 34 us where it took 87). The waves count only
# below _MMA_EXPOSED_BATCH: wider batches give each block a run of tiles (operands.TILE_RUN)
# whose copy pipeline hides the chunks' latency (counted there, the floor priced the group
# order 1.3-2x above its measured times at B = 25088)
_MMA_CHUNK_SECONDS = 1.7e-6
_MMA_FIXED_SECONDS = 5.7e-6
_MMA_EXPOSED_BATCH = 256

# The tiled transpose (kernels_cu/transpose.cu): bytes read and written per second, as a
# fraction of the device's bandwidth (DeviceRates.bandwidth, the datasheet's), by itemsize.
# An H200 (4.8 TB/s) moved 2.1-2.6 TB/s of float16, 3.1-3.45 of float32, 3.4-3.65 of 8-byte
# and 3.7-4.0 of 16-byte elements (operands of 8192 x 4096 to 25088 x 16384).
_TRANSPOSE_BANDWIDTH = {2: 0.5, 4: 0.68, 8: 0.73, 16: 0.8}

# The small-batch kernel (kernels_cu/ks_skinny.cu) streams the weights once, at up to
# _SKINNY_BANDWIDTH of the device's. Its SIMT loop loads one X element per multiply-add
# (from shared memory, L1 or L2, at _SKINNY_X_RATE times the device bandwidth: 7-10 TB/s
# measured at B = 64 on the H200), which with the FMA units (_SKINNY_EFFICIENCY of their
# peak) sets the pace once the batch is wide enough.
_SKINNY_BANDWIDTH = 0.8
_SKINNY_EFFICIENCY = 0.25
_SKINNY_X_RATE = 2.0

# Fused chain segments (kernels_cu/ks_chain.cu): weights are re-read from L2 by every tile
# (L2 bandwidth = _L2_FACTOR x DRAM), the SIMT core reaches _FUSED_EFFICIENCY of peak:
# 0.1 matches its DFT and Hadamard times on an H200 within 10% (fft_h200.json; 0.3, the
# earlier estimate, predicted a third of them).
_L2_FACTOR = 2.0
_FUSED_EFFICIENCY = 0.1

# Whole-vector segments (kernels_cu/ks_rows.cu): the batch in and out at _ROWS_BANDWIDTH of
# the device's (times the fraction of each 32-byte sector a batch-size-last tile row uses);
# the SM's load/store path carries two shared-memory round trips of the tile per pass, the
# staging of the tile, and each factor's blocks once per work item (r values per element,
# shared by the rows the item walks: weighted by _ROWS_WEIGHT_WORDS where neighbouring lanes
# read neighbouring 16-byte words of the interleaved copy, Factor.interleaved_words, and by
# _ROWS_WEIGHT_LINES where each lane reads its own block's cache lines), at _ROWS_DATAPATH
# bytes per flop of the FP32 rate (DeviceRates.flops32); the FMA units at _ROWS_EFFICIENCY
# of peak. The load/store path is the SMs', so its rate follows their number and clock,
# not the DRAM's: written as a multiple of the bandwidth (2.5 here, 3.25 below), the H200's
# fit priced the H100's segments (the same SMs, 0.7x the bandwidth) 1.1-1.5x too slow and
# the planner sent butterfly(256) float32 bsl to two tensor-core products (0.45 ms, against
# 0.31 for the segment); per flop, the 23 DFT, Hadamard and butterfly rows of the H100's
# chains.json at 55b1ecc whose plans stay are predicted within 0.83-1.23x of their times,
# but DFT(16384) at 0.68x. The H200's predictions are unchanged (the value is the same rate
# on its flops32). Fitted by hand to
# ten DFT, Hadamard and butterfly probes at 2^26 elements on an H200 (within about 30%,
# benchmarks/results/chains.json); _ROWS_WEIGHT_WORDS to the 24 segments of random
# butterflies (n = 256, 1024, 4096, float32 and complex64, both layouts, merged to radix 4
# and not) of a probe on an H200 (RMS error of log time 0.10; 0.59 with _ROWS_WEIGHT_LINES).
_ROWS_BANDWIDTH = 0.8
# ... in batch-size-last, with tiles of so few vectors that each feature's run is shorter
# than a 32-byte sector (n >= 4096 float32): the share of _ROWS_BANDWIDTH reached. Hadamard
# 4096 and 8192 (runs of 16 and 8 bytes) and the float32 butterfly 4096 reached 0.09-0.10
# of the floor on the H200 (chains.json at f4ef67e), not the sector share (0.5, 0.25)
_ROWS_THIN_RUNS = 0.125
_ROWS_DATAPATH = 0.18          # the H200's 2.5 x 4.814e12 B/s over its 6.691e13 flop/s
_ROWS_WEIGHT_LINES = 3.3
_ROWS_WEIGHT_WORDS = 0.5
_ROWS_EFFICIENCY = 0.6
# Batch-size-last whole-vector segments (the first pass reads X, the last writes Y, lanes
# along the batch rows): the batch in and out at the full DRAM bandwidth, then, not
# overlapped, the load/store path at _ROWS_BSL_DATAPATH bytes per flop (as above) carrying the tile's round
# trips, the blocks (as above) and each global access _ROWS_BSL_GLOBAL times; a segment whose
# tile leaves one block per SM (nothing to overlap its loads with another block's passes)
# takes _ROWS_LONE_BLOCK times as long. Fitted to 11 segments on an H200 (random butterflies
# float32 and complex64 n = 256 ... 4096, Hadamard 256 ... 4096, DFT 1024 and 4096, 2^26
# elements; RMS error of log time 0.09, where the batch-size-first form gave 0.67).
_ROWS_BSL_DATAPATH = 0.234     # the H200's 3.25 x 4.814e12 B/s over its 6.691e13 flop/s
_ROWS_BSL_GLOBAL = 1.5
_ROWS_LONE_BLOCK = 1.5
# Fused pairs of factors on the tensor cores (kernels_cu/ks_pair.cu): one block an SM (the
# tile takes most of its shared memory), whose copy of X, products and store of Y follow one
# another. The products: a warp issues one TF32 MMA about every _PAIR_MMA_CYCLES cycles with
# up to 8 independent ones in flight (the tensor-core micro-benchmark, docs/performance.md),
# and the busiest warp sets the pace; the copies take the block's share of the DRAM
# bandwidth; _PAIR_BLOCK_SECONDS of latency a block besides (its barriers, the weights'
# first loads from L2). Fitted by hand to three pairs on an H100 (B = 25088: Monarch(512)
# and Monarch(1024) in place, predicted 0.97x and 0.92x of their times, and (1, 192, 48, 2)
# after (2, 48, 192, 1), 1.2x: its 16 MMAs in flight issue faster than the model says).
_PAIR_MMA_CYCLES = 23
_PAIR_BLOCK_SECONDS = 12e-6
#: The planner takes a pair where its price is below this share of the alternatives': the
#: per-factor model overprices short batches (Monarch(1024) at 1536 columns: 0.045 ms
#: modelled, 0.032 measured) and a close call went to a pair 1.1-1.4x slower (H100, three
#: chains at 1024 ... 25088 columns: with the margin, 13 of 15 picks right, the two others
#: within 0.93x).
PAIR_MARGIN = 0.85

# Computed radix-2 stages (kernels/ks_rows.stage_of): a twiddled stage reads d/DLO twiddles
# per work item, neighbouring lanes neighbouring values (one line per use, not
# _ROWS_WEIGHT_LINES), and does a complex multiply and two adds per pair of elements
# (_STAGE_FLOPS multiply-adds' worth per element, against r for stored blocks); a Hadamard
# stage reads nothing and adds. Estimates from the operation counts, not yet fitted.
_STAGE_FLOPS = {1: 0.25, 2: 0.65}    # by stage (HADAMARD_STAGE, TWIDDLED_STAGE)


@dataclasses.dataclass(frozen=True)
class DeviceRates:
    """Peak rates of a device (datasheet-level estimates from its attributes)."""
    bandwidth: float      # bytes/s, device memory
    flops32: float        # float32 FMA rate x 2, flop/s
    flops64: float
    name: str
    cuda_runtime: int
    memory: int = 0       # bytes of device memory
    sms: int = 132        # multiprocessors (the default: H100 SXM and H200, for rates
                          # recorded before this field)

    def peak(self, dtype) -> float:
        """Peak flop/s for arithmetic in ``dtype``'s precision."""
        return self.flops64 if numpy.dtype(dtype) in (numpy.float64, numpy.complex128) \
            else self.flops32

    def tensor_peak(self, dtype) -> float:
        """Flop/s of the tensor-core kernel's arithmetic at default precision, in the same
        units as :meth:`peak`: DMMA runs at twice the FP64 FMA rate (Ampere, Hopper);
        3xTF32 is counted against the FP32 FMA rate (its efficiency absorbs the ratio); float16
        against _HALF_TENSOR_RATIO times it (the datasheet's dense FP16 rate is about 15x the
        FP32 FMA rate on Hopper, of which mma.sync reaches about half)."""
        if numpy.dtype(dtype) in (numpy.float64, numpy.complex128):
            return 2 * self.flops64
        if numpy.dtype(dtype) == numpy.float16:
            return _HALF_TENSOR_RATIO * self.flops32
        return self.flops32


def device_rates() -> DeviceRates:
    """Peak rates of the current CUDA device."""
    import cupy
    return _device_rates(cupy.cuda.Device().id)


def _attribute(rt, attr, dev):
    try:
        return rt.deviceGetAttribute(attr, dev)
    except Exception:
        return 0


@functools.lru_cache(maxsize=None)
def _device_rates(dev) -> DeviceRates:
    import cupy
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(dev)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sms, major, minor = props["multiProcessorCount"], props["major"], props["minor"]
    clock_khz = _attribute(rt, 13, dev) or 1_755_000            # cudaDevAttrClockRate
    mem_khz = _attribute(rt, 36, dev)                             # cudaDevAttrMemoryClockRate
    bus_bits = _attribute(rt, 37, dev)                            # cudaDevAttrGlobalMemoryBusWidth
    bandwidth = 2 * mem_khz * 1e3 * bus_bits / 8 if mem_khz and bus_bits else 3.0e12
    fp32_per_sm = 128 if (major, minor) not in ((8, 0), (7, 0)) and major >= 8 else 64
    flops32 = 2 * fp32_per_sm * sms * clock_khz * 1e3
    flops64 = flops32 / 2 if major in (7, 9) or (major, minor) == (8, 0) else flops32 / 32
    return DeviceRates(bandwidth, flops32, flops64, name, rt.runtimeGetVersion(),
                       props["totalGlobalMem"], sms)


def constants_table(rates: DeviceRates, key) -> dict:
    """The table whose entry ``key`` prices ``rates``' device: the device's own in
    _SINGLE_BY_DEVICE where it has one for ``key``, else _SINGLE."""
    for word, table in _SINGLE_BY_DEVICE.items():
        if word in rates.name and key in table:
            return table
    return _SINGLE


def single_constants(rates: DeviceRates, key) -> tuple:
    """``(bytes_factor, efficiency, m0)`` of the single-factor model's ``key`` (an
    ``(algorithm, access or variant)`` pair) on ``rates``' device."""
    return constants_table(rates, key)[key]


def _flops_per_mac(dtype) -> int:
    return 8 if numpy.dtype(dtype).kind == "c" else 2


def _single_factor(problem: Problem, rates: DeviceRates, algorithm: str, bytes_factor=None,
                   peak=None, variant=None, min_side=1, min_batch=1):
    """The single-factor model (see _SINGLE), its arithmetic priced as if the block sides
    were at least ``min_side`` and the batch at least ``min_batch`` long."""
    a, b, c, d = problem.pattern
    M, N = problem.pattern.shape
    nnz, isz = problem.pattern.nnz, problem.itemsize
    factor, efficiency, m0 = single_constants(rates, (algorithm, variant or problem.access))
    moved = isz * (problem.batch * (M + N) + nnz)
    b, c = max(b, min_side), max(c, min_side)
    m = 2.0 * b * c / (b + c)
    flops = _flops_per_mac(problem.dtype) * max(problem.batch, min_batch) * a * d * b * c
    return ((bytes_factor or factor) * moved / rates.bandwidth
            + flops * (m + m0) / (efficiency * (peak or rates.peak(problem.dtype)) * m))


def kernel_seconds(problem: Problem, rates: DeviceRates, chunk: int) -> float:
    """The single-factor kernel (``kernels_cu/ks_matmul.cu``) reducing in chunks of ``chunk``."""
    chunks = -(-problem.pattern.c // chunk)
    return max(_single_factor(problem, rates, "kernel"), chunks * _CHUNK_SECONDS) + LAUNCH_SECONDS


def _dtype_suffix(dtype) -> str:
    """The model keys' suffix for a dtype whose tensor-core efficiency differs from
    float32's: ``_dmma`` for the FP64 tensor cores (float64, complex128), ``_hmma`` for
    float16, ``_complex`` for complex64."""
    dtype = numpy.dtype(dtype)
    return ("_dmma" if dtype in (numpy.float64, numpy.complex128)
            else "_hmma" if dtype == numpy.float16
            else "_complex" if dtype == numpy.complex64 else "")


def mma_variant(problem: Problem, config, precision: str = "default") -> str:
    """The tensor-core kernel's key in the model: its copy order (``ks_mma.ORDER_NAMES``)
    with :func:`_gemm_suffix` (the dtype's, or ``_tf32`` for one TF32 product)."""
    from .kernels.ks_mma import ORDER_NAMES
    return ORDER_NAMES[config.order] + _gemm_suffix(problem.dtype, precision)


def mma_kernel_seconds(problem: Problem, rates: DeviceRates, config,
                       precision: str = "default") -> float:
    """The tensor-core kernel (``kernels_cu/ks_mma.cu``) in tile configuration ``config``
    (:class:`~kscupy.kernels.ks_mma.MmaConfig`: its copy order and reduction chunk) at
    ``precision``."""
    a, b, c, d = problem.pattern
    chunks = -(-c // config.bk)
    tiles = -(-b // config.bm) * -(-problem.batch // config.bn) * -(-(a * d) // config.slots)
    waves = -(-tiles // rates.sms) if problem.batch < _MMA_EXPOSED_BATCH else 1
    compute = _single_factor(problem, rates, "mma", peak=rates.tensor_peak(problem.dtype),
                             variant=mma_variant(problem, config, precision))
    return (max(compute, waves * chunks * _MMA_CHUNK_SECONDS) + LAUNCH_SECONDS
            + _MMA_FIXED_SECONDS)


def mma_batch_last_seconds(problem: Problem, rates: DeviceRates, config) -> float:
    """The tensor-core kernel in its batch order between two transposes
    (``ks_mma.prepare_batch_last``): the batch-size-last product in ``config``, plus reading
    and writing X and Y once more at the transpose's bandwidth."""
    M, N = problem.pattern.shape
    return (mma_kernel_seconds(problem.in_batch_last(), rates, config)
            + transpose_seconds(N, problem.batch, problem.itemsize, rates)
            + transpose_seconds(M, problem.batch, problem.itemsize, rates))


def transpose_seconds(n: int, batch: int, itemsize: int, rates: DeviceRates) -> float:
    """The tiled transpose (``kernels/transpose.py``) of ``batch`` vectors of length ``n``:
    read and write once at its measured share of the bandwidth, plus a launch."""
    moved = 2 * itemsize * n * batch
    return moved / (_TRANSPOSE_BANDWIDTH[itemsize] * rates.bandwidth) + LAUNCH_SECONDS


def skinny_seconds(problem: Problem, rates: DeviceRates) -> float:
    """The small-batch kernel (``kernels_cu/ks_skinny.cu``): the slowest of streaming the
    weights, operand and result once (and the weights again, from L2, for every further
    pass of ``MAX_NB`` columns), of its X loads (one per multiply-add) and of its SIMT
    arithmetic, plus a launch."""
    from .kernels.ks_skinny import MAX_NB
    M, N = problem.pattern.shape
    nnz, isz = problem.pattern.nnz, problem.itemsize
    moved = isz * (nnz + problem.batch * (M + N))
    rereads = isz * nnz * (-(-problem.batch // MAX_NB) - 1)   # later passes, from L2
    x_loads = isz * problem.batch * nnz
    flops = _flops_per_mac(problem.dtype) * problem.batch * nnz
    return max(moved / (_SKINNY_BANDWIDTH * rates.bandwidth)
               + rereads / (_L2_FACTOR * rates.bandwidth),
               x_loads / (_SKINNY_X_RATE * rates.bandwidth),
               flops / (_SKINNY_EFFICIENCY * rates.peak(problem.dtype))) + LAUNCH_SECONDS


def direct_seconds(problem: Problem, rates: DeviceRates) -> float:
    """The direct kernel (``kernels_cu/ks_direct.cu``): every multiply-add loads its weight
    and operand element (from L1 and L2), at a rate proportional to the bandwidth."""
    macs = problem.batch * problem.pattern.nnz
    return macs / (_DIRECT_MACS_PER_BYTE[problem.layout] * rates.bandwidth) + LAUNCH_SECONDS


def _gemm_suffix(dtype, precision: str) -> str:
    """A cuBLAS product's key suffix: ``_tf32`` where TF32 is allowed, else the dtype's."""
    return "_tf32" if precision == "tf32" else _dtype_suffix(dtype)


def group_gemm_variant(problem: Problem, precision: str = "default") -> str:
    """bmm's key in the model: ``groups`` with :func:`_gemm_suffix`, ``groups_rows`` where
    the batch runs along the rows of each group's GEMM (batch-size-first with ``d == 1``:
    ``Y_g (B x b) = X_g (B x c) W_g^T`` in place, a GEMM cuBLAS runs at another efficiency
    than the ``b x B`` products of the other forms)."""
    rows = problem.layout == "bsf" and problem.pattern.d == 1
    return ("groups_rows" if rows else "groups") + _gemm_suffix(problem.dtype, precision)


def gemm_peak(dtype, precision: str, rates: DeviceRates) -> float:
    """The rate cuBLAS's GEMMs compute at, in the model's units: the FP32 FMA rate for
    float32 and complex64 (SIMT), the tensor cores for float64 and complex128 (DMMA) and
    float16 (:meth:`DeviceRates.tensor_peak`), :data:`_TF32_TENSOR_RATIO` times the FP32
    rate where TF32 is allowed."""
    if precision == "tf32":
        return _TF32_TENSOR_RATIO * rates.flops32
    dtype = numpy.dtype(dtype)
    return rates.peak(dtype) if dtype in (numpy.float32, numpy.complex64) \
        else rates.tensor_peak(dtype)


def bmm_seconds(problem: Problem, rates: DeviceRates, precision: str = "default") -> float:
    """cuBLAS's strided-batched GEMM on the groups where they lie
    (``kernels/gemm.prepare_groups``): the single-factor model at the GEMM's rate (block
    sides below _GEMM_MIN_SIDE and batches below _GEMM_MIN_BATCH priced as that long), one call
    per value of the shorter of ``a`` and ``d`` in batch-size-last; in batch-size-first with
    ``d > 1`` between two transposes; an operand whose rows are not contiguous (the batch
    in bsf, the features in bsl) copied first."""
    a, b, c, d = problem.pattern
    M, N = problem.pattern.shape
    isz = problem.itemsize
    seconds = _single_factor(problem, rates, "bmm",
                             peak=gemm_peak(problem.dtype, precision, rates),
                             variant=group_gemm_variant(problem, precision),
                             min_side=_GEMM_MIN_SIDE, min_batch=_GEMM_MIN_BATCH)
    in_bsl = problem.layout == "bsl" or d > 1
    seconds += _GEMM_FIRST_CALL_SECONDS + ((min(a, d) if in_bsl else 1) - 1) * _GEMM_CALL_SECONDS
    if problem.layout == "bsf" and d > 1:
        seconds += (transpose_seconds(N, problem.batch, isz, rates)
                    + transpose_seconds(M, problem.batch, isz, rates))
    if problem.batch > 1 and problem.batch_contiguous != (problem.layout == "bsl"):
        seconds += transpose_seconds(N, problem.batch, isz, rates)
    return seconds


def dense_seconds(problem: Problem, rates: DeviceRates, kept: bool,
                  precision: str = "default") -> float:
    """cuBLAS GEMM on the dense matrix at ``precision``; ``kept``: the dense matrix is
    already formed (else forming it, a zero fill and a scatter, is part of every call)."""
    M, N = problem.pattern.shape
    isz = problem.itemsize
    moved = isz * (problem.batch * (M + N) + M * N)
    if not kept:
        moved += 2 * isz * M * N + (16 + isz) * problem.pattern.nnz
    flops = _flops_per_mac(problem.dtype) * problem.batch * M * N
    return (moved / rates.bandwidth
            + flops / (_DENSE_EFFICIENCY[_gemm_suffix(problem.dtype, precision)]
                       * gemm_peak(problem.dtype, precision, rates))
            + _DENSE_FIXED_SECONDS["kept" if kept else "formed"])


def segment_seconds(segment, batch: int, dtype, rates: DeviceRates) -> float:
    """A fused chain segment (:class:`kscupy.kernels.ks_chain.FusedSegment`): the slowest of
    DRAM traffic (the batch in and out once), weight traffic (every tile re-reads the
    weights its work items use, from L2) and SIMT arithmetic, plus a launch."""
    isz = numpy.dtype(dtype).itemsize
    AS, DS, nin, nout, _, _ = segment.geometry
    dram = isz * batch * AS * DS * (nin + nout) / rates.bandwidth
    tiles = -(-batch // segment.rows) * (AS * DS // segment.slots)
    weights = sum(segment.slots * (p.a // AS) * (p.d // DS) * p.b * p.c * (segment.rows // rw)
                  for p, (_, rw) in zip(segment.patterns, segment.work))
    l2 = isz * tiles * weights / (_L2_FACTOR * rates.bandwidth)
    per_mac = _flops_per_mac(dtype)
    compute = 0.0
    for p, (tm, rw) in zip(segment.patterns, segment.work):
        # a work item loads tm weights and rw inputs per tm·rw multiply-adds: below about
        # 4 real FMAs per load the loads, not the FMA units, set the pace
        per_load = (per_mac // 2) * tm * rw / (tm + rw)
        efficiency = _FUSED_EFFICIENCY * min(1.0, per_load / 4.0)
        compute += per_mac * batch * p.nnz / (efficiency * rates.peak(dtype))
    return max(dram, l2, compute) + LAUNCH_SECONDS


def pair_seconds(segment, batch: int, rates: DeviceRates) -> float:
    """A fused pair of factors (:class:`kscupy.kernels.ks_pair.PairSegment`) on float32
    batches: waves of one block an SM, each block its products (the busiest warp's MMAs at
    _PAIR_MMA_CYCLES each), its copies of X and Y at its share of the bandwidth and
    _PAIR_BLOCK_SECONDS; at least the weights' reads from L2, every block reading both
    factors' (3xTF32: two parts each), plus a launch."""
    sms = rates.sms
    clock = rates.flops32 / (2 * 128 * sms)          # flops32 = 2 x 128 FMA lanes x SMs x clock
    blocks = -(-batch // segment.columns)
    rows = 16 * segment.row_tiles
    mmas, weights = 0, 0
    for p in segment.patterns:
        units = p.a * p.d * -(-p.b // rows)
        steps = -(-p.c // 8)
        mmas += -(-units // segment.warps) * steps * segment.row_tiles * (segment.columns // 8) * 3
        weights += 2 * units * steps * rows * 8
    n_in, m_out = segment.patterns[0].shape[1], segment.patterns[1].shape[0]
    copies = 4 * segment.columns * (n_in + m_out) / (rates.bandwidth / sms)
    block = mmas * _PAIR_MMA_CYCLES / clock + copies + _PAIR_BLOCK_SECONDS
    l2 = 4 * blocks * weights / (_L2_FACTOR * rates.bandwidth)
    return max(-(-blocks // sms) * block, l2) + LAUNCH_SECONDS


def rows_seconds(segment, batch: int, dtype, rates: DeviceRates, layout: str) -> float:
    """A whole-vector segment (:class:`kscupy.kernels.ks_rows.RowSegment`) in ``layout``:
    DRAM traffic (the batch in and out once), the SM's load/store path (the tile's round
    trips through shared memory, the blocks per work item; in batch-size-last the global
    accesses too) and SIMT arithmetic, plus a launch: the slowest of the three in
    batch-size-first, DRAM and the load/store path one after the other in batch-size-last
    (see _ROWS_BSL_DATAPATH)."""
    isz = numpy.dtype(dtype).itemsize
    elements = batch * segment.n
    sectors = 1.0
    if layout == "bsl" and segment.rows * isz < 32 and batch > 1:
        sectors = _ROWS_THIN_RUNS                  # runs of a feature shorter than a sector
    passes = segment.pass_patterns()
    tile = 2 * isz * elements * segment.tile_round_trips
    weights, macs = 0.0, 0.0          # values read per element, multiply-adds per element
    vector = iter(segment.vector_blocks)
    for pats, stages, rg in passes:
        E = int(numpy.prod([p.b for p in pats]))
        low = min(p.d for p in pats)
        for p, (stage, _), words in zip(pats, stages, vector):
            if stage == 0:                                   # STORED
                per_value = _ROWS_WEIGHT_WORDS if words else _ROWS_WEIGHT_LINES
                weights += p.b * per_value / rg
                macs += p.b
            else:
                weights += (p.d // low) / E / rg if stage == 2 else 0.0
                macs += _STAGE_FLOPS[stage]
    compute = _flops_per_mac(dtype) * elements * macs / (_ROWS_EFFICIENCY * rates.peak(dtype))
    if layout == "bsl":
        dram = 2 * isz * elements / (sectors * rates.bandwidth)
        datapath = (tile + isz * elements * weights + _ROWS_BSL_GLOBAL * 2 * isz * elements) \
            / (_ROWS_BSL_DATAPATH * rates.flops32)
        memory = (dram + datapath) * (_ROWS_LONE_BLOCK if segment.blocks_per_sm(isz) == 1 else 1)
        return max(memory, compute) + LAUNCH_SECONDS
    dram = 2 * isz * elements / (_ROWS_BANDWIDTH * sectors * rates.bandwidth)
    datapath = (tile + isz * elements * weights) / (_ROWS_DATAPATH * rates.flops32)
    return max(dram, datapath, compute) + LAUNCH_SECONDS


def gather_seconds(n: int, batch: int, dtype, rates: DeviceRates) -> float:
    """A permutation pass over ``batch`` vectors of length ``n``: read and write once."""
    return 2.0 * numpy.dtype(dtype).itemsize * n * batch / rates.bandwidth + LAUNCH_SECONDS


# -- the CPU: NumPy and SciPy ---------------------------------------------------------------
# ``auto`` on NumPy picks the fastest of bmm, einsum and sparse by a linear model of each
# one's time, ``seconds = sum of constant x count`` over the terms of ``cpu_terms``, with one
# set of constants per algorithm and regime: "vector" (a batch of one: every algorithm runs
# matrix-vector code), "bsl" or "bsf". The terms:
#   call           one product: Python, NumPy/SciPy dispatch, allocations
#   group          a*d groups: bmm calls one small GEMM per group
#   nonzero        nnz: SciPy's CSR loop calls one axpy per non-zero; einsum's loops
#   row            B*a*d block rows: loops whose inner run is one block row (bsf copies)
#   element_in/out B*N, B*M: per-element loop costs
#   byte           itemsize*B*(M + N): the operand and result through the memory system
#   memory         the same bytes again, weighted from 0 (fits in 2 MiB of cache) to 1
#                  (64 MiB and more, beyond the L3 cache; linear in log2 of the size)
#   mac_<dtype>    B*nnz multiply-adds at the rate of each dtype
#   copy, copy_memory            bmm: its two permutation passes, when they are not views
#   transpose, transpose_memory  sparse in bsf: SciPy copies the (B, N) operand to (N, B)
# float16 is priced as float32 (every CPU backend computes it through float32). Fitted by
# benchmarks/fit_cpu_costs.py to benchmarks/results/cpu_train.json: best-of-N times of every
# algorithm on 1590 single-factor products (bench_cpu_auto.py's samples at --shift 0.25 and
# 0.75, each run twice, and large batches at --shift 0.125) on the development machine, a
# 2-core AMD EPYC virtual machine (the CI machine's class). RMS error of log time about 0.2.
_CPU_MEMORY_LOG2 = (21, 26)       # the memory term's ramp, in log2 bytes
_CPU = {  # (algorithm, regime) -> {term: seconds per count}
    ("bmm", "vector"): {"call": 6.03e-06, "copy": 5.35e-11, "element_out": 8.88e-10,
        "group": 2.08e-08, "mac_complex128": 9.85e-11, "mac_complex64": 4.57e-11,
        "mac_float64": 4.66e-11, "nonzero": 3.77e-11},
    ("bmm", "bsl"): {"byte": 1.61e-11, "call": 6.79e-06, "copy": 2.39e-11,
        "copy_memory": 8.24e-11, "group": 6.53e-08, "mac_complex128": 7.36e-11,
        "mac_complex64": 3.71e-11, "mac_float32": 7.11e-12, "mac_float64": 1.89e-11,
        "memory": 3.35e-11, "nonzero": 2.99e-10},
    ("bmm", "bsf"): {"call": 5.99e-06, "copy": 4.66e-11, "copy_memory": 2.16e-10,
        "element_in": 1.17e-10, "element_out": 4.13e-10, "group": 3.09e-08,
        "mac_complex128": 6.21e-11, "mac_complex64": 3.05e-11, "mac_float32": 4.01e-12,
        "mac_float64": 1.47e-11, "nonzero": 3.45e-10, "row": 4.46e-09},
    ("einsum", "vector"): {"call": 6.22e-06, "element_in": 4.23e-10, "element_out": 3.19e-09,
        "group": 2.97e-08, "mac_complex128": 5.49e-10, "mac_complex64": 5.73e-10,
        "mac_float64": 1.21e-10, "nonzero": 2.17e-10},
    ("einsum", "bsl"): {"call": 7.28e-06, "element_out": 1.61e-10, "group": 1.04e-07,
        "mac_complex128": 1.53e-09, "mac_complex64": 1.48e-09, "mac_float32": 8.32e-11,
        "mac_float64": 1.77e-10, "memory": 7.38e-11, "nonzero": 3.81e-09},
    ("einsum", "bsf"): {"call": 5.19e-06, "element_out": 2.64e-09, "mac_complex128": 8.05e-10,
        "mac_complex64": 8.01e-10, "mac_float32": 2.91e-10, "mac_float64": 3.45e-10,
        "memory": 1.36e-10, "row": 4.46e-08},
    ("sparse", "vector"): {"call": 6.08e-06, "group": 6.83e-10, "mac_complex128": 3.88e-10,
        "mac_complex64": 5.17e-10, "nonzero": 3.94e-10},
    ("sparse", "bsl"): {"call": 5.79e-06, "mac_complex128": 7.95e-10,
        "mac_complex64": 4.02e-10, "mac_float32": 7.68e-11, "mac_float64": 1.55e-10,
        "memory": 4.23e-11, "nonzero": 1.29e-09},
    ("sparse", "bsf"): {"call": 4.99e-06, "element_in": 8.94e-10, "mac_complex128": 7.57e-10,
        "mac_complex64": 3.97e-10, "mac_float32": 9.59e-11, "mac_float64": 1.7e-10,
        "nonzero": 8.65e-10, "transpose_memory": 7.39e-10},
}


def _cpu_regime(problem: Problem) -> str:
    return "vector" if problem.batch == 1 else problem.layout


def _bmm_copies(problem: Problem) -> bool:
    """Whether bmm's two permutations (``_reference.bmm``) copy: in bsl (and for a batch of
    one) they are views when ``d == 1``, in bsf when there is a single group."""
    a, _, _, d = problem.pattern
    if problem.layout == "bsl" or problem.batch == 1:
        return d > 1
    return a * d > 1


def cpu_terms(problem: Problem, algorithm: str) -> dict:
    """The counts of the CPU model's terms (see the table above) for ``algorithm``
    ("bmm", "einsum" or "sparse") applied to ``problem`` with NumPy/SciPy."""
    a, _, _, d = problem.pattern
    M, N = problem.pattern.shape
    B, groups, nnz = problem.batch, a * d, problem.pattern.nnz
    single = numpy.dtype(numpy.float32)
    dtype = single if problem.dtype == numpy.float16 else numpy.dtype(problem.dtype)
    size = dtype.itemsize * B * (M + N)
    low, high = _CPU_MEMORY_LOG2
    beyond_cache = min(1.0, max(0.0, (math.log2(size) - low) / (high - low)))
    terms = {"call": 1.0, "group": groups, "nonzero": nnz, "row": B * groups,
             "element_in": B * N, "element_out": B * M, "byte": size,
             "memory": size * beyond_cache, f"mac_{dtype.name}": B * nnz}
    if algorithm == "bmm" and _bmm_copies(problem):
        terms.update(copy=size, copy_memory=size * beyond_cache)
    if algorithm == "sparse" and problem.layout == "bsf" and B > 1 \
            and not problem.batch_contiguous:
        moved = dtype.itemsize * B * N
        terms.update(transpose=moved, transpose_memory=moved * beyond_cache)
    return terms


def cpu_seconds(problem: Problem, algorithm: str) -> float:
    """Modelled seconds of one product of ``problem`` by ``algorithm`` ("bmm", "einsum" or
    "sparse") with NumPy/SciPy on the CPU: the sum of ``_CPU``'s constants times the counts
    of ``cpu_terms``."""
    constants = _CPU[(algorithm, _cpu_regime(problem))]
    return sum(constants.get(term, 0.0) * count
               for term, count in cpu_terms(problem, algorithm).items())
