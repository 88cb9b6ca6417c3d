"""Dev probe: float16 values' gradient, the cuBLAS way with the batch cut into n chunks,
against PyTorch's autograd baseline and the public path (CUDA events, back to back)."""
import sys, json
import cupy, numpy
sys.path.insert(0, "benchmarks")
import kscupy as ks
from kscupy.kernels import gemm
from kscupy.bench.timing import throughput_seconds
import torch_baselines as tb

B = 25088
CASES = [((1, 256, 1024, 3), "bsl"), ((1, 256, 256, 24), "bsl"), ((1, 192, 48, 24), "bsl"),
         ((1, 96, 384, 24), "bsl"), ((2, 192, 768, 4), "bsf"), ((4, 768, 768, 4), "bsf"),
         ((1, 1024, 1024, 1), "bsl")]
rng = cupy.random.default_rng(0)
out = []
real_chunks = gemm.batch_chunks
for pattern, layout in CASES:
    K = ks.KSMatrix.random(pattern, dtype="float16", xp=cupy, seed=0)
    M, N = K.shape
    sx, sg = ((N, B), (M, B)) if layout == "bsl" else ((B, N), (B, M))
    X = rng.standard_normal(sx, dtype=numpy.float32).astype("float16")
    G = rng.standard_normal(sg, dtype=numpy.float32).astype("float16")
    row = {"pattern": pattern, "layout": layout, "us": {}}
    t = lambda f: round(throughput_seconds(lambda _: f(), [None]) * 1e6, 1)
    tg = tb.torch_bmm_values_grad(cupy.ascontiguousarray(K.blocks), layout)
    row["us"]["torch"] = t(lambda: tg(X, G))
    row["us"]["public"] = t(lambda: ks.values_grad(K, X, G, layout=layout))
    row["us"]["public2"] = t(lambda: ks.values_grad(K, X, G, layout=layout))
    row["us"]["torch2"] = t(lambda: tg(X, G))
    for n in (1, 2, 3, 4, 6, 8):
        gemm.batch_chunks = lambda *args, n=n, **kw: n
        gemm._gradient_run.cache_clear()
        row["us"][f"cublas_n{n}"] = t(lambda: gemm.values_gradient(G, X, pattern, layout))
    gemm.batch_chunks = real_chunks
    gemm._gradient_run.cache_clear()
    print(row, flush=True)
    out.append(row)
json.dump(out, open(sys.argv[1], "w"), indent=1)
