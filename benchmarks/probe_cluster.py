"""Development probe for whole-vector segments (``ks_rows``): time each chain's plan, its row
segment with one block a tile, and in batch-size-last the same segment spread over
thread-block clusters (``ks_rows_cluster``), and check them.

    PYTHONPATH=$PWD python3 benchmarks/probe_cluster.py
    PYTHONPATH=$PWD python3 benchmarks/probe_cluster.py --chains "hadamard:4096:float32" \
        --runs 128,64 --elements 67108864
    PYTHONPATH=$PWD python3 benchmarks/probe_cluster.py --layouts bsf,bsl --baseline main
    PYTHONPATH=$PWD python3 benchmarks/probe_cluster.py --chains "hadamard:8192:float32" --knobs

A chain is ``kind:n:dtype`` (kind ``hadamard``, ``butterfly`` or ``dft``; butterflies seeded
by n, as bench_fft.py builds them). For each it takes the one row segment of its plan in
each of ``--layouts`` (or, if the plan holds none, the segment of all its factors), rebuilds
it with one block a tile and with the clusters the configuration gives: in batch-size-last
for runs of each ``--runs`` byte count (``ks_rows.BSL_RUN``), in batch-size-first for each
largest cluster allowed (2 to 16), and times each prepared run
against the copy bandwidth measured here (floor = bytes of X and Y over it), checking each
against the float64 product of the dense chain on the first 64 batch columns.
``--baseline REV`` times each segment again with ks_rows.cu as of a git revision (or a
file), in the same process (kernel_ab.py): an A/B test of a kernel change. ``--knobs``
times the plan's segment instead with each other block size and blocks-per-SM allowance
(threads and ``min_blocks``, the kernel's launch bounds) that fit an SM, at its rows and
half of them. Used to set
ks_rows.py's cluster choice, block sizes and the cost model's rows_seconds; the issue's benchmark is
bench_fft.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import numpy

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kscupy.bench.timing import cupy, measure_ceilings, time_fn  # noqa: E402

import kscupy as ks  # noqa: E402
from kscupy.bench.chains import transform_chain  # noqa: E402
from kernel_ab import file_as_of, kernel_file  # noqa: E402
from kscupy.core import device  # noqa: E402
from kscupy.engine.costs import gpu as gpu_costs  # noqa: E402
from kscupy.kernels import ks_rows  # noqa: E402

CHAINS = ("hadamard:1024:float32;hadamard:4096:float32;hadamard:8192:float32;"
          "butterfly:1024:float32;butterfly:4096:float32;"
          "butterfly:1024:complex64;butterfly:4096:complex64")


def make_chain(spec):
    kind, n, dtype = spec.split(":")
    return transform_chain(kind, int(n), numpy.dtype(dtype), cupy)


def plan_segment(chain, dtype, batch, layout):
    """The plan's RowSegment (its factors and folds) where the plan has one as a step of its
    own, else one of the whole chain (None where none applies)."""
    plan = chain.plan(layout, dtype, batch)
    for step in plan.steps:
        if isinstance(step, ks_rows.RowSegment):
            return plan, step
    factors = [f.in_dtype(dtype) for f in chain.factor_chain.applied]
    dst = None if chain.output_permutation is None else \
        ks.shuffle.inverse_permutation(chain.output_permutation, cupy)
    return plan, ks_rows.make_row_segment(factors, dtype, layout, batch, max_cluster=1,
                                          src=chain.input_permutation, dst=dst)


def variants(seg, dtype, batch, runs):
    """(label, segment): one block a tile, then the cluster configuration for each run
    (batch-size-last) or for each largest cluster allowed (batch-size-first)."""
    rebuild = lambda mc: ks_rows.make_row_segment(  # noqa: E731
        seg.factors, dtype, seg.layout, batch, src=seg.src, dst=seg.dst, max_cluster=mc)
    out = [("one block", rebuild(1))]
    if seg.layout == "bsf":
        for mc in (2, 4, 8, 16):
            s = rebuild(mc)
            if s is not None and s.cluster > 1 and all(s.name(dtype) != o.name(dtype)
                                                       for _, o in out):
                out.append((f"cluster of {s.cluster}", s))
        return out
    saved = ks_rows.BSL_RUN
    try:
        for run in runs:
            ks_rows.BSL_RUN = run
            s = rebuild(ks_rows.MAX_CLUSTER)
            if s.cluster > 1 and all(s.name(dtype) != o.name(dtype) for _, o in out):
                out.append((f"runs {run} B", s))
    finally:
        ks_rows.BSL_RUN = saved
    return out


def knob_variants(seg, itemsize):
    """(label, segment): the plan's segment, then the same with each other block size (128,
    256 or 512 threads) and blocks per SM its registers must allow (``min_blocks``) whose
    threads and shared memory fit an SM, with the plan's rows and with half as many (a
    smaller tile leaves room for more blocks: batch-size-last clusters of 32-byte runs)."""
    out = [("plan's", seg)]
    for rows in (seg.rows, seg.rows // 2) if seg.rows > 1 else (seg.rows,):
        trial = dataclasses.replace(seg, rows=rows)
        facts = device.current()
        fit = facts.smem_per_sm // (trial.launch_smem_bytes(itemsize)
                                    + facts.smem_reserved_per_block)
        for threads in (128, 256, 512):
            for min_blocks in (1, 2, 3, 4, 6):
                if (rows, threads, min_blocks) != (seg.rows, seg.threads, seg.min_blocks) and \
                        threads * min_blocks <= facts.threads_per_sm and min_blocks <= fit:
                    out.append((f"{rows} rows, {threads} threads x {min_blocks}",
                                dataclasses.replace(trial, threads=threads,
                                                    min_blocks=min_blocks)))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", default=CHAINS)
    parser.add_argument("--layouts", default="bsl", help="bsl and/or bsf")
    parser.add_argument("--runs", default="128,64", help="BSL_RUN byte counts to configure for")
    parser.add_argument("--elements", type=int, default=2**26, help="B·n")
    parser.add_argument("--baseline", default=None, metavar="REV_OR_FILE",
                        help="time each segment again with this version of ks_rows.cu")
    parser.add_argument("--knobs", action="store_true",
                        help="time the plan's segment with other threads and min_blocks instead "
                             "of the one-block and cluster variants")
    args = parser.parse_args(argv)
    if cupy is None:
        sys.exit(f"{pathlib.Path(__file__).name} times GPU kernels and needs CuPy and a CUDA device")
    runs = [int(r) for r in args.runs.split(",")]
    sources = [("", None)]
    if args.baseline:
        sources.append((f" @{args.baseline}", file_as_of("ks_rows.cu", args.baseline)))
    bandwidth = measure_ceilings()["copy_bandwidth_Bps"]
    rates = device.current()
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: "
          f"copy {bandwidth / 1e12:.2f} TB/s", flush=True)
    for spec in args.chains.split(";"):
        chain = make_chain(spec)
        dtype = numpy.dtype(chain.dtype)
        n = chain.shape[1]
        batch = args.elements // n
        X = cupy.random.default_rng(1).standard_normal((n, batch), dtype=numpy.float32)
        X = (X + 1j * X[::-1] if dtype.kind == "c" else X).astype(dtype)
        floor = 2 * X.nbytes / bandwidth
        cols = slice(0, 64)
        D = cupy.asarray(chain.todense()).astype(numpy.complex128)
        ref = D @ X[:, cols].astype(numpy.complex128)
        for layout in args.layouts.split(","):
            Xl = X if layout == "bsl" else cupy.ascontiguousarray(X.T)

            def check(Y):
                got = (Y[:, cols] if layout == "bsl" else Y[cols].T).astype(numpy.complex128)
                return float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))

            auto = lambda x: chain.matmul(x, layout=layout)  # noqa: E731
            t = time_fn(auto, [Xl])
            plan, seg = plan_segment(chain, dtype, batch, layout)
            print(f"{spec:26s} {layout} auto {t * 1e3:7.3f} ms floor {floor / t:.2f} "
                  f"err {check(auto(Xl)):.1e}  plan: {plan.describe().replace(chr(10), ' ; ')}",
                  flush=True)
            if seg is None:
                print("    no whole-vector segment applies the chain here", flush=True)
                continue
            for label, s in (knob_variants(seg, dtype.itemsize) if args.knobs
                             else variants(seg, dtype, batch, runs)):
                modelled = gpu_costs.rows_seconds(s, batch, dtype, rates, layout)
                for suffix, path in sources:
                    try:
                        with kernel_file("ks_rows.cu", path):   # prepared once, timed by launches
                            run = s.prepare(Xl, layout)
                        t = time_fn(run, [Xl])
                    # a block that cannot launch (too many resources); an error that poisons
                    # the context (an illegal address) would fail every later launch too
                    except cupy.cuda.driver.CUDADriverError as exc:
                        print(f"    {label + suffix:22s} does not launch: {exc}", flush=True)
                        continue
                    # a baseline whose kernel templates differ from this revision's names
                    # (ks_rows_cluster's took ALONG, VY and TO_Y at b75d582)
                    except cupy.cuda.compiler.CompileException as exc:
                        print(f"    {label + suffix:22s} does not compile: "
                              f"{str(exc).splitlines()[0]}", flush=True)
                        continue
                    print(f"    {label + suffix:22s} {t * 1e3:7.3f} ms floor {floor / t:.2f} "
                          f"model {modelled * 1e3:7.3f} err {check(run(Xl)):.1e}  "
                          f"{s.describe()} threads={s.threads} min_blocks={s.min_blocks}",
                          flush=True)


if __name__ == "__main__":
    main()
