"""Which storage of the dense matrix kscupy's prepared GEMM (kernels/gemm.py) should read:
``D`` in C order (cuBLAS reads the column-major ``Dᵀ``: ``gemm(N, N)`` in bsl, ``gemm(T, N)``
in bsf) or ``Dᵀ`` stored in C order (``D`` in Fortran order: ``gemm(N, T)`` and
``gemm(N, N)``), against CuPy's own product of the same matrix and ``K @ X`` with
``backend="dense"`` (the form ``gemm.stores_transposed`` picks), on the rows where the
portability suite found ``auto``'s dense GEMM behind a baseline. CUDA events over
back-to-back calls, the methods of a row interleaved; each result checked against CuPy's.

    PYTHONPATH=$PWD python3 benchmarks/probe_dense_forms.py
"""
import cupy
import numpy

from kscupy import KSMatrix
from kscupy.bench.timing import interleaved_seconds
from kscupy.core import arrays
from kscupy.kernels import gemm

#: (pattern, dtype, layout, batch)
ROWS = [((1, 96, 384, 4), "float16", "bsf", 25088), ((1, 96, 384, 4), "bfloat16", "bsf", 25088),
        ((1, 256, 1024, 3), "float16", "bsf", 25088),
        ((1, 1024, 1024, 1), "float16", "bsf", 25088),
        ((1, 96, 96, 2), "bfloat16", "bsl", 25088),
        ((1, 1024, 1024, 1), "float32", "bsf", 64), ((1, 1024, 1024, 1), "float32", "bsl", 64),
        ((2, 192, 768, 4), "float32", "bsl", 64), ((1, 256, 256, 4), "float32", "bsl", 25088),
        ((1, 256, 256, 4), "float32", "bsf", 25088), ((1, 128, 128, 2), "float64", "bsf", 25088),
        ((1, 128, 128, 2), "complex64", "bsl", 25088)]


def row(pattern, dtype, layout, B):
    dtype = numpy.dtype(arrays.BFLOAT16 if dtype == "bfloat16" else dtype)
    drawn = numpy.complex64 if dtype.kind == "c" else numpy.float32
    K = KSMatrix(KSMatrix.random(pattern, dtype=drawn, xp=cupy, seed=0).values.astype(dtype))
    M, N = K.shape
    X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N),
                                                   dtype=numpy.float32).astype(dtype)
    D = cupy.ascontiguousarray(K.todense())
    methods = {"cupy": (lambda x: D @ x) if layout == "bsl" else (lambda x: x @ D.T),
               "D C order": gemm.prepare(D, X, layout),
               "D Fortran order": gemm.prepare(cupy.asfortranarray(D), X, layout),
               "K dense": lambda x: K.matmul(x, layout=layout, backend="dense")}
    wide = numpy.complex128 if dtype.kind == "c" else numpy.float64
    ref = methods["cupy"](X).astype(wide)
    for name, fn in methods.items():
        err = float(cupy.abs(fn(X).astype(wide) - ref).max() / cupy.abs(ref).max())
        assert err < 1e-2, (pattern, name, err)
    return interleaved_seconds(methods, [X], rounds=7)


def main():
    print(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode())
    for pattern, dtype, layout, B in ROWS:
        seconds = row(pattern, dtype, layout, B)
        print(pattern, dtype, layout, B, "stores transposed:",
              gemm.stores_transposed(arrays.BFLOAT16 if dtype == "bfloat16" else dtype),
              {k: round(v * 1e6, 1) for k, v in seconds.items()}, flush=True)


if __name__ == "__main__":
    main()
