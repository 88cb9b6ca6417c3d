"""Probe: where the public values' gradient (``kscupy.values_grad``) spends its time beyond
its way's, on the gradients suite's rows that fell below the best baseline. For each row:
the host time of a call (enqueue only, no synchronisation: what back-to-back calls cost the
host) and the CUDA-event time of back-to-back calls, for the public function, each way
alone (finished as the public path finishes it) and the dense baseline; then ``cProfile``
of the public function on the first row::

    PYTHONPATH=$PWD python3 benchmarks/probe_values_grad_host.py [a,b,c,d:layout:dtype ...]
"""
import cProfile
import pstats
import sys

import cupy
import numpy

import kscupy as ks
from kscupy.bench.timing import host_seconds, throughput_seconds
from kscupy.engine import gradient_paths
from kscupy.kernels import gemm

BATCH = 25088
CALLS = 300
ROWS = ("1,256,1024,3:bsl:float16", "1,256,64,12:bsl:float16", "1,96,384,4:bsf:float16",
        "1,48,192,4:bsf:float16", "2,192,768,4:bsf:float16", "1,96,96,2:bsl:float32")


def operands(pattern, layout, dtype):
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    K = ks.KSMatrix(K.values.astype(dtype))
    M, N = K.shape
    rng = cupy.random.default_rng(0)
    shape_x, shape_g = ((N, BATCH), (M, BATCH)) if layout == "bsl" else ((BATCH, N), (BATCH, M))
    X = rng.standard_normal(shape_x, dtype=numpy.float32).astype(dtype)
    G = rng.standard_normal(shape_g, dtype=numpy.float32).astype(dtype)
    return K, X, G


def probe(spec):
    pattern, layout, dtype = spec.split(":")
    pattern = tuple(int(v) for v in pattern.split(","))
    K, X, G = operands(pattern, layout, dtype)
    rows, cols = K.pattern.indices(cupy)
    ways = {"values_grad": lambda: ks.values_grad(K, X, G, layout=layout)}
    for way in gradient_paths.WAYS:
        if gradient_paths._run(way, G, X, pattern, layout) is not None:
            ways[way] = (lambda w: lambda: gradient_paths._run(w, G, X, pattern, layout)
                         .astype(X.dtype, order="C", copy=False))(way)
    ways["gemm_bare"] = lambda: gemm.values_gradient(G, X, pattern, layout)
    if layout == "bsf":
        ways["diagonal_bare"] = lambda: gemm.values_gradient_diagonal(G, X, pattern)
    ways["dense"] = (lambda: (G @ X.T if layout == "bsl" else G.T @ X)[rows, cols])
    ways["dense_gemm"] = (lambda: G @ X.T if layout == "bsl" else G.T @ X)
    ways["values_grad"]()
    chosen = gradient_paths.choice(G, X, pattern, layout)
    cells = [f"{name} {host_seconds(fn, CALLS, warmup=1) * 1e6:.0f}/"
             f"{throughput_seconds(lambda _: fn(), [None]) * 1e6:.0f}" for name, fn in ways.items()]
    print(f"{pattern} {layout} {dtype} (chose {chosen}), host/events us: " + ", ".join(cells))
    return ways["values_grad"]


def main(*specs):
    publics = [probe(spec) for spec in (specs or ROWS)]
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        publics[0]()
    profile.disable()
    cupy.cuda.get_current_stream().synchronize()
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main(*sys.argv[1:])
