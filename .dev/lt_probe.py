"""Dev probe (issues 56, 54): host and GPU time of the dense product by cublasGemmEx (kscupy's
gemm.prepare) against cuBLASLt with its plan made once (kernels/cublas_lt.py), each on D as
stored and on D^T stored, and PyTorch's own D @ T. Prints host us/call and CUDA-event us/call
back to back (interleaved)."""
import numpy, cupy
import kscupy as ks
from kscupy.bench.timing import host_seconds, interleaved_seconds
from kscupy.core import arrays
from kscupy.kernels import gemm, cublas_lt
from cupy.cuda import device
from cupy_backends.cuda.libs import cublas
try:
    import torch
except ImportError:
    torch = None

ROWS = [((1, 96, 96, 2), "bfloat16", "bsl", 25088), ((1, 96, 96, 2), "bfloat16", "bsf", 25088),
        ((1, 48, 192, 4), "bfloat16", "bsf", 25088), ((1, 512, 512, 2), "bfloat16", "bsf", 25088),
        ((1, 512, 512, 2), "float16", "bsf", 25088), ((1, 1024, 1024, 1), "float32", "bsf", 64),
        ((1, 1024, 1024, 1), "float32", "bsl", 64), ((2, 192, 768, 4), "float32", "bsl", 64),
        ((1, 256, 256, 4), "float32", "bsl", 25088), ((1, 256, 256, 4), "float32", "bsf", 25088),
        ((1, 128, 128, 2), "float64", "bsf", 25088), ((1, 128, 128, 2), "complex64", "bsl", 25088),
        ((1, 64, 64, 4), "float32", "bsf", 1), ((1, 64, 64, 4), "float32", "bsl", 1)]
print(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "Lt available:", cublas_lt.available())
for pattern, dname, layout, B in ROWS:
    dt = numpy.dtype(arrays.BFLOAT16 if dname == "bfloat16" else dname)
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32 if dt.kind != "c" else numpy.complex64,
                           xp=cupy, seed=0)
    K = ks.KSMatrix(K.values.astype(dt))
    M, N = K.shape
    X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N),
                                                   dtype=numpy.float32).astype(dt)
    D = cupy.ascontiguousarray(K.todense())
    DT = cupy.ascontiguousarray(D.T)
    run = gemm.prepare(D, X, layout)
    data, compute, scalar = gemm._types(dt, "default")
    one, zero = gemm._host_scalars(scalar)
    al, be = one.ctypes.data, zero.ctypes.data
    scale = {numpy.float32: 0, numpy.float64: 1, numpy.complex64: 4, numpy.complex128: 5}[scalar.type]
    handle = device.get_cublas_handle()
    Y = cupy.empty(run.y_shape, dt)

    def form(stored):   # (transa, transb, m, n, k, A, lda, B, ldb, ldc), X first in bsl
        if layout == "bsl":
            return (0, 0, B, M, N, None, B, D.data.ptr, N, B) if stored == "D" else \
                   (0, 1, B, M, N, None, B, DT.data.ptr, M, B)
        return (1, 0, M, B, N, D.data.ptr, N, None, N, M) if stored == "D" else \
               (0, 0, M, B, N, DT.data.ptr, M, None, N, M)

    def ex(stored):
        ta, tb, m, n, k, A, lda, Bm, ldb, ldc = form(stored)
        def f(x):
            cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
            a, b = (x.data.ptr, Bm) if A is None else (A, x.data.ptr)
            cublas.gemmEx(handle, ta, tb, m, n, k, al, a, data, lda, b, data, ldb, be, Y.data.ptr,
                          data, ldc, compute, cublas.CUBLAS_GEMM_DEFAULT)
            return Y
        return f

    def lt(stored):
        ta, tb, m, n, k, A, lda, Bm, ldb, ldc = form(stored)
        try:
            plan = cublas_lt.LtGemm(ta, tb, m, n, k, data, lda, ldb, ldc, compute, scale)
        except ValueError as e:
            print("   no Lt plan:", e)
            return None
        y = Y.data.ptr
        def f(x):
            a, b = (x.data.ptr, Bm) if A is None else (A, x.data.ptr)
            plan(al, a, b, be, y, cupy.cuda.get_current_stream().ptr)
            return Y
        f.plan = plan
        return f

    methods = {"kscupy run": run, "gemmEx D": ex("D"), "gemmEx DT": ex("DT"),
               "Lt D": lt("D"), "Lt DT": lt("DT")}
    if torch is not None:
        T, Dt = torch.from_dlpack(X), torch.from_dlpack(D)
        methods["torch dense"] = (lambda x: Dt @ T) if layout == "bsl" else (lambda x: T @ Dt.T)
        methods["K @ T (auto)"] = lambda x: K.matmul(T, layout=layout)
    methods["K @ X (auto)"] = lambda x: K.matmul(x, layout=layout)
    methods = {k: v for k, v in methods.items() if v is not None}
    ref = run(X).astype(numpy.complex128 if dt.kind == "c" else numpy.float64)
    for name, fn in methods.items():
        if "torch" in name or "T (" in name:
            continue
        got = fn(X).astype(ref.dtype)
        err = float(cupy.abs(got - ref).max() / cupy.abs(ref).max())
        assert err < 1e-2, (name, err)
    t = interleaved_seconds(methods, [X], rounds=7)
    h = {k: host_seconds(lambda f=f: f(X), 200, warmup=20) for k, f in methods.items()}
    print(pattern, dname, layout, B, " | ".join(f"{k} {h[k]*1e6:.1f}/{t[k]*1e6:.1f}" for k in methods),
          flush=True)
