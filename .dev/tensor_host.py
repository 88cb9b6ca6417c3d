"""Dev probe (issue 56): host time of each step of a PyTorch tensor's product (foreign.tensor_product)
on the short bf16 rows, and which run auto keeps. host us/call (enqueue only) / events us/call."""
import sys, numpy, cupy, torch
import kscupy as ks
from kscupy.bench.timing import host_seconds, throughput_seconds
from kscupy.core import arrays, foreign
for spec in sys.argv[1:]:
    p, layout = spec.split(":")
    pattern = tuple(int(v) for v in p.split(","))
    dt = arrays.BFLOAT16
    K = ks.KSMatrix(ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0).values.astype(dt))
    M, N = K.shape
    B = 25088
    X = cupy.random.default_rng(0).standard_normal((N, B) if layout == "bsl" else (B, N), dtype=numpy.float32).astype(dt)
    T = torch.from_dlpack(X)
    K.matmul(T, layout=layout); K.matmul(X, layout=layout)
    runs = K._runs()
    parts = foreign._tensor_parts(T)
    shape, strides, dtype, address, device_id = parts
    run = runs.kernel_run(shape, strides, dtype, address, layout, "auto", device_id)
    print(spec, "run kept:", type(run).__name__, getattr(run.launch, "__self__", run.launch), flush=True)
    y = T.new_empty(run.y_shape); yp = y.data_ptr()
    ps = foreign._producer_stream(foreign._gpu_cupy(), T, "torch", device_id)
    def with_ps():
        s = foreign._producer_stream(foreign._gpu_cupy(), T, "torch", device_id)
        if s is not None:
            with s:
                pass
    steps = {
        "K.matmul(T)": lambda: K.matmul(T, layout=layout),
        "K.matmul(X)": lambda: K.matmul(X, layout=layout),
        "K @ T dense (backend=dense)": lambda: K.matmul(T, layout=layout, backend="dense"),
        "K @ T kernel (backend=kernel)": lambda: K.matmul(T, layout=layout, backend="kernel"),
        "tensor_product": lambda: foreign.tensor_product(T, runs, layout, "auto"),
        "run.launch": lambda: run.launch(address, yp),
        "_tensor_parts": lambda: foreign._tensor_parts(T),
        "kernel_run": lambda: runs.kernel_run(shape, strides, dtype, address, layout, "auto", device_id),
        "runs.stamp": runs.stamp,
        "new_empty": lambda: T.new_empty(run.y_shape),
        "producer_stream + with": with_ps,
        "_producer_stream": lambda: foreign._producer_stream(foreign._gpu_cupy(), T, "torch", device_id),
        "getDevice": cupy.cuda.runtime.getDevice,
        "_raw_stream": lambda: foreign._raw_stream(torch, 0),
        "get_current_stream": cupy.cuda.get_current_stream,
        "is_foreign": lambda: foreign.is_foreign(T),
        "K._runs": K._runs,
        "T.requires_grad": lambda: T.requires_grad, "T.is_neg()": T.is_neg, "T.layout": lambda: T.layout,
        "T.is_nested": lambda: T.is_nested, "T.get_device()": T.get_device, "T.dtype": lambda: T.dtype,
        "T.shape": lambda: T.shape, "T.stride()": T.stride, "T.data_ptr()": T.data_ptr,
        "torch dense": (lambda: torch.from_dlpack(K.todense()) @ T) if False else None,
    }
    Dt = torch.from_dlpack(cupy.ascontiguousarray(K.todense()))
    steps["torch dense"] = (lambda: Dt @ T) if layout == "bsl" else (lambda: T @ Dt.T)
    for name, fn in steps.items():
        ev = throughput_seconds(lambda _: fn(), [None]) if name.startswith(("K", "torch", "tensor", "run")) else float("nan")
        print(f"  {name}: {host_seconds(fn, 300, warmup=50) * 1e6:.2f} / {ev * 1e6:.2f} us", flush=True)
