# Where the public values_grad's time goes on the rows below 0.95 (fp16, B = 25088).
import time, cupy, numpy
import kscupy as ks
from kscupy.kernels import gemm
from kscupy.engine import gradient_paths as gp
B = 25088
def ev(fn, n=30):
    for _ in range(3): fn()
    cupy.cuda.Device().synchronize()
    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
    t0 = time.perf_counter(); e0.record()
    for _ in range(n): fn()
    e1.record(); t1 = time.perf_counter(); e1.synchronize()
    return cupy.cuda.get_elapsed_time(e0, e1) / n * 1e3, (t1 - t0) / n * 1e6
for pattern, layout in [((1,256,1024,3),"bsl"), ((1,512,512,2),"bsl"), ((1,256,64,12),"bsl"),
                        ((1,96,384,4),"bsf"), ((1,48,192,4),"bsf"), ((2,192,768,4),"bsf")]:
    a, b, c, d = pattern
    K = ks.KSMatrix.random(pattern, dtype=numpy.float16, xp=cupy, seed=0)
    rng = cupy.random.default_rng(0)
    shape = lambda f: (f, B) if layout == "bsl" else (B, f)
    X = rng.standard_normal(shape(a*c*d), dtype=cupy.float32).astype(cupy.float16)
    G = rng.standard_normal(shape(a*b*d), dtype=cupy.float32).astype(cupy.float16)
    out = {"public": ev(lambda: ks.values_grad(K, X, G, layout=layout))}
    out["choice"] = gp.choice(G, X, pattern, layout)
    out["cublas"] = ev(lambda: gemm.values_gradient(G, X, pattern, layout))
    dW = gemm.values_gradient(G, X, pattern, layout)
    out["canonical"] = ev(lambda: gp._canonical(dW))
    out["canon+finish"] = ev(lambda: gp._canonical(dW).astype(numpy.float16, order="C", copy=False))
    if layout == "bsf" and d > 1:
        out["diag"] = ev(lambda: gemm.values_gradient_diagonal(G, X, pattern))
    print(pattern, layout, dW.dtype, {k: (tuple(round(x, 1) for x in v) if isinstance(v, tuple) else v) for k, v in out.items()}, flush=True)
