"""cuBLAS GEMM with the kept dense matrix, prepared once: the ``dense`` backend's repeated
products on the GPU.

``cupy.matmul`` spends 15-25 µs of host time per call on an H200 host, deciding again what
it decided for the previous call; a prepared product allocates the result and makes one
cuBLAS call. C-order products are column-major products of the transposes:

* bsl: ``Y (M, B) = D (M, N) @ X (N, B)``, i.e. ``Yᵀ = Xᵀ Dᵀ``:
  ``gemm(N, N, m=B, n=M, k=N, Xᵀ ld B, Dᵀ ld N, Yᵀ ld B)``;
* bsf: ``Y (B, M) = X (B, N) @ Dᵀ``, i.e. ``Yᵀ = D Xᵀ``:
  ``gemm(T, N, m=M, n=B, k=N, Dᵀ ld N, Xᵀ ld N, Yᵀ ld M)``.
"""
from __future__ import annotations

import numpy

__all__ = ["prepare"]

_GEMM = {numpy.dtype(numpy.float32): "sgemm", numpy.dtype(numpy.float64): "dgemm",
         numpy.dtype(numpy.complex64): "cgemm", numpy.dtype(numpy.complex128): "zgemm"}


def prepare(D, X, layout):
    """``run(X) -> Y`` computing ``D @ X`` (``"bsl"``, X ``(N, B)``) or ``X @ D.T``
    (``"bsf"``, X ``(B, N)``) with one cuBLAS GEMM on CuPy's current stream, for operands
    shaped and typed like ``X``; None where this does not apply (float16, which cuBLAS runs
    through another call; an operand or matrix not in C order; dtypes that differ)."""
    import cupy
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas
    dtype = X.dtype
    if dtype not in _GEMM or D.dtype != dtype or not (X.flags.c_contiguous
                                                      and D.flags.c_contiguous):
        return None
    gemm = getattr(cublas, _GEMM[dtype])
    M, N = D.shape
    one, zero = numpy.ones((), dtype), numpy.zeros((), dtype)   # host scalars, kept alive
    alpha, beta = one.ctypes.data, zero.ctypes.data
    host_mode, stream_of = cublas.CUBLAS_POINTER_MODE_HOST, cupy.cuda.get_current_stream
    new, op_n, op_t = cupy.ndarray, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T
    d = D.data.ptr
    if layout == "bsl":
        B = X.shape[1]
        y_shape = (M, B)

        def call(handle, x, y):
            gemm(handle, op_n, op_n, B, M, N, alpha, x, B, d, N, beta, y, B)
    else:
        B = X.shape[0]
        y_shape = (B, M)

        def call(handle, x, y):
            gemm(handle, op_t, op_n, M, B, N, alpha, d, N, x, N, beta, y, M)

    def run(X):
        Y = new(y_shape, dtype)
        handle = device.get_cublas_handle()
        cublas.setStream(handle, stream_of().ptr)
        cublas.setPointerMode(handle, host_mode)     # alpha and beta live on the host
        call(handle, X.data.ptr, Y.data.ptr)
        return Y
    run.kept = (D, one, zero)    # the run reads their memory by address: keep them alive
    return run
