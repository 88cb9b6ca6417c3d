"""Probe for Nsight Compute: launches the values' gradient kernel alone, a few times, for one
pattern, dtype and layout at B = 25088 (the gradients suite's batch), so that ``ncu`` can
profile one warm launch::

    ncu -k regex:ks_values_grad --launch-skip 2 --launch-count 1 --section SpeedOfLight \
        python3 benchmarks/probe_values_grad_kernel.py 2,128,128,4 float16 bsl
"""
import sys

import cupy
import numpy

from kscupy.kernels import ks_values_grad

BATCH = 25088


def main(pattern, dtype="float16", layout="bsl"):
    a, b, c, d = (int(v) for v in pattern.split(","))
    rng = cupy.random.default_rng(0)
    shape_x, shape_g = ((a * c * d, BATCH), (a * b * d, BATCH)) if layout == "bsl" else \
        ((BATCH, a * c * d), (BATCH, a * b * d))
    X = rng.standard_normal(shape_x, dtype=numpy.float32).astype(dtype)
    G = rng.standard_normal(shape_g, dtype=numpy.float32).astype(dtype)
    for _ in range(4):
        ks_values_grad.values_gradient(G, X, (a, b, c, d), layout)
    cupy.cuda.get_current_stream().synchronize()


if __name__ == "__main__":
    main(*sys.argv[1:])
