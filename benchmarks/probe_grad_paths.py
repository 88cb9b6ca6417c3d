"""Probe: where the values' gradient of the 16-bit dtypes spends its time, host and GPU apart.

For the patterns of ``gradients.json`` whose public path lags (float16 at B = 25088), times
with ``cupyx.profiler.benchmark`` (host time per call, GPU time per call, medians):

- ``values_grad``: the public path (checks, cuBLAS, reorder and rounding);
- ``cublas``: ``gemm.values_gradient`` alone, its batch unchunked (the 16-bit default);
- ``cublas_chunked``: the same with the batch cut into chunks as float32's is;
- ``cublas_diagonal``: in batch-size-first with ``d > 1``, each ``i``'s whole product and
  its diagonal blocks (``gemm.values_gradient_diagonal``), no transposes;
- ``kernel``: the tensor-core kernel (``ks_values_grad``).

A row whose host time exceeds its GPU time is host-bound: back-to-back calls then run at the
host's pace. ::

    PYTHONPATH=$PWD python3 benchmarks/probe_grad_paths.py out.json [dtype]
"""
import json
import sys

import cupy
import numpy
from cupyx.profiler import benchmark

import kscupy as ks
from kscupy.kernels import gemm, ks_values_grad

PATTERNS = [(1, 1024, 1024, 1), (1, 512, 512, 2), (2, 128, 128, 4), (1, 96, 384, 4),
            (1, 64, 64, 24), (1, 1024, 1024, 48), (2, 192, 768, 4), (32, 192, 192, 4)]
BATCH = 25088


def _paths(pattern, layout):
    def chunked(G, X):
        kept, gemm.SPLIT_NEVER = gemm.SPLIT_NEVER, ()
        gemm._gradient_run.cache_clear()        # plans made under the other rule
        try:
            return gemm.values_gradient(G, X, pattern, layout)
        finally:
            gemm.SPLIT_NEVER = kept
            gemm._gradient_run.cache_clear()
    paths = {"cublas": lambda K, X, G: gemm.values_gradient(G, X, pattern, layout),
             "cublas_chunked": lambda K, X, G: chunked(G, X),
             "kernel": lambda K, X, G: ks_values_grad.values_gradient(G, X, pattern, layout),
             "values_grad": lambda K, X, G: ks.values_grad(K, X, G, layout=layout)}
    if layout == "bsf" and pattern[3] > 1:
        paths["cublas_diagonal"] = lambda K, X, G: gemm.values_gradient_diagonal(G, X, pattern)
    return paths


def main(out, dtype="float16"):
    rng = cupy.random.default_rng(0)
    rows = []
    for pattern in PATTERNS:
        K = ks.KSMatrix.random(pattern, dtype=dtype, xp=cupy, seed=0)
        M, N = K.shape
        for layout in ("bsl", "bsf"):
            shape_x, shape_g = ((N, BATCH), (M, BATCH)) if layout == "bsl" else \
                ((BATCH, N), (BATCH, M))
            X = rng.standard_normal(shape_x, dtype=numpy.float32).astype(dtype)
            G = rng.standard_normal(shape_g, dtype=numpy.float32).astype(dtype)
            row = {"pattern": list(pattern), "layout": layout, "dtype": dtype, "batch": BATCH,
                   "host_us": {}, "gpu_us": {}}
            for name, fn in _paths(pattern, layout).items():
                r = benchmark(fn, (K, X, G), n_repeat=50, n_warmup=5)
                row["host_us"][name] = float(numpy.median(r.cpu_times)) * 1e6
                row["gpu_us"][name] = float(numpy.median(r.gpu_times[0])) * 1e6
            print(pattern, layout, {k: f"{row['host_us'][k]:.0f}/{row['gpu_us'][k]:.0f}"
                                    for k in row["host_us"]}, flush=True)
            rows.append(row)
            del X, G
        K.clear_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    with open(out, "w") as f:
        json.dump({"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
