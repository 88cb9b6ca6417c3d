"""Probe: the host time a PyTorch tensor adds to ``K @ X`` (the interop suite's ``auto_torch``
against ``auto``), by CUDA events over back-to-back calls and ``cProfile`` of the tensor
calls::

    PYTHONPATH=$PWD python3 benchmarks/probe_torch_operands.py [a,b,c,d] [dtype] [layout]
"""
import cProfile
import pstats
import sys

import cupy
import numpy
import torch

import kscupy as ks
from kscupy.bench.timing import throughput_seconds
from kscupy.core import arrays

BATCH = 25088


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
    print(f"{pattern} {dtype} {layout}: cupy {cupy_s * 1e6:.1f} us, torch {torch_s * 1e6:.1f} us")
    Y = K.matmul(X, layout=layout)
    for name, fn in {"from_dlpack(t)": lambda: cupy.from_dlpack(T),
                     "torch.from_dlpack(Y)": lambda: torch.from_dlpack(Y),
                     "current_stream": lambda: torch.cuda.current_stream(0)}.items():
        s = throughput_seconds(lambda _: fn(), [None])
        print(f"  {name}: {s * 1e6:.1f} us a call (events)")
    profile = cProfile.Profile()
    torch.cuda.synchronize()
    profile.enable()
    for _ in range(200):
        K.matmul(T, layout=layout)
    torch.cuda.synchronize()
    profile.disable()
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main(*sys.argv[1:])
