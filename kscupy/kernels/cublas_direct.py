"""cuBLAS's GEMM entry points called through ctypes, for products captured in CUDA graphs.

CuPy's cuBLAS bindings refuse every call while a stream is being captured (its stream
capture support leaves cuBLAS out, cupy/cupy#6290), though cuBLAS captures its GEMMs: host
scalars are read when the call is captured, and since CUDA 12.2 its workspace comes from a
stream-ordered allocation. :mod:`.gemm` calls CuPy's bindings outside a capture and,
inside one, :func:`direct`: the same functions with the same arguments, calling the cuBLAS
library CuPy's bindings call, on CuPy's handle.
"""
from __future__ import annotations

import ctypes
import functools

__all__ = ["direct", "Direct", "library_path"]


def library_path(major: int, maps: str = "/proc/self/maps") -> str:
    """The path of the cuBLAS library (not cuBLASLt) of major version ``major`` mapped into
    this process (another library may bring a cuBLAS of its own: PyTorch's wheels do)."""
    found = set()
    with open(maps) as f:
        for line in f:
            path = line.split(maxsplit=5)[-1].strip()
            name = path.rsplit("/", 1)[-1]
            if name == f"libcublas.so.{major}" or name.startswith(f"libcublas.so.{major}."):
                found.add(path)
    if len(found) != 1:
        what = "is not loaded" if not found else f"is loaded {len(found)} times"
        raise RuntimeError(f"cuBLAS {major} {what} in this process ({', '.join(sorted(found))}"
                           f"): kscupy cannot call CuPy's cuBLAS while a CUDA graph is "
                           f"captured; capture the product with a kernel backend "
                           f"(backend='kernel') instead")
    return found.pop()


class Direct:
    """``setStream``, ``setPointerMode``, ``gemmEx`` and ``gemmStridedBatchedEx`` with CuPy's
    signatures (``cupy_backends.cuda.libs.cublas``), calling cuBLAS through ``lib`` (a
    ``ctypes.CDLL`` whose symbols are cuBLAS's)."""

    def __init__(self, lib):
        p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        self._set_stream = self._bind(lib.cublasSetStream_v2, [p, p])
        self._set_pointer_mode = self._bind(lib.cublasSetPointerMode_v2, [p, i])
        # handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
        # Ctype, ldc, computeType, algo
        self._gemm = self._bind(lib.cublasGemmEx,
                                [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i])
        # ... with strideA, strideB, strideC after lda, ldb, ldc and batchCount after strideC
        self._gemm_batched = self._bind(
            lib.cublasGemmStridedBatchedEx,
            [p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p, p, i, i, ll, i, i, i])

    @staticmethod
    def _bind(fn, argtypes):
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        return fn

    @staticmethod
    def _check(status, name):
        if status != 0:
            raise RuntimeError(f"{name} failed with cuBLAS status {status}")

    def setStream(self, handle, stream):
        self._check(self._set_stream(handle, stream), "cublasSetStream")

    def setPointerMode(self, handle, mode):
        self._check(self._set_pointer_mode(handle, mode), "cublasSetPointerMode")

    def gemmEx(self, *args):
        self._check(self._gemm(*args), "cublasGemmEx")

    def gemmStridedBatchedEx(self, *args):
        self._check(self._gemm_batched(*args), "cublasGemmStridedBatchedEx")


@functools.lru_cache(maxsize=None)
def direct() -> Direct:
    """:class:`Direct` on CuPy's cuBLAS: the library its binding module links against
    (``dlsym`` through the module's handle searches its dependencies), else the one mapped
    into the process with the major version CuPy's handle reports."""
    from cupy.cuda import device
    from cupy_backends.cuda.libs import cublas
    module = ctypes.CDLL(cublas.__file__)
    if hasattr(module, "cublasGemmStridedBatchedEx"):
        return Direct(module)
    return Direct(ctypes.CDLL(library_path(cublas.getVersion(device.get_cublas_handle())
                                           // 10000)))
