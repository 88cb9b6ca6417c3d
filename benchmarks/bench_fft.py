"""Fused KS chains against cuFFT, per-factor application and dense GEMM, in one run.

    PYTHONPATH=$PWD python3 benchmarks/bench_fft.py --out benchmarks/results/fft_h200.json

1. DFT chains (kscupy.dft, complex64, batch-size-first rows, ``--elements`` = B·n complex
   values, n in ``--sizes``): the planned chain (``auto``: fused segments of merged radix-4
   stages, digit reversal folded), ``cupy.fft.fft`` along rows, the chain factor by factor
   with CuPy BMM and with the single-factor kernel, a dense DFT GEMM, and the bandwidth
   floor (read and write the batch once at the measured copy bandwidth).
2. Hadamard chains (float32, same layout): planned chain vs the floor and per-factor.
3. The paper's two-factor chains (App. E.8) at B = 25088, FP32, both layouts: fused
   (``backend="fused"``), ``auto``, per-factor (the better of the single-factor kernel and
   ``auto`` per factor) and the dense product (cuBLAS).

Every timed method is checked against an independent result (cupy.fft in complex128, the
dense matrix in float64) on a few rows. Writes JSON and prints a summary table.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

try:
    import cupy  # noqa: E402
except ImportError:     # --help works without CuPy; main() says what is missing
    cupy = None

import kscupy as ks  # noqa: E402
from kscupy import planner  # noqa: E402
from timing import measure_ceilings, run_metadata, time_fn  # noqa: E402

PAPER_CHAINS = (((1, 192, 48, 2), (2, 48, 192, 1)), ((1, 768, 192, 2), (6, 64, 64, 1)),
                ((1, 128, 128, 3), (6, 64, 256, 1)), ((1, 64, 256, 16), (64, 64, 64, 1)))
CHECK_ROWS = 64


def _rel(got, ref):
    return float(cupy.linalg.norm(got.astype(ref.dtype) - ref) / cupy.linalg.norm(ref))


def bench_dft(n, elements, ceilings, dense_limit):
    B = max(1, elements // n)
    F = ks.dft(n, dtype=numpy.complex64, xp=cupy)
    rng = cupy.random.default_rng(n)
    X = (rng.standard_normal((B, n), dtype=numpy.float32)
         + 1j * rng.standard_normal((B, n), dtype=numpy.float32)).astype(numpy.complex64)
    inputs = [X]
    plan = F.plan("bsf", numpy.complex64, B)
    row = {"n": n, "B": B, "plan": plan.describe().splitlines(), "launches": plan.launches,
           "floor_s": 2 * X.nbytes / ceilings["copy_bandwidth_Bps"]}
    methods = {
        "fused": lambda x: F.matmul(x, layout="bsf"),
        "cufft": lambda x: cupy.fft.fft(x, axis=-1),
        "per_factor_bmm": lambda x: F.matmul(x, layout="bsf", backend="bmm"),
        "per_factor_kernel": lambda x: F.matmul(x, layout="bsf", backend="kernel"),
    }
    if n * n * 8 <= dense_limit * 2**30:
        D = F.todense()
        methods["dense_gemm"] = lambda x: x @ D.T
    ref = cupy.fft.fft(X[:CHECK_ROWS].astype(numpy.complex128), axis=-1)
    for name, fn in methods.items():
        row[f"{name}_rel_err"] = _rel(fn(X)[:CHECK_ROWS], ref)
        row[f"{name}_s"] = time_fn(fn, inputs, max_repeat=30 if name != "dense_gemm" else 5)
    row["fused_over_cufft"] = row["fused_s"] / row["cufft_s"]
    row["bmm_over_fused"] = row["per_factor_bmm_s"] / row["fused_s"]
    row["fused_floor_fraction"] = row["floor_s"] / row["fused_s"]
    row["cufft_floor_fraction"] = row["floor_s"] / row["cufft_s"]
    return row


def bench_hadamard(n, elements, ceilings):
    B = max(1, elements // n)
    H = ks.hadamard(n, dtype=numpy.float32, xp=cupy)
    X = cupy.random.default_rng(n).standard_normal((B, n), dtype=numpy.float32)
    plan = H.plan("bsf", numpy.float32, B)
    row = {"n": n, "B": B, "plan": plan.describe().splitlines(), "launches": plan.launches,
           "floor_s": 2 * X.nbytes / ceilings["copy_bandwidth_Bps"]}
    Dd = H.todense().astype(numpy.float64)
    ref = X[:CHECK_ROWS].astype(numpy.float64) @ Dd.T
    for name, backend in (("fused", "auto"), ("per_factor_kernel", "kernel")):
        fn = lambda x, be=backend: H.matmul(x, layout="bsf", backend=be)  # noqa: E731
        row[f"{name}_rel_err"] = _rel(fn(X)[:CHECK_ROWS], ref)
        row[f"{name}_s"] = time_fn(fn, [X], max_repeat=30)
    row["fused_floor_fraction"] = row["floor_s"] / row["fused_s"]
    return row


def bench_two_factor(patterns, B, layout):
    C = ks.KSChain([ks.KSMatrix.random(p, dtype=numpy.float32, xp=cupy, seed=i)
                    for i, p in enumerate(patterns)])
    M, N = C.shape
    rng = cupy.random.default_rng(7)
    X = rng.standard_normal((N, B) if layout == "bsl" else (B, N), dtype=numpy.float32)
    D = C.todense()
    never = planner.plan(C, layout, numpy.float32, B, fuse="never")
    never_kernel = planner.plan(C, layout, numpy.float32, B, fuse="never", factor_backend="kernel")
    fused_plan = C.plan(layout, numpy.float32, B, "fused")
    methods = {
        "fused": lambda x: C.matmul(x, layout=layout, backend="fused"),
        "auto": lambda x: C.matmul(x, layout=layout),
        "per_factor_auto": lambda x: never(x, layout),
        "per_factor_kernel": lambda x: never_kernel(x, layout),
        "dense": (lambda x: D @ x) if layout == "bsl" else (lambda x: x @ D.T),
    }
    row = {"patterns": [list(p) for p in patterns], "B": B, "layout": layout,
           "fused_plan": fused_plan.describe().splitlines(),
           "auto_plan": C.plan(layout, numpy.float32, B).describe().splitlines()}
    D64 = D.astype(numpy.float64)
    Xc = (X[:, :CHECK_ROWS] if layout == "bsl" else X[:CHECK_ROWS].T).astype(numpy.float64)
    ref = D64 @ Xc
    for name, fn in methods.items():
        Y = fn(X)
        got = Y[:, :CHECK_ROWS] if layout == "bsl" else Y[:CHECK_ROWS].T
        row[f"{name}_rel_err"] = _rel(got, ref)
        row[f"{name}_s"] = time_fn(fn, [X])
    row["per_factor_s"] = min(row["per_factor_auto_s"], row["per_factor_kernel_s"])
    row["fused_speedup_vs_per_factor"] = row["per_factor_s"] / row["fused_s"]
    row["fused_speedup_vs_dense"] = row["dense_s"] / row["fused_s"]
    row["auto_speedup_vs_per_factor"] = row["per_factor_s"] / row["auto_s"]
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", default="256,1024,4096,16384")
    parser.add_argument("--elements", type=int, default=2**26)
    parser.add_argument("--hadamard", default="1024,4096")
    parser.add_argument("--batch", type=int, default=25088, help="two-factor chains")
    parser.add_argument("--dense-limit", type=float, default=2.0, help="GiB for the dense DFT")
    parser.add_argument("--parts", default="dft,hadamard,two_factor")
    args = parser.parse_args(argv)
    if cupy is None:
        sys.exit(f"{pathlib.Path(__file__).name} times GPU kernels and needs CuPy and a CUDA device")
    parts = args.parts.split(",")
    t0 = time.time()
    ceilings = measure_ceilings()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {**run_metadata(), "ceilings": ceilings, "elements": args.elements,
              "dft": [], "hadamard": [], "two_factor": []}

    def save():
        result["seconds"] = time.time() - t0
        out.write_text(json.dumps(result, indent=1))

    if "dft" in parts:
        for n in map(int, args.sizes.split(",")):
            result["dft"].append(bench_dft(n, args.elements, ceilings, args.dense_limit))
            save()
            cupy.get_default_memory_pool().free_all_blocks()
    if "hadamard" in parts:
        for n in map(int, args.hadamard.split(",")):
            result["hadamard"].append(bench_hadamard(n, args.elements, ceilings))
            save()
    if "two_factor" in parts:
        for patterns in PAPER_CHAINS:
            for layout in ("bsl", "bsf"):
                result["two_factor"].append(bench_two_factor(patterns, args.batch, layout))
                save()
                cupy.get_default_memory_pool().free_all_blocks()
    save()

    print(f"\n{result['gpu']}: copy {ceilings['copy_bandwidth_Bps'] / 1e12:.2f} TB/s, "
          f"{time.time() - t0:.0f} s")
    print(f"{'DFT n':>6s} {'B':>7s} {'fused ms':>9s} {'cufft ms':>9s} {'ratio':>6s} "
          f"{'bmm/fused':>9s} {'floor frac':>10s} {'err':>8s}  launches")
    for r in result["dft"]:
        print(f"{r['n']:6d} {r['B']:7d} {r['fused_s'] * 1e3:9.3f} {r['cufft_s'] * 1e3:9.3f} "
              f"{r['fused_over_cufft']:6.2f} {r['bmm_over_fused']:9.1f} "
              f"{r['fused_floor_fraction']:10.2f} {r['fused_rel_err']:8.1e}  {r['launches']}")
    for r in result["hadamard"]:
        print(f"Hadamard {r['n']}: fused {r['fused_s'] * 1e3:.3f} ms, floor fraction "
              f"{r['fused_floor_fraction']:.2f}, per-factor {r['per_factor_kernel_s'] * 1e3:.3f} ms")
    for r in result["two_factor"]:
        print(f"{str(r['patterns']):40s} {r['layout']}: fused {r['fused_s'] * 1e3:.3f} ms, "
              f"per-factor {r['per_factor_s'] * 1e3:.3f} ms, dense {r['dense_s'] * 1e3:.3f} ms, "
              f"fused x{r['fused_speedup_vs_per_factor']:.2f} vs per-factor, "
              f"x{r['fused_speedup_vs_dense']:.2f} vs dense; auto x{r['auto_speedup_vs_per_factor']:.2f}")


if __name__ == "__main__":
    main()
