"""Dev probe (issue 54): is kscupy's dense GEMM (gemm.prepare: bsf as gemm(T, N) on D as stored)
slower than CuPy's `x @ D.T` for the same product, and would D^T stored (gemm(N, N)) or another
algo be faster? Rows where auto = dense lost 5-15% to CuPy's dense (portability, H100, 260e73e):
fp16 bsf (1,512,512,2) B=25088; f32 bsf/bsl (1,1024,1024,1) B=64. CUDA events, back to back."""
import cupy, numpy
import kscupy as ks
from kscupy.bench.timing import interleaved_seconds
from kscupy.kernels import gemm
from cupy.cuda import device
from cupy_backends.cuda.libs import cublas

for pattern, dtype, layout, B in [((1, 512, 512, 2), numpy.float16, "bsf", 25088),
                                  ((1, 1024, 1024, 1), numpy.float32, "bsf", 64),
                                  ((1, 1024, 1024, 1), numpy.float32, "bsl", 64),
                                  ((2, 192, 768, 4), numpy.float32, "bsl", 64)]:
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    K = ks.KSMatrix(K.values.astype(dtype))
    M, N = K.shape
    X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N),
                                                   dtype=numpy.float32).astype(dtype)
    D = cupy.ascontiguousarray(K.todense())
    DT = cupy.ascontiguousarray(D.T)
    run = gemm.prepare(D, X, layout)
    handle = device.get_cublas_handle()
    data, compute, scalar = gemm._types(numpy.dtype(dtype), "default")
    one, zero = gemm._host_scalars(scalar)
    al, be = one.ctypes.data, zero.ctypes.data
    Y = cupy.empty(run.y_shape, dtype)

    def nn(algo):   # bsf: Y^T (M x B col-major) = (D^T stored, col-major M x N... ) N, N
        def f(x):
            cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
            if layout == "bsf":   # Y (B, M) = X (B, N) @ DT (N, M): col-major Y^T = DT^T X^T
                cublas.gemmEx(handle, 0, 0, M, B, N, al, DT.data.ptr, data, M, x.data.ptr, data,
                              N, be, Y.data.ptr, data, M, compute, algo)
            else:                 # Y (M, B) = D (M, N) @ X (N, B): col-major Y^T = X^T D^T
                cublas.gemmEx(handle, 0, 1, B, M, N, al, x.data.ptr, data, B, DT.data.ptr, data,
                              M, be, Y.data.ptr, data, B, compute, algo)
            return Y
        return f
    methods = {"kscupy dense": run, "cupy D": (lambda x: D @ x) if layout == "bsl" else (lambda x: x @ D.T),
               "D^T stored, default": nn(cublas.CUBLAS_GEMM_DEFAULT),
               "D^T stored, tensor op": nn(cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP)}
    ref = methods["cupy D"](X)
    for name, fn in methods.items():
        r32 = ref.astype(numpy.float32)
        err = float(cupy.abs(fn(X).astype(numpy.float32) - r32).max() / cupy.abs(r32).max())
        assert err < 1e-2, (name, err)
    t = interleaved_seconds(methods, [X], rounds=7)
    print(pattern, numpy.dtype(dtype).name, layout, B, {k: round(v * 1e6, 1) for k, v in t.items()}, flush=True)
