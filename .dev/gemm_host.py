"""Dev probe (issue 56): where the host time of kscupy's dense GEMM call goes, against
PyTorch's own dense product, on (1,96,96,2) bf16 bsl B=25088 (the row where auto_torch trails
torch's dense). Prints host us/call (enqueue only) / CUDA-event us/call back to back."""
import sys
import cupy, numpy, torch
import kscupy as ks
from kscupy.bench.timing import host_seconds, throughput_seconds
from kscupy.core import arrays, foreign
from kscupy.kernels import gemm
from cupy.cuda import device, get_current_stream
from cupy_backends.cuda.libs import cublas

pattern = tuple(int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1,96,96,2").split(","))
layout = sys.argv[2] if len(sys.argv) > 2 else "bsl"
dt = arrays.BFLOAT16
K = ks.KSMatrix(ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0).values.astype(dt))
M, N = K.shape
B = 25088
X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N),
                                               dtype=numpy.float32).astype(dt)
D = cupy.ascontiguousarray(K.todense())
run = gemm.prepare(D, X, layout)
Y = cupy.empty(run.y_shape, dt)
T, Dt = torch.from_dlpack(X), torch.from_dlpack(D)
Yt = torch.empty(run.y_shape, dtype=torch.bfloat16, device="cuda")
handle = device.get_cublas_handle()
s = get_current_stream()
data, compute, scalar = gemm._types(numpy.dtype(dt), "default")
algo = gemm._algo(numpy.dtype(dt))
one, zero = gemm._host_scalars(scalar)
al, be = one.ctypes.data, zero.ctypes.data
x, y, d = X.data.ptr, Y.data.ptr, D.data.ptr
if layout == "bsl":
    raw = lambda: cublas.gemmEx(handle, 0, 0, B, M, N, al, x, data, B, d, data, N, be, y, data, B,
                                compute, algo)
else:
    raw = lambda: cublas.gemmEx(handle, 1, 0, M, B, N, al, d, data, N, x, data, N, be, y, data, M,
                                compute, algo)
import ctypes
from kscupy.kernels import cublas_direct
lib = ctypes.CDLL(cublas.__file__)
if not hasattr(lib, "cublasSetWorkspace_v2"):
    lib = ctypes.CDLL(cublas_direct.library_path(cublas.getVersion(handle) // 10000))
set_ws = lib.cublasSetWorkspace_v2
set_ws.argtypes, set_ws.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
WS = cupy.empty(32 * 2**20, cupy.uint8)
def with_workspace():
    cublas.setStream(handle, s.ptr)
    set_ws(handle, WS.data.ptr, WS.nbytes)
    raw()
def stream_then_gemm():
    cublas.setStream(handle, s.ptr)
    raw()
steps = {
    "setStream + gemmEx": stream_then_gemm,
    "setStream + setWorkspace(32 MiB) + gemmEx": with_workspace,
    "run.launch (kscupy's call)": lambda: run.launch(x, y),
    "K.matmul(X) (cupy, auto)": lambda: K.matmul(X, layout=layout),
    "K.matmul(T) (tensor, auto)": lambda: K.matmul(T, layout=layout),
    "foreign.tensor_product": lambda: foreign.tensor_product(T, K._runs(), layout, "auto"),
    "parts+lookup+new_empty": lambda: (lambda p: T.new_empty(K._runs().kernel_run(
        p[0], p[1], p[2], p[3], layout, "auto", p[4]).y_shape))(foreign._tensor_parts(T)),
    "torch D @ T": (lambda: Dt @ T) if layout == "bsl" else (lambda: T @ Dt.T),
    "torch.mm out=": (lambda: torch.mm(Dt, T, out=Yt)) if layout == "bsl" else (lambda: torch.mm(T, Dt.T, out=Yt)),
    "gemmEx alone": raw,
    "get_cublas_handle": device.get_cublas_handle,
    "get_current_stream": get_current_stream,
    "is_capturing": s.is_capturing,
    "setStream": lambda: cublas.setStream(handle, s.ptr),
    "getStream": lambda: cublas.getStream(handle),
    "setPointerMode": lambda: cublas.setPointerMode(handle, 0),
    "getPointerMode": lambda: cublas.getPointerMode(handle),
    "torch new_empty": lambda: T.new_empty(run.y_shape),
    "torch.empty": lambda: torch.empty(run.y_shape, dtype=torch.bfloat16, device="cuda"),
}
K.matmul(T, layout=layout)
for name, fn in steps.items():
    t = throughput_seconds(lambda _: fn(), [None])
    print(f"  {name}: {host_seconds(fn, 300, warmup=50) * 1e6:.2f} / {t * 1e6:.2f} us", flush=True)
cublas.setStream(handle, s.ptr)
set_ws(handle, WS.data.ptr, WS.nbytes)
t = throughput_seconds(lambda _: raw(), [None])
print(f"  gemmEx alone, a 32 MiB workspace kept: {host_seconds(raw, 300, warmup=50) * 1e6:.2f} / {t * 1e6:.2f} us")
