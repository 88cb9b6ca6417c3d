"""Whether one cuBLAS GEMM's time depends on its buffers or on when it runs: CuPy's
``x @ D.T`` with four copies of ``D`` at different addresses and kscupy's prepared call
(``kernels/gemm.prepare``) with two, float16 batch-size-first, ``M = N`` (default 1024) at
B = 25088, in five rounds of back-to-back calls (CUDA events), every method once a round;
then the same GEMM into one kept output.

    PYTHONPATH=$PWD python3 benchmarks/probe_gemm_rounds.py --side 1024 --out rounds.json
"""
import argparse
import json

import cupy
import numpy

from kscupy.bench.timing import run_metadata, throughput_seconds
from kscupy.kernels import gemm

B = 25088
ROUNDS = 5


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=1024)
    parser.add_argument("--out", default="probe_gemm_rounds.json")
    args = parser.parse_args()
    M = N = args.side
    dtype = numpy.float16
    rng = cupy.random.default_rng(0)
    inputs = [rng.standard_normal((B, N), dtype=numpy.float32).astype(dtype) for _ in range(3)]
    Ds, pads = [], []
    for k in range(4):
        pads.append(cupy.empty(k * 1000 + 1, dtype))      # moves the next allocation
        Ds.append(rng.standard_normal((M, N), dtype=numpy.float32).astype(dtype))
    methods = {f"cupy D{k}": (lambda D: lambda x: x @ D.T)(D) for k, D in enumerate(Ds)}
    methods.update({f"kscupy D{k}": gemm.prepare(Ds[k], inputs[0], "bsf") for k in range(2)})
    Y = cupy.empty((B, M), dtype)
    methods["cupy D0, output kept"] = lambda x: cupy.matmul(x, Ds[0].T, out=Y)
    rounds = {name: [] for name in methods}
    for _ in range(ROUNDS):
        for name, fn in methods.items():
            rounds[name].append(throughput_seconds(fn, inputs, budget_s=0.06, rounds=1))
    meta = run_metadata()
    result = {"device": meta["gpu"], "commit": meta["commit"], "command": meta["command"],
              "timing": "events", "side": M, "batch": B, "dtype": "float16", "layout": "bsf",
              "D_offset_in_2MiB": [D.data.ptr % (2 << 20) for D in Ds],
              "seconds_per_round": rounds}
    for name, ts in rounds.items():
        print(f"{name:22s}", " ".join(f"{t * 1e6:7.1f}" for t in ts))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
