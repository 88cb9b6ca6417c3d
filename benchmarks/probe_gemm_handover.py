"""Whether a 16-bit tensor's cuBLAS run should go to PyTorch (``foreign._torch_blas``: its
``matmul`` or ``bmm`` by a view of kscupy's kept matrix or blocks) or stay kscupy's own call,
on the interop suite's rows where ``auto_torch`` trailed PyTorch's dense product.

Per row, interleaved (CUDA events over back-to-back calls, cycling through ``--inputs``
operands as the suite does, so that X is not held in L2): PyTorch's ``D @ X`` (the suite's
``base_torch_dense``), kscupy's own call on CuPy arrays, and on tensors through PyTorch and
through kscupy's own call (the hand-over switched off), for ``dense`` and ``bmm``; then the
host's time a call of each (``perf_counter``). Results are checked against PyTorch's.

    PYTHONPATH=$PWD python3 benchmarks/probe_gemm_handover.py [a,b,c,d:layout ...]

For the kernels each runs: ``ncu --metrics gpu__time_duration.sum --csv python3
benchmarks/probe_gemm_handover.py --calls 2 ...`` (each method called twice, in order).
"""
import argparse

import cupy
import numpy
import torch

from kscupy import KSMatrix
from kscupy.bench.timing import host_seconds, interleaved_seconds, run_metadata
from kscupy.core import arrays, foreign

BATCH = 25088
ROWS = ["1,48,192,4:bsl", "1,96,96,2:bsl", "1,96,96,2:bsf", "1,96,384,4:bsf",
        "1,256,1024,3:bsf"]


def methods_of(pattern, layout, inputs):
    """``({name: fn(x)}, tensors)``: the calls compared on one row, ``x`` one of
    ``inputs`` (CuPy arrays; ``tensors`` maps each to its PyTorch view)."""
    K = KSMatrix(KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
                 .values.astype(arrays.BFLOAT16))
    D = torch.from_dlpack(cupy.ascontiguousarray(K.todense()))
    tensors = {id(x): torch.from_dlpack(x) for x in inputs}
    own = foreign._torch_blas

    def kscupys_own(backend):
        def call(x):
            foreign._torch_blas = lambda *args: None         # keep kscupy's own call
            try:
                return K.matmul(tensors[id(x)], layout=layout, backend=backend)
            finally:
                foreign._torch_blas = own
        return call
    methods = {"torch D @ X": (lambda x: D @ tensors[id(x)]) if layout == "bsl"
               else (lambda x: tensors[id(x)] @ D.T)}
    for backend in ("dense", "bmm"):
        methods[f"{backend} on CuPy"] = \
            (lambda b: lambda x: K.matmul(x, layout=layout, backend=b))(backend)
        methods[f"{backend} on tensors, PyTorch's call"] = \
            (lambda b: lambda x: K.matmul(tensors[id(x)], layout=layout, backend=b))(backend)
        methods[f"{backend} on tensors, kscupy's call"] = kscupys_own(backend)
    return methods


def as_tensor(y):
    return y if isinstance(y, torch.Tensor) else torch.from_dlpack(y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*", default=ROWS)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--calls", type=int, default=0,
                        help="call each method this many times, in order, and time nothing")
    args = parser.parse_args()
    meta = run_metadata()
    print(meta["gpu"], meta["commit"], "torch", torch.__version__,
          "preferred BLAS:", torch.backends.cuda.preferred_blas_library(), flush=True)
    for spec in args.rows:
        pattern, layout = spec.split(":")
        pattern = tuple(int(v) for v in pattern.split(","))
        a, b, c, d = pattern
        N = a * c * d
        shape = (N, BATCH) if layout == "bsl" else (BATCH, N)
        rng = cupy.random.default_rng(0)
        inputs = [rng.standard_normal(shape, dtype=numpy.float32).astype(arrays.BFLOAT16)
                  for _ in range(args.inputs)]
        methods = methods_of(pattern, layout, inputs)
        if args.calls:
            for name, fn in methods.items():
                print("calling", name, flush=True)
                for _ in range(args.calls):
                    fn(inputs[0])
                torch.cuda.synchronize()
            continue
        ref = as_tensor(methods["torch D @ X"](inputs[0])).double()
        for name, fn in methods.items():
            err = float((as_tensor(fn(inputs[0])).double() - ref).abs().max()
                        / ref.abs().max())
            assert err < 1e-2, (spec, name, err)
        seconds = interleaved_seconds(methods, inputs, rounds=7)
        print(spec, "events us:", {k: round(v * 1e6, 1) for k, v in seconds.items()})
        host = {k: round(host_seconds(lambda: fn(inputs[0]), 200, warmup=5) * 1e6, 1)
                for k, fn in methods.items()}
        print(spec, "host us:", host, flush=True)


if __name__ == "__main__":
    main()
