"""Which cuBLAS algorithm flag the prepared GEMMs of kscupy/kernels/gemm.py should pass:
``CUBLAS_GEMM_DEFAULT`` or ``CUBLAS_GEMM_DEFAULT_TENSOR_OP`` (what CuPy's and PyTorch's
own GEMMs pass), timed on the dense, group (bmm) and values'-gradient products of the
patterns where the portability suite found ``dense`` or ``bmm`` behind CuPy's or PyTorch's
GEMM, with CuPy's ``matmul`` of the same dense product beside them and each one's error
against float64.

    PYTHONPATH=$PWD python3 benchmarks/probe_gemm_algo.py --out probe_gemm_algo.json
"""
import argparse
import json

import cupy
import numpy

from kscupy import KSMatrix
from kscupy.bench.timing import run_metadata, throughput_seconds
from kscupy.kernels import gemm

PATTERNS = [(1, 128, 512, 6), (1, 256, 64, 12), (1, 1024, 1024, 1), (1, 512, 512, 2),
            (4, 256, 256, 16)]
FLAGS = ("CUBLAS_GEMM_DEFAULT", "CUBLAS_GEMM_DEFAULT_TENSOR_OP")
B = 25088


def _relerr(got, ref):
    got = cupy.asarray(got).astype(numpy.float64)
    return float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))


def rows_of(pattern, layout, dtype):
    K = KSMatrix.random(pattern, dtype=dtype, xp=cupy, seed=0)
    M, N = K.shape
    rng = cupy.random.default_rng(1)
    X = rng.standard_normal((N, B) if layout == "bsl" else (B, N), dtype=numpy.float32)
    G = rng.standard_normal((M, B) if layout == "bsl" else (B, M), dtype=numpy.float32)
    X, G = X.astype(dtype), G.astype(dtype)
    D = K.todense() if M * N <= 2**26 else None
    X64, G64 = X.astype(numpy.float64), G.astype(numpy.float64)
    row = {"pattern": list(pattern), "layout": layout, "dtype": dtype, "seconds": {},
           "relerr": {}}
    a, b, c, d = pattern
    if layout == "bsl":
        grad_ref = cupy.einsum("ikjn,iljn->ijkl", G64.reshape(a, b, d, B),
                               X64.reshape(a, c, d, B))
    else:
        grad_ref = cupy.einsum("nikj,nilj->ijkl", G64.reshape(B, a, b, d),
                               X64.reshape(B, a, c, d))
    y_ref = (K.astype(numpy.float64) @ X64 if layout == "bsl"
             else X64 @ K.astype(numpy.float64).T)
    if D is not None:
        fn = (lambda x: D @ x) if layout == "bsl" else (lambda x: x @ D.T)
        row["seconds"]["cupy_matmul"] = throughput_seconds(fn, [X])
        row["relerr"]["cupy_matmul"] = _relerr(fn(X), y_ref)
    from cupy_backends.cuda.libs import cublas
    for flag in FLAGS:
        gemm._algo = lambda dtype, flag=flag: getattr(cublas, flag)
        gemm._gradient_run.cache_clear()        # its plans hold the flag they were made with
        methods = {"bmm": gemm.prepare_groups(K.factor, X, layout),
                   "values_grad": lambda x: gemm.values_gradient(G, x, pattern, layout)}
        if D is not None:
            methods["dense"] = gemm.prepare(D, X, layout)
        for name, fn in methods.items():
            key = f"{name}|{flag[len('CUBLAS_GEMM_'):]}"
            row["seconds"][key] = throughput_seconds(fn, [X])
            row["relerr"][key] = _relerr(fn(X), grad_ref if name == "values_grad" else y_ref)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    meta = run_metadata()
    result = {"device": meta["gpu"], "commit": meta["commit"], "command": meta["command"],
              "timing": "events", "batch": B, "rows": []}
    for dtype in ("float16", "float32"):
        for pattern in PATTERNS:
            for layout in ("bsl", "bsf"):
                row = rows_of(pattern, layout, dtype)
                result["rows"].append(row)
                print(json.dumps({k: row[k] for k in ("pattern", "layout", "dtype")}),
                      {k: round(v * 1e6, 1) for k, v in row["seconds"].items()}, flush=True)
                with open(args.out, "w") as f:
                    json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
