"""Dev probe (device): auto's close-call choice and time, against CuPy's dense product, on the
rows portability.json had below 0.95, native or emulated (KSCUPY_EMULATE_ARCH)."""
import os
import numpy, cupy
import kscupy as ks
from kscupy.bench.timing import interleaved_seconds
from kscupy.core.problem import problem_of
from kscupy.engine import decide
rows = [((1, 96, 96, 2), "bsl", 25088), ((1, 96, 96, 2), "bsf", 25088),
        ((1, 256, 1024, 3), "bsf", 64), ((1, 48, 192, 4), "bsl", 25088), ((1, 256, 64, 1), "bsl", 25088)]
for pattern, layout, B in rows:
    K = ks.KSMatrix.random(pattern, dtype=numpy.float16, xp=cupy, seed=1)
    M, N = K.shape
    X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N),
                                                   dtype=numpy.float32).astype(numpy.float16)
    D = K.todense()
    if layout == "bsl":
        auto, dense = (lambda X: K @ X), (lambda X: D @ X)
    else:
        auto, dense = (lambda X: X @ K.T), (lambda X: X @ D.T)
    auto(X)
    p = problem_of(K.factor, X, layout)
    choice = decide.choose(p).backend
    s = interleaved_seconds({"auto": auto, "cupy_dense": dense}, [X])
    print(os.environ.get("KSCUPY_EMULATE_ARCH", "native"), pattern, layout, B, choice,
          {k: round(v * 1e6, 1) for k, v in s.items()}, round(s["cupy_dense"] / s["auto"], 3), flush=True)
