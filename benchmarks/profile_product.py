"""A few products of one pattern, for a profiler to catch one launch after the warm-up::

    ncu --kernel-name regex:ks_ --launch-skip 2 --launch-count 1 --section SpeedOfLight \\
        python3 benchmarks/profile_product.py 1,256,256,16 float16 bsf kernel [B]

Arguments: the pattern ``a,b,c,d``, the dtype (``bfloat16`` needs ``ml_dtypes``), the layout,
the backend and the batch (default 25088). Values and operands are drawn in float32 and
rounded to the dtype.
"""
import sys

import cupy
import numpy

import kscupy as ks
from kscupy.core import arrays


def main(pattern, dtype, layout, backend, B=25088, calls=5):
    pattern = tuple(int(v) for v in pattern.split(","))
    dtype = arrays.BFLOAT16 if dtype == "bfloat16" else numpy.dtype(dtype)
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    K = ks.KSMatrix(K.values.astype(dtype))
    M, N = K.shape
    shape = (N, int(B)) if layout == "bsl" else (int(B), N)
    X = cupy.random.default_rng(0).standard_normal(shape, dtype=numpy.float32).astype(dtype)
    for _ in range(calls):
        K.matmul(X, layout=layout, backend=backend)
    cupy.cuda.runtime.deviceSynchronize()
    print(pattern, dtype, layout, backend, "done")


if __name__ == "__main__":
    main(*sys.argv[1:])
