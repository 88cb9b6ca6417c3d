import sys, numpy, cupy
sys.path.insert(0, "benchmarks")
import kscupy as ks
from kscupy import tuning, backends
from kscupy.problem import problem_of
from timing import time_fn
rates = ks.costs.device_rates()
for pat, layout in [((128,128,128,1),"bsf"),((1,128,128,128),"bsf"),((64,64,64,1),"bsl"),((1,64,256,16),"bsl"),((64,64,64,1),"bsf"),((1,64,64,64),"bsl")]:
    K = ks.KSMatrix.random(pat, dtype=numpy.float32, xp=cupy, seed=1)
    M, N = K.shape
    B = 25088
    X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N), dtype=numpy.float32)
    p = problem_of(K.factor, X, layout)
    line = [str(pat), layout, "auto->" + tuning.choose(p, rates).backend]
    for name in ("kernel", "kernel_bsl", "kernel_fma", "bmm", "dense"):
        b = backends.get(name)
        if b.fits is not None and not b.fits(p, rates):
            continue
        t = time_fn(lambda x: K.matmul(x, layout=layout, backend=name), [X])
        line.append(f"{name} {t*1e3:.3f} (model {b.seconds(p, rates)*1e3:.3f})")
    print(" | ".join(line), flush=True)
