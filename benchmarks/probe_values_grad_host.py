"""Probe: where the public values' gradient (``kscupy.values_grad``) spends its host time
beyond its way's (the cuBLAS path alone), by ``cProfile`` over repeated calls on one small
float16 pattern at B = 25088::

    PYTHONPATH=$PWD python3 benchmarks/probe_values_grad_host.py [a,b,c,d] [layout]
"""
import cProfile
import pstats
import sys
import time

import cupy
import numpy

import kscupy as ks
from kscupy.kernels import gemm

BATCH = 25088
CALLS = 300


def host_us(fn):
    fn()
    cupy.cuda.get_current_stream().synchronize()
    t = time.perf_counter()
    for _ in range(CALLS):
        fn()
    seconds = time.perf_counter() - t
    cupy.cuda.get_current_stream().synchronize()
    return seconds / CALLS * 1e6


def main(pattern="1,96,96,2", layout="bsl"):
    pattern = tuple(int(v) for v in pattern.split(","))
    K = ks.KSMatrix.random(pattern, dtype=numpy.float16, xp=cupy, seed=0)
    M, N = K.shape
    rng = cupy.random.default_rng(0)
    shape_x, shape_g = ((N, BATCH), (M, BATCH)) if layout == "bsl" else ((BATCH, N), (BATCH, M))
    X = rng.standard_normal(shape_x, dtype=numpy.float32).astype(numpy.float16)
    G = rng.standard_normal(shape_g, dtype=numpy.float32).astype(numpy.float16)
    public = lambda: ks.values_grad(K, X, G, layout=layout)          # noqa: E731
    cublas = lambda: gemm.values_gradient(G, X, pattern, layout)     # noqa: E731
    print(f"{pattern} {layout}: host us a call (enqueue only): values_grad "
          f"{host_us(public):.1f}, cublas {host_us(cublas):.1f}")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        public()
    profile.disable()
    cupy.cuda.get_current_stream().synchronize()
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main(*sys.argv[1:])
