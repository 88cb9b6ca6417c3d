"""Development probe for the fused pair of factors (``kernels_cu/ks_pair.cu``): time tile
shapes of a two-factor chain against the chain's own plan and check them.

    PYTHONPATH=$PWD python3 benchmarks/probe_pair.py
    PYTHONPATH=$PWD python3 benchmarks/probe_pair.py --chains "monarch:1024;2,48,192,1/1,192,48,2" \
        --shapes "32,8,2;16,16,2" --layouts bsf --batch 25088

A chain is ``monarch:N`` or its factors left to right, ``a,b,c,d/a,b,c,d`` (the right one is
applied first). For each chain and layout it times ``auto`` (the plan, printed), the pair as
``make_pair_segment`` makes it and each given shape ``columns,warps,row_tiles`` whose tile
fits, each prepared once and checked against the float64 product of the dense factors on
the first 64 batch columns. Used to set ks_pair.py's tile choice and costs.pair_seconds; the
issue's benchmark is bench_fft.py.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kscupy.bench.timing import cupy, time_fn  # noqa: E402

import kscupy as ks  # noqa: E402
from kscupy.kernels import ks_pair  # noqa: E402

CHAINS = "monarch:1024;monarch:512;1,192,48,2/2,48,192,1;1,128,128,3/6,64,256,1"
SHAPES = "64,8,2;32,8,2;16,8,2;16,16,2;8,8,1"


def make_chain(spec):
    if spec.startswith("monarch:"):
        n = int(spec.split(":")[1])
        return ks.monarch(n, dtype=numpy.float32, xp=cupy, seed=n)
    patterns = [tuple(int(v) for v in p.split(",")) for p in spec.split("/")]
    return ks.KSChain([ks.KSMatrix.random(p, dtype=numpy.float32, xp=cupy, seed=i)
                       for i, p in enumerate(patterns)])


def error(Y, D, X, layout):
    """Relative error on the first 64 batch columns against the float64 product."""
    cols = slice(0, 64)
    X64 = (X[:, cols] if layout == "bsl" else X[cols].T).astype(numpy.float64)
    got = (Y[:, cols] if layout == "bsl" else Y[cols].T).astype(numpy.float64)
    ref = D @ X64
    return float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", default=CHAINS)
    parser.add_argument("--shapes", default=SHAPES, help="columns,warps,row_tiles;...")
    parser.add_argument("--layouts", default="bsf,bsl")
    parser.add_argument("--batch", type=int, default=25088)
    args = parser.parse_args(argv)
    if cupy is None:
        sys.exit(f"{pathlib.Path(__file__).name} times GPU kernels and needs CuPy and a CUDA device")
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";")]
    for spec in args.chains.split(";"):
        chain = make_chain(spec)
        if len(chain.factors) != 2 or chain.input_permutation is not None \
                or chain.output_permutation is not None:
            raise SystemExit(f"{spec}: the probe takes two factors without permutations")
        factors = tuple(K.factor for K in reversed(chain.factors))
        patterns = tuple(f.pattern for f in factors)
        D = cupy.asarray(chain.todense()).astype(numpy.float64)
        for layout in args.layouts.split(","):
            n = chain.shape[1]
            X = cupy.random.default_rng(1).standard_normal(
                (n, args.batch) if layout == "bsl" else (args.batch, n), dtype=numpy.float32)
            auto = lambda x: chain.matmul(x, layout=layout)  # noqa: E731
            line = f"{spec:28s} {layout} auto {time_fn(auto, [X]) * 1e3:7.3f} ms"
            chosen = ks_pair.make_pair_segment(factors, numpy.float32, layout)
            segments = [("chosen", chosen)] if chosen is not None else []
            segments += [(f"{c}x{w}x{m}", ks_pair.PairSegment(factors, layout, c, w, m))
                         for c, w, m in shapes
                         if ks_pair.pair_layout(patterns, c, layout, m).bytes <= ks_pair.SMEM_MAX]
            for label, segment in segments:
                run = segment.prepare(X, layout)
                err = error(run(X), D, X, layout)
                line += f" | {label} {time_fn(run, [X]) * 1e3:7.3f} ms ({err:.1e})"
            print(line, flush=True)
            print("    plan:", chain.plan(layout, numpy.float32, args.batch).describe()
                  .replace("\n", " ; "), flush=True)


if __name__ == "__main__":
    main()
