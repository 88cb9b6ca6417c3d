"""Probe: the host time a PyTorch tensor adds to ``K @ X`` (the interop suite's ``auto_torch``
against ``auto``), by CUDA events over back-to-back calls and ``cProfile`` of the tensor
calls::

    PYTHONPATH=$PWD python3 benchmarks/probe_torch_operands.py [a,b,c,d] [dtype] [layout]

Each step is given as host time a call (enqueue only) / CUDA-event time of back-to-back calls.
"""
import cProfile
import pstats
import sys

import cupy
import numpy
import torch

import kscupy as ks
from kscupy.bench.timing import host_seconds, throughput_seconds
from kscupy.core import arrays, foreign
from kscupy.core.problem import problem_of
from kscupy.engine import decide

BATCH = 25088


def wrapped(t, dtype):
    """A CuPy view of a CUDA tensor made from its pointer, shape and strides (no DLPack)."""
    size = t.element_size()
    memory = cupy.cuda.UnownedMemory(t.data_ptr(), t.numel() * size, t, t.device.index)
    return cupy.ndarray(tuple(t.shape), dtype, cupy.cuda.MemoryPointer(memory, 0),
                        tuple(s * size for s in t.stride()))


def main(pattern="2,48,48,16", dtype="bfloat16", layout="bsl"):
    pattern = tuple(int(v) for v in pattern.split(","))
    dt = arrays.BFLOAT16 if dtype == "bfloat16" else numpy.dtype(dtype)
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    K = ks.KSMatrix(K.values.astype(dt))
    M, N = K.shape
    shape = (N, BATCH) if layout == "bsl" else (BATCH, N)
    X = cupy.random.default_rng(0).standard_normal(shape, dtype=numpy.float32).astype(dt)
    T = torch.from_dlpack(X)
    cupy_s = throughput_seconds(lambda x: K.matmul(x, layout=layout), [X])
    torch_s = throughput_seconds(lambda t: K.matmul(t, layout=layout), [T])
    choice = decide.choose(problem_of(K.factor, X, layout)).backend
    print(f"{pattern} {dtype} {layout}: cupy {cupy_s * 1e6:.1f} us, torch {torch_s * 1e6:.1f} us"
          f" (auto: {choice})")
    Y = K.matmul(X, layout=layout)
    taken = foreign.take(T)
    runs = K._runs()
    shape, strides, dtype_, address, device_id = foreign._tensor_parts(T)
    run = runs.kernel_run(shape, strides, dtype_, address, layout, "auto", device_id)
    if run is None:
        print("  no kernel run kept for the tensor: its products go through foreign.take")
        return
    result = T.new_empty(run.y_shape)
    D = torch.from_dlpack(K.todense().astype(dt))
    steps = {"K @ cupy": lambda: K.matmul(X, layout=layout),
             "K @ tensor": lambda: K.matmul(T, layout=layout),
             "K @ tensor, backend='kernel'": lambda: K.matmul(T, layout=layout,
                                                              backend="kernel"),
             "K @ tensor, backend='dense'": lambda: K.matmul(T, layout=layout,
                                                             backend="dense"),
             "torch dense matmul": (lambda: D @ T) if layout == "bsl" else (lambda: T @ D.T),
             # the tensor fast path (foreign.tensor_product), step by step
             "is_foreign": lambda: foreign.is_foreign(T),
             "_tensor_parts": lambda: foreign._tensor_parts(T),
             "kernel_run lookup": lambda: runs.kernel_run(shape, strides, dtype_, address,
                                                          layout, "auto", device_id),
             "new_empty": lambda: T.new_empty(run.y_shape),
             "empty_like": lambda: torch.empty_like(T),
             "cupy.ndarray": lambda: cupy.ndarray(run.y_shape, dtype_),
             "stream check": lambda: (cupy.cuda.runtime.getDevice(),
                                      foreign._raw_stream(torch, 0),
                                      cupy.cuda.get_current_stream().ptr),
             "enter and leave the stream": lambda: (taken.stream.__enter__(),
                                                    taken.stream.__exit__(None, None, None)),
             "launch": lambda: run.launch(address, result.data_ptr()),
             "data_ptr": lambda: result.data_ptr(),
             # the first product's path (a CuPy view in, a tensor back through DLPack)
             "foreign.take(t)": lambda: foreign.take(T),
             "taken.back(Y)": lambda: taken.back(Y)}
    for name, fn in steps.items():
        s = throughput_seconds(lambda _: fn(), [None])
        print(f"  {name}: {host_seconds(fn, 300, warmup=1) * 1e6:.1f} / {s * 1e6:.1f} us")
    profile = cProfile.Profile()
    torch.cuda.synchronize()
    profile.enable()
    for _ in range(200):
        K.matmul(T, layout=layout)
    torch.cuda.synchronize()
    profile.disable()
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    for spec in sys.argv[1:] or ["1,96,96,2:bsl", "1,96,96,2:bsf", "1,96,384,4:bsf"]:
        pattern, layout = spec.split(":")
        main(pattern, "bfloat16", layout)
