"""Dev: a few products of one pattern (for ncu): one_product.py a,b,c,d dtype layout backend [B]"""
import sys
import cupy, numpy
import kscupy as ks
from kscupy.core import arrays
pattern = tuple(int(v) for v in sys.argv[1].split(","))
dtype = arrays.BFLOAT16 if sys.argv[2] == "bfloat16" else numpy.dtype(sys.argv[2])
layout, backend = sys.argv[3], sys.argv[4]
B = int(sys.argv[5]) if len(sys.argv) > 5 else 25088
K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
K = ks.KSMatrix(K.values.astype(dtype))
M, N = K.shape
X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N), dtype=numpy.float32).astype(dtype)
for _ in range(5):
    Y = K.matmul(X, layout=layout, backend=backend)
cupy.cuda.runtime.deviceSynchronize()
print(pattern, dtype, layout, backend, K.factor if False else "", "ok")
