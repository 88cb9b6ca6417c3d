"""Development probe for the tensor-core kernel: check and time tile configurations.

    PYTHONPATH=$PWD python3 benchmarks/probe_mma.py [--quick] [--out probe.json]
    PYTHONPATH=$PWD python3 benchmarks/probe_mma.py --cases float32:default --layouts bsf \
        --patterns "1,256,256,16;3,384,96,16" --configs "8,64,64,8,1,1,3,1,1" --baseline HEAD~1 --verbose

For a handful of patterns of the paper's grid, both layouts and each dtype, runs every
candidate configuration of :func:`kscupy.kernels.ks_mma.candidate_configs`, checks it against
the float64 definition on fresh random data (engine.py's oracle) and times it beside PyTorch's
BMM (when torch imports), CuPy's BMM, cuBLAS dense and the FMA kernel. Prints one line per
case: the best configuration and the ratios. ``--configs`` times given configurations
instead of the candidates; ``--baseline REV`` times each one again with ks_mma.cu (or, with
``--swap ks_mma_group.cu``, the group order's own kernel) as of a git revision (or
a file), in the same process (an A/B test of a kernel change; the launch,
shared-memory size included, is this checkout's, so a baseline whose layout differs from
``MmaConfig``'s mirror of it needs its own checkout and process). Each configuration is
prepared once and timed by its launches alone. Used to set the heuristic; the issue's
benchmark is bench_patterns.py.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import sys

import numpy

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupy  # noqa: E402

import kscupy as ks  # noqa: E402
from kscupy.core import reference  # noqa: E402
from kscupy.kernels import ks_matmul, ks_mma  # noqa: E402
from kscupy.core.problem import problem_of  # noqa: E402
from torch_baselines import torch_bmm  # noqa: E402
from kernel_ab import file_as_of, kernel_file  # noqa: E402
from kscupy.bench.engine import oracle, relative_error  # noqa: E402
from kscupy.bench.timing import time_fn  # noqa: E402

PATTERNS = [(1, 1024, 1024, 1), (1, 512, 512, 4), (1, 256, 256, 16), (4, 192, 192, 4),
            (16, 64, 64, 4), (64, 48, 48, 16), (1, 768, 192, 2), (1, 192, 768, 2),
            (6, 64, 64, 1), (2, 96, 384, 16)]
CASES = [("float16", "default", 25088), ("float32", "default", 25088), ("float32", "tf32", 25088),
         ("float64", "default", 8192), ("complex64", "default", 8192),
         ("complex128", "default", 4096)]


@contextlib.contextmanager
def kernel_source(path, swapped="ks_mma.cu"):
    """Within the block, ks_mma compiles ``path`` (another version of ``kernels_cu/swapped``,
    ks_mma.cu or ks_mma_group.cu: see kernel_ab.kernel_file) instead of that file;
    ``"general"`` runs ks_mma.cu's template where the group order has its own kernel
    (ks_mma.GROUP_KERNEL off); ``None`` leaves both alone."""
    group_kernel = ks_mma.GROUP_KERNEL
    if path == "general":
        ks_mma.GROUP_KERNEL = False
    try:
        with kernel_file(swapped, None if path == "general" else path):
            yield
    finally:
        ks_mma.GROUP_KERNEL = group_kernel


def baseline_source(spec, swapped="ks_mma.cu"):
    """The path of another ``kernels_cu/swapped`` (kernel_ab.file_as_of), or ``"general"``
    (see kernel_source)."""
    return spec if spec == "general" else file_as_of(swapped, spec)


def case(pattern, layout, dtype, precision, B, configs, baseline=None):
    rng = cupy.random.default_rng(7)
    K = ks.KSMatrix.random(pattern, dtype=dtype, xp=cupy, seed=3)
    f = K.factor
    M, N = K.shape
    shape = (N, B) if layout == "bsl" else (B, N)
    X = rng.standard_normal(shape, dtype=numpy.float64)
    if numpy.dtype(dtype).kind == "c":
        X = X + 1j * rng.standard_normal(shape, dtype=numpy.float64)
    X = X.astype(dtype)
    ref = oracle(K, X, layout)
    problem = problem_of(f, X, layout)
    out = {"pattern": pattern, "layout": layout, "dtype": dtype, "precision": precision, "B": B,
           "configs": {},
           "heuristic": str(ks_mma.heuristic_config(problem).as_tuple())}
    sources = [("", None, None)] + ([(f" @{baseline[0]}", *baseline[1:])] if baseline else [])
    for cfg in configs(problem):
        for suffix, path, swapped in sources:
            with kernel_source(path, swapped):   # prepared once: times leave out the setup
                run = ks_mma.prepare(f, X, layout, cfg, precision)
            err = relative_error(run(X), ref, layout)
            t = time_fn(run, [X])
            out["configs"][str(cfg.as_tuple()) + suffix] = {"s": t, "err": err}
    fma = ks_matmul.heuristic_config(problem)
    out["fma_s"] = time_fn(lambda x: ks_matmul.prepare(f, x, layout, fma)(x), [X])
    blocks = f.blocks
    out["cupy_bmm_s"] = time_fn(lambda x: reference.bmm(blocks, x, layout, cupy), [X])
    tb = torch_bmm(blocks, layout, tf32=precision == "tf32")
    if tb is not None:
        out["torch_bmm_s"] = time_fn(tb, [X])
    if M * N * X.itemsize <= 2**31:
        D = K.todense()
        out["dense_s"] = time_fn(lambda x: reference.dense(D, x, layout, cupy), [X])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="heuristic configuration only")
    parser.add_argument("--out", default=None)
    parser.add_argument("--cases", default=",".join(f"{d}:{p}" for d, p, _ in CASES))
    parser.add_argument("--patterns", default=str(len(PATTERNS)),
                        help="how many of the built-in patterns, or a list a,b,c,d;a,b,c,d")
    parser.add_argument("--layouts", default="bsl,bsf")
    parser.add_argument("--verbose", action="store_true", help="every configuration's time")
    parser.add_argument("--one", default=None, help="a,b,c,d: launch the heuristic "
                        "configuration once (for ncu) with --layout, --dtype, --precision")
    parser.add_argument("--config", default=None,
                        help="with --one: an MmaConfig tuple instead of the heuristic")
    parser.add_argument("--layout", default="bsl")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--precision", default="default")
    parser.add_argument("--batch", type=int, default=25088)
    parser.add_argument("--configs", default=None,
                        help="time these MmaConfig tuples (s,bm,bn,bk,wm,wn,stages,order,"
                             "min_blocks;...) beside the heuristic's instead of the candidates")
    parser.add_argument("--baseline", default=None, metavar="REV_OR_FILE",
                        help="also time every configuration with another ks_mma.cu (a file, "
                             "or the one of a git revision), in the same process on the same "
                             "data; 'general': with ks_mma.cu where ks_mma_group.cu would run")
    parser.add_argument("--swap", default="ks_mma.cu", choices=("ks_mma.cu", "ks_mma_group.cu"),
                        help="the kernels_cu file that --baseline replaces (configurations "
                             "that do not run it time the same code twice)")
    parser.add_argument("--warp-tile", default=None, metavar="DTYPE=MxN",
                        help="try another warp piece for one dtype (heuristic and candidates)")
    args = parser.parse_args()
    if args.warp_tile:
        name, shape = args.warp_tile.split("=")
        tiles = {numpy.dtype(name): tuple(int(v) for v in shape.split("x"))}
        default = ks_mma._warp_tile
        ks_mma._warp_tile = lambda dtype: tiles.get(numpy.dtype(dtype)) or default(dtype)
    if args.one:
        pattern = tuple(int(v) for v in args.one.split(","))
        K = ks.KSMatrix.random(pattern, dtype=args.dtype, xp=cupy, seed=3)
        M, N = K.shape
        shape = (N, args.batch) if args.layout == "bsl" else (args.batch, N)
        X = cupy.random.default_rng(1).standard_normal(shape).astype(args.dtype)
        cfg = (ks_mma.MmaConfig(*(int(v) for v in args.config.split(","))) if args.config
               else ks_mma.heuristic_config(problem_of(K.factor, X, args.layout)))
        for _ in range(2):
            ks_mma.prepare(K.factor, X, args.layout, cfg, args.precision)(X)
        cupy.cuda.Device().synchronize()
        print(cfg)
        return
    wanted = args.cases.split(",")
    if ";" in args.patterns or "," in args.patterns:
        patterns = [tuple(int(v) for v in p.split(",")) for p in args.patterns.split(";")]
    else:
        patterns = PATTERNS[:int(args.patterns)]
    configs = (lambda p: [ks_mma.heuristic_config(p)]) if args.quick else ks_mma.candidate_configs
    if args.configs:
        given = [ks_mma.MmaConfig(*(int(v) for v in c.split(","))) for c in args.configs.split(";")]
        configs = lambda p: [ks_mma.heuristic_config(p)] + [
            c for c in given if c.valid_for(p.dtype) and c.fits(p.itemsize, p.transposed)]
    baseline = ((args.baseline, baseline_source(args.baseline, args.swap), args.swap)
                if args.baseline else None)
    results = []
    print(f"{'dtype':10s} {'prec':7s} {'pattern':20s} {'lay':4s} {'best ms':>8s} {'heur ms':>8s} "
          f"{'err':>8s} {'fma':>6s} {'torch':>6s} {'cupy':>6s} {'dense':>6s}  best config")
    for dtype, precision, B in CASES:
        if f"{dtype}:{precision}" not in wanted:
            continue
        for pattern in patterns:
            for layout in args.layouts.split(","):
                r = case(pattern, layout, dtype, precision, B, configs, baseline)
                results.append(r)
                cf = r["configs"]
                best = min(cf, key=lambda k: cf[k]["s"])
                heur = r["heuristic"]
                tb = cf[best]["s"]
                ratio = lambda key: f"{r[key] / tb:6.2f}" if key in r else "     -"
                print(f"{dtype:10s} {precision:7s} {str(pattern):20s} {layout:4s} {1e3 * tb:8.3f} "
                      f"{1e3 * cf[heur]['s']:8.3f} {max(v['err'] for v in cf.values()):8.1e} "
                      f"{ratio('fma_s')} {ratio('torch_bmm_s')} {ratio('cupy_bmm_s')} "
                      f"{ratio('dense_s')}  {best}", flush=True)
                if args.verbose:
                    for k, v in sorted(cf.items(), key=lambda kv: kv[1]["s"]):
                        print(f"    {1e3 * v['s']:8.3f} ms  err {v['err']:.1e}  {k}")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
