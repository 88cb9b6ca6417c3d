"""Dev check of the dense form rule (float32: D^T stored; 16-bit: D C order): K @ X with backend
dense against CuPy's own product, both layouts, CUDA events back to back (interleaved)."""
import numpy, cupy
import kscupy as ks
from kscupy.bench.timing import interleaved_seconds
from kscupy.core import arrays
for pattern, dname, layout, B in [((1, 96, 384, 4), "float16", "bsf", 25088), ((1, 96, 384, 4), "bfloat16", "bsf", 25088),
                                  ((1, 1024, 1024, 1), "float32", "bsf", 64), ((1, 1024, 1024, 1), "float32", "bsl", 64),
                                  ((2, 192, 768, 4), "float32", "bsl", 64), ((1, 512, 512, 2), "float16", "bsf", 25088)]:
    dt = numpy.dtype(arrays.BFLOAT16 if dname == "bfloat16" else dname)
    K = ks.KSMatrix(ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0).values.astype(dt))
    M, N = K.shape
    X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N), dtype=numpy.float32).astype(dt)
    D = cupy.ascontiguousarray(K.todense())
    m = {"cupy D": (lambda x: D @ x) if layout == "bsl" else (lambda x: x @ D.T),
         "K dense": lambda x: K.matmul(x, layout=layout, backend="dense"),
         "K auto": lambda x: K.matmul(x, layout=layout)}
    ref = m["cupy D"](X).astype(numpy.float64)
    err = float(cupy.abs(m["K dense"](X).astype(numpy.float64) - ref).max() / cupy.abs(ref).max())
    t = interleaved_seconds(m, [X], rounds=7)
    print(pattern, dname, layout, B, "err %.1e" % err, {k: round(v * 1e6, 1) for k, v in t.items()}, flush=True)
