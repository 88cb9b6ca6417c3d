import sys, numpy, cupy
sys.path.insert(0, "benchmarks")
import kscupy as ks
from kscupy.kernels import ks_mma
from kscupy.problem import problem_of
from timing import time_fn
from baselines import torch_bmm
lone = ks_mma._lone_warp_rows
for pat, layout in [((1,48,192,6),"bsf"),((1,48,48,6),"bsf"),((1,96,384,12),"bsf"),((16,48,192,16),"bsf"),((6,96,48,4),"bsf"),
                    ((1,48,192,128),"bsl"),((1,48,192,16),"bsl"),((4,96,96,8),"bsl"),((2,48,1024,4),"bsl"),((1,96,384,12),"bsl")]:
    K = ks.KSMatrix.random(pat, dtype=numpy.float64, xp=cupy, seed=1)
    M, N = K.shape; B = 8192
    X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N))
    p = problem_of(K.factor, X, layout)
    new = ks_mma.heuristic_config(p)
    ks_mma._lone_warp_rows = lambda d: 0
    old = ks_mma.heuristic_config(p)
    ks_mma._lone_warp_rows = lone
    ref = K.matmul(X, layout=layout, backend="bmm")
    out = []
    for cfg in (old, new):
        Y = ks_mma.launch(K.factor, X, layout, cfg)
        err = float(abs(Y - ref).max() / abs(ref).max())
        t = time_fn(lambda x: ks_mma.launch(K.factor, x, layout, cfg), [X])
        out.append(f"{cfg.as_tuple()} {t*1e3:.3f} ms err {err:.1e}")
    tb = torch_bmm(K.factor.blocks, layout)
    tt = time_fn(tb, [X]) if tb else float("nan")
    print(pat, layout, " -> ".join(out), f"torch {tt*1e3:.3f}", flush=True)
