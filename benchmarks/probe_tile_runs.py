"""How many tiles a block of the tensor-core kernel should walk on short products
(``operands.tile_run``): the rule in use (runs only where four waves of blocks remain)
against one wave of runs (as many tiles a block as fill the resident blocks once) and fixed
runs of 2 and 4, with ``backend="kernel"`` on the short rows of the interop and parity
suites, where the kernel is bound by the latency of its copies (Nsight Compute on
(1, 96, 96, 2) bf16 bsl: 784 one-tile blocks, two waves, 10-18% occupancy). CUDA events
over back-to-back calls, the rules of a row interleaved; each result checked against the
default rule's.

    PYTHONPATH=$PWD python3 benchmarks/probe_tile_runs.py
"""
import cupy
import numpy

from kscupy import KSMatrix
from kscupy.bench.timing import interleaved_seconds
from kscupy.core import arrays
from kscupy.kernels import operands

default_rule = operands.tile_run
RULES = {"default": default_rule,
         "one wave": lambda tiles, resident: max(1, min(operands.TILE_RUN,
                                                        -(-tiles // resident))),
         "2": lambda tiles, resident: 2,
         "4": lambda tiles, resident: 4}
#: (pattern, batch): the interop suite's shortest bfloat16 rows, a medium one, a short batch
ROWS = [((1, 96, 96, 2), 25088), ((1, 48, 192, 4), 25088), ((1, 96, 384, 4), 25088),
        ((2, 48, 48, 16), 25088), ((1, 256, 256, 4), 25088), ((4, 64, 64, 4), 4096)]


def runs_of(values, X, layout):
    """``{rule: fn}``: a product prepared under each rule (a fresh matrix each, so that no
    prepared run is shared)."""
    fns = {}
    for name, rule in RULES.items():
        operands.tile_run = rule
        K = KSMatrix(values)
        K.matmul(X, layout=layout, backend="kernel")          # prepared under this rule
        fns[name] = lambda x, K=K: K.matmul(x, layout=layout, backend="kernel")
    operands.tile_run = default_rule
    return fns


def main():
    print(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode())
    for dtype in (arrays.BFLOAT16, numpy.dtype(numpy.float16), numpy.dtype(numpy.float32)):
        if dtype is None:
            continue
        for pattern, B in ROWS:
            for layout in ("bsl", "bsf"):
                values = KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy,
                                         seed=0).values.astype(dtype)
                N = KSMatrix(values).shape[1]
                X = cupy.random.default_rng(0).standard_normal(
                    (N, B) if layout == "bsl" else (B, N), dtype=numpy.float32).astype(dtype)
                fns = runs_of(values, X, layout)
                ref = fns["default"](X).astype(numpy.float64)
                for name, fn in fns.items():
                    assert float(cupy.abs(fn(X).astype(numpy.float64) - ref).max()) <= \
                        1e-6 * float(cupy.abs(ref).max()), (pattern, name)
                seconds = interleaved_seconds(fns, [X], rounds=7)
                print(pattern, dtype.name, layout, B,
                      {k: round(v * 1e6, 1) for k, v in seconds.items()}, flush=True)


if __name__ == "__main__":
    main()
