"""Probe: where a fresh copy's first product spends its host time (the scale suite's
``fresh_copy`` rows), by ``cProfile`` over the first products of several unpickled copies.

    PYTHONPATH=$PWD python3 benchmarks/probe_first_product.py [butterfly|dft] [rows]

Prints the synchronised time of a warm product and of each copy's first, then the functions
that took the most host time in the first products (cumulative, then own).
"""
import cProfile
import pickle
import pstats
import sys

import cupy
import numpy

import kscupy as ks
from kscupy.bench.scale import synchronised_seconds

COPIES = 20


def main(kind="butterfly", rows="50000"):
    if kind == "dft":
        op, dtype = ks.dft(1024, dtype=numpy.complex64, xp=cupy), numpy.complex64
    else:
        op, dtype = ks.butterfly(1024, dtype=numpy.float32, xp=cupy, seed=0), numpy.float32
    X = cupy.random.default_rng(0).standard_normal((int(rows), 1024), dtype=numpy.float32)
    X = X.astype(dtype)
    op.matmul(X, layout="bsf")
    warm = numpy.median([synchronised_seconds(lambda: op.matmul(X, layout="bsf")) for _ in range(20)])
    pickled = pickle.dumps(op)
    twins = [pickle.loads(pickled) for _ in range(COPIES)]
    first = [synchronised_seconds(lambda: twin.matmul(X, layout="bsf")) for twin in twins[:5]]
    print(f"{kind}: warm {warm * 1e3:.3f} ms, first products {[round(t * 1e3, 3) for t in first]} ms")
    profile = cProfile.Profile()
    for twin in twins[5:]:
        cupy.cuda.get_current_stream().synchronize()
        profile.enable()
        twin.matmul(X, layout="bsf")
        cupy.cuda.get_current_stream().synchronize()
        profile.disable()
    stats = pstats.Stats(profile).strip_dirs()
    print(f"host time of {COPIES - 5} first products:")
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main(*sys.argv[1:])
