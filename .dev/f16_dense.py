"""Dev probe (issue 54): why kscupy's dense GEMM trails CuPy's `X @ D.T` on 16-bit bsf rows
((1,96,384,4) f16/bf16 B=25088: 50 vs 44 us). Times CuPy's matmul, gemm.prepare on D (C order)
and on D in Fortran order; with LOG=1 runs one call of each with cuBLAS's API log on."""
import os, sys, numpy, cupy
import kscupy as ks
from kscupy.bench.timing import interleaved_seconds
from kscupy.core import arrays
from kscupy.kernels import gemm
log = os.environ.get("LOG") == "1"
for pattern, dname in [((1, 96, 384, 4), "float16"), ((1, 96, 384, 4), "bfloat16"),
                       ((1, 256, 1024, 3), "float16"), ((1, 1024, 1024, 1), "float16")]:
    dt = numpy.dtype(arrays.BFLOAT16 if dname == "bfloat16" else dname)
    K = ks.KSMatrix(ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0).values.astype(dt))
    M, N = K.shape
    B = 25088
    X = cupy.random.default_rng(0).standard_normal((B, N), dtype=numpy.float32).astype(dt)
    D = cupy.ascontiguousarray(K.todense())
    DF = cupy.asfortranarray(D)
    methods = {"cupy X @ D.T": lambda x: x @ D.T, "gemm D C": gemm.prepare(D, X, "bsf"),
               "gemm D F": gemm.prepare(DF, X, "bsf"), "K@X auto": lambda x: K.matmul(x, layout="bsf")}
    if log:
        for name, fn in methods.items():
            fn(X); cupy.cuda.runtime.deviceSynchronize()
            print(f"=== {pattern} {dname} {name}", flush=True); sys.stderr.flush()
            fn(X); cupy.cuda.runtime.deviceSynchronize()
        continue
    t = interleaved_seconds(methods, [X], rounds=7)
    print(pattern, dname, {k: round(v * 1e6, 1) for k, v in t.items()}, flush=True)
