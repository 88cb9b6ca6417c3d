"""The grid suite: kscupy's fused kernel and ``auto`` against the baselines on the paper's
pattern grid, and the sweep suite: the same across batch sizes.

    python -m kscupy bench --suite grid --out patterns.json

For each pattern of a stratified sample of the paper's grid (Appendix E, Figure 7: 627
patterns at B = 25088; ``--all`` for every one), in both layouts, FP32, times (median of
CUDA-event timings, inputs rotated when they fit in L2, nothing timed on zeros):
``kernel``, ``auto``, CuPy ``bmm`` (permute / cuBLAS batched GEMM / permute), cuBLAS
``dense`` (where the dense matrix takes at most ``--dense-limit`` GiB and the product at most
``--dense-flops`` FLOP) and cupyx ``csr`` (where B*nnz is at most ``--csr-limit``). The roofline floor of each product,
``max(bytes / bandwidth, flops / peak)`` with ``bytes = 4 (B N + B M + nnz)`` and
``flops = 2 B nnz``, uses a device-to-device copy and a cuBLAS SGEMM measured in the same
run. The sweep suite times a few patterns across batch sizes. Writes JSON and prints a
summary of medians.
"""
from __future__ import annotations

import itertools
import json
import pathlib
import time

import numpy

try:
    import cupy
except ImportError:     # --help works without CuPy; main() says what is missing
    cupy = None

from .. import KSMatrix, KSPattern
from ..core import reference
from ..core.problem import problem_of
from ..engine import decide
from .grid import PAPER_BATCH, paper_grid, stratified_sample
from .timing import l2_bytes, measure_ceilings, progress, run_metadata, time_fn
from ..arguments import UsageError, choice_list, fraction, nonnegative_int, positive_float
from ..operators.base import LAYOUTS

SWEEP_BATCHES = (1, 16, 256, 4096, 25_088, 262_144)
SWEEP_PATTERNS = ((1, 768, 192, 2), (6, 64, 64, 1), (16, 64, 64, 4), (1, 256, 1024, 4),
                  (64, 48, 48, 16))


def roofline_seconds(pattern, B, ceilings, itemsize=4):
    p = KSPattern(*pattern)
    M, N = p.shape
    bytes_moved = itemsize * (B * N + B * M + p.nnz)
    flops = 2 * B * p.nnz
    return max(bytes_moved / ceilings["copy_bandwidth_Bps"], flops / ceilings["sgemm_flops"])


def bench_pattern(pattern, B, layout, args, ceilings):
    """Times of every method for one pattern, batch size and layout (seconds; None = skipped)."""
    K = KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    M, N = K.shape
    shape = (N, B) if layout == "bsl" else (B, N)
    x_bytes = 4 * N * B
    copies = int(min(8, max(1, -(-2 * l2_bytes() // max(x_bytes, 1)))))
    rng = cupy.random.default_rng(1)
    inputs = [rng.standard_normal(shape, dtype=numpy.float32) for _ in range(copies)]
    problem = problem_of(K.factor, inputs[0], layout)
    row = {"pattern": list(pattern), "B": B, "layout": layout, "h": KSPattern(*pattern).h,
           "nnz": K.nnz, "M": M, "N": N, "floor_s": roofline_seconds(pattern, B, ceilings),
           "auto_choice": decide.choose(problem).backend,
           "kernel_config": list(decide.configuration(problem, "kernel").as_tuple())}
    blocks = K.blocks
    row["kernel_s"] = time_fn(lambda x: K.matmul(x, layout=layout, backend="kernel"), inputs)
    row["auto_s"] = time_fn(lambda x: K.matmul(x, layout=layout, backend="auto"), inputs)
    row["bmm_s"] = time_fn(lambda x: reference.bmm(blocks, x, layout, cupy), inputs)
    row["dense_s"] = row["csr_s"] = None
    if 4 * M * N <= args.dense_limit * 2**30 and 2 * B * M * N <= args.dense_flops:
        D = K.todense()
        row["dense_s"] = time_fn(lambda x: reference.dense(D, x, layout, cupy), inputs)
    if B * K.nnz <= args.csr_limit:
        S = K.tocsr()
        row["csr_s"] = time_fn(lambda x: reference.sparse(S, x, layout, cupy), inputs,
                               max_repeat=10)
    # correctness of what was timed, against the float64 definition on a few batch columns
    cols = slice(0, min(B, 64))
    X = inputs[0]
    X64 = (X[:, cols] if layout == "bsl" else X[cols].T).astype(numpy.float64)
    w = K.values.astype(numpy.float64)
    a, b, c, d = pattern
    ref = cupy.einsum("iklj,iljn->ikjn", w, X64.reshape(a, c, d, -1)).reshape(M, -1)
    for method in ("kernel", "auto"):
        Y = K.matmul(X, layout=layout, backend=method)
        got = Y[:, cols] if layout == "bsl" else Y[cols].T
        row[f"{method}_rel_err"] = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))
    best = min(t for t in (row["bmm_s"], row["dense_s"]) if t is not None)
    row["best_baseline_s"] = best
    row["auto_speedup"] = best / row["auto_s"]
    row["kernel_speedup"] = best / row["kernel_s"]
    row["auto_floor_fraction"] = row["floor_s"] / row["auto_s"]
    row["kernel_floor_fraction"] = row["floor_s"] / row["kernel_s"]
    return row


def bench_and_release(*args):
    """bench_pattern, then hand the pattern's buffers back to the device."""
    row = bench_pattern(*args)
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def summarize(rows):
    out = {}
    for layout in ("bsl", "bsf"):
        rs = [r for r in rows if r["layout"] == layout]
        if not rs:
            continue
        auto = numpy.array([r["auto_speedup"] for r in rs])
        kern = numpy.array([r["kernel_speedup"] for r in rs])
        out[layout] = {
            "patterns": len(rs),
            "auto_speedup_median": float(numpy.median(auto)),
            "auto_speedup_min": float(auto.min()),
            "auto_below_0.95": int((auto < 0.95).sum()),
            "kernel_speedup_median": float(numpy.median(kern)),
            "kernel_wins": int((kern > 1).sum()),
            "auto_floor_fraction_median": float(numpy.median([r["auto_floor_fraction"] for r in rs])),
            "kernel_floor_fraction_median": float(numpy.median([r["kernel_floor_fraction"] for r in rs])),
            "bmm_floor_fraction_median": float(numpy.median([r["floor_s"] / r["bmm_s"] for r in rs])),
            "max_rel_err": float(max(max(r["kernel_rel_err"], r["auto_rel_err"]) for r in rs)),
        }
    return out


def add_arguments(parser):
    group = parser.add_argument_group("grid and sweep suites")
    group.add_argument("--count", type=nonnegative_int, default=60,
                       help="patterns in the stratified sample (0: none, e.g. the gradients "
                            "suite's fitting rows alone)")
    group.add_argument("--all", action="store_true", help="every pattern of the grid")
    group.add_argument("--shift", type=fraction, default=0.0,
                       help="shift of the stratified sample, in [0, 1) (0.5: disjoint from "
                            "the default)")
    group.add_argument("--layouts", type=choice_list(LAYOUTS), default=",".join(LAYOUTS),
                       help="comma-separated (also of the engine suite)")
    group.add_argument("--dense-limit", type=positive_float, default=4.0, help="GiB")
    group.add_argument("--dense-flops", type=positive_float, default=6e12, help="max FLOP for dense")
    group.add_argument("--csr-limit", type=positive_float, default=5e9, help="max B*nnz for CSR")
    group.add_argument("--io-limit", type=positive_float, default=12.0,
                       help="GiB: skip sweep cases whose X and Y take more")


def sweep_cases(layouts, io_limit):
    """The sweep's (pattern, batch, layout) cases whose X and Y take at most ``io_limit``
    GiB."""
    return [(p, B, lay) for p, B, lay in itertools.product(SWEEP_PATTERNS, SWEEP_BATCHES, layouts)
            if 4 * B * sum(KSPattern(*p).shape) <= io_limit * 2**30]


def check_arguments(args, parts):
    """UsageError where the arguments leave a part of ``parts`` nothing to run."""
    if "sweep" in parts and not sweep_cases(args.layouts, args.io_limit):
        smallest = min(4 * sum(KSPattern(*p).shape) for p in SWEEP_PATTERNS) * min(SWEEP_BATCHES)
        raise UsageError(f"--io-limit {args.io_limit:g}: the batch sweep would run nothing (its "
                         f"smallest case takes {smallest / 2**30:.2g} GiB)")


def main(args, parts=("grid", "sweep")):
    """The grid at B = 25088 and/or the batch-size sweep (``parts``), written to
    ``args.out``."""
    grid = paper_grid()
    sample = grid if args.all else stratified_sample(grid, args.count, args.shift)
    layouts = args.layouts
    t0 = time.time()
    ceilings = measure_ceilings()
    print(f"ceilings: copy {ceilings['copy_bandwidth_Bps'] / 1e12:.2f} TB/s, "
          f"SGEMM {ceilings['sgemm_flops'] / 1e12:.1f} TFLOP/s", flush=True)
    rows, sweep = [], []
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if "grid" in parts:
        for pattern, layout in progress(list(itertools.product(sample, layouts)), desc="patterns"):
            rows.append(bench_and_release(pattern, PAPER_BATCH, layout, args, ceilings))
            out.write_text(json.dumps({"partial": True, "ceilings": ceilings, "rows": rows}))
    if "sweep" in parts:
        for pattern, B, layout in progress(sweep_cases(layouts, args.io_limit),
                                           desc="batch sweep"):
            sweep.append(bench_and_release(pattern, B, layout, args, ceilings))
            out.write_text(json.dumps({"partial": True, "ceilings": ceilings, "rows": rows,
                                       "batch_sweep": sweep}))
    result = {
        **run_metadata(),
        "grid_size": len(grid), "sample_size": len(sample) if rows else 0,
        "batch": PAPER_BATCH, "dtype": "float32", "ceilings": ceilings,
        "summary": summarize(rows), "rows": rows, "batch_sweep": sweep,
        "seconds": time.time() - t0,
    }
    small = [r for r in sweep if r["B"] <= 64]
    if small:
        result["summary"]["small_batch"] = {
            "cases": len(small), "auto_speedup_min": float(min(r["auto_speedup"] for r in small)),
            "auto_speedup_median": float(numpy.median([r["auto_speedup"] for r in small]))}
    out.write_text(json.dumps(result, indent=1))
    print(f"\n{result['gpu']}, {len(sample) if rows else 0} patterns, B={PAPER_BATCH}, FP32, "
          f"{time.time() - t0:.0f} s")
    print(f"{'layout':6s} {'auto/best med':>13s} {'min':>6s} {'<0.95':>6s} {'kernel med':>10s} "
          f"{'floor frac auto':>15s} {'kernel':>7s} {'bmm':>6s}")
    for layout, s in result["summary"].items():
        if layout == "small_batch":
            continue
        print(f"{layout:6s} {s['auto_speedup_median']:13.2f} {s['auto_speedup_min']:6.2f} "
              f"{s['auto_below_0.95']:6d} {s['kernel_speedup_median']:10.2f} "
              f"{s['auto_floor_fraction_median']:15.2f} {s['kernel_floor_fraction_median']:7.2f} "
              f"{s['bmm_floor_fraction_median']:6.2f}")
    if small:
        print(f"B<=64: auto/best min {result['summary']['small_batch']['auto_speedup_min']:.2f}, "
              f"median {result['summary']['small_batch']['auto_speedup_median']:.2f}")
