"""The host's time of a product per backend: each backend's call repeated back to back
(``perf_counter`` around 300 calls, no synchronisation inside), beside its CUDA-event
throughput (:func:`kscupy.bench.timing.throughput_seconds`) and the cost model's price, and
CuPy's own dense product as the yardstick. On small products the host's time, not the GPU's,
sets the pace of a pipeline; where the GPU's is longer the host loop waits on it, so a
host figure is that of the call only where it is below the events figure.

Float16 and float32, B = 25088 and 64, both layouts, ten patterns of small blocks.

    PYTHONPATH=$PWD python3 benchmarks/probe_host.py --out probe_host.json
"""
import argparse
import json

import cupy
import numpy

import kscupy as ks
from kscupy.bench.timing import host_seconds, run_metadata, throughput_seconds
from kscupy.core import device as devices
from kscupy.core.problem import problem_of
from kscupy.engine import decide, registry

BACKENDS = ("auto", "kernel", "kernel_fma", "kernel_skinny", "bmm", "block_dense", "dense")
PATTERNS = [(1, 64, 64, 3), (1, 64, 64, 6), (1, 96, 96, 2), (1, 48, 192, 4), (1, 384, 96, 2),
            (1, 256, 64, 1), (2, 64, 64, 4), (4, 48, 48, 4), (1, 128, 128, 4),
            (1, 1024, 1024, 1)]
CALLS = 300


def row_of(pattern, dtype, batch, layout):
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    K = ks.KSMatrix(K.values.astype(dtype))
    M, N = K.shape
    X = cupy.random.default_rng(0).standard_normal(
        (N, batch) if layout == "bsl" else (batch, N), dtype=numpy.float32).astype(dtype)
    device = devices.current()
    problem = problem_of(K.factor, X, layout)
    row = {"pattern": list(pattern), "dtype": dtype, "batch": batch, "layout": layout,
           "auto_choice": decide.choose(problem, device).backend, "host_us": {},
           "events_us": {}, "model_us": {}}
    for name in BACKENDS:
        if name != "auto":
            backend = registry.get(name)
            if backend.fits is not None and not backend.fits(problem, device):
                continue
            row["model_us"][name] = round(backend.seconds(problem, device) * 1e6, 2)
        fn = (lambda name: lambda: K.matmul(X, layout=layout, backend=name))(name)
        row["host_us"][name] = round(host_seconds(fn, CALLS, warmup=10) * 1e6, 2)
        row["events_us"][name] = round(
            throughput_seconds(lambda _: fn(), [None], budget_s=0.05) * 1e6, 2)
    D = K.todense()
    dense = (lambda: D @ X) if layout == "bsl" else (lambda: X @ D.T)
    row["host_us"]["cupy_dense"] = round(host_seconds(dense, CALLS, warmup=10) * 1e6, 2)
    row["events_us"]["cupy_dense"] = round(
        throughput_seconds(lambda _: dense(), [None], budget_s=0.05) * 1e6, 2)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="probe_host.json")
    args = parser.parse_args()
    meta = run_metadata()
    result = {"device": meta["gpu"], "commit": meta["commit"], "command": meta["command"],
              "timing": "host: perf_counter over back-to-back calls; events: throughput",
              "rows": []}
    for dtype in ("float16", "float32"):
        for batch in (25088, 64):
            for layout in ("bsl", "bsf"):
                for pattern in PATTERNS:
                    row = row_of(pattern, dtype, batch, layout)
                    print(json.dumps(row), flush=True)
                    result["rows"].append(row)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
