"""The scale suite: what a copy of an operator costs on its first product (an operator
shipped to a dask worker, unpickled, deep-copied).

    python -m kscupy bench --suite scale --out bench-results

Rows ``{"suite": "fresh_copy", "operator": ..., "rows": ..., "first_s": ..., "warm_s":
...}``: ``first_s`` the median over ``COPIES`` unpickled copies of the wall time of each
copy's first product (the batch-size-first ``X @ op.T`` of ``--rows`` rows, synchronised),
after the original ran once in the process; ``warm_s`` the median of the same product
repeated on the original. Both are latencies (host time included), since a fresh copy's
cost is host time: planning, preparing launches.
"""
from __future__ import annotations

import json
import pathlib
import pickle
import time

import numpy

try:
    import cupy
except ImportError:
    cupy = None

from .. import butterfly, dft
from ..arguments import positive_int
from .timing import run_metadata

#: The operators of the issue's target, by name: (factory, dtype).
OPERATORS = {"dft(1024)": (lambda dtype: dft(1024, dtype=dtype, xp=cupy), numpy.complex64),
             "butterfly(1024)": (lambda dtype: butterfly(1024, dtype=dtype, xp=cupy, seed=0),
                                 numpy.float32)}
#: Copies timed per operator, and warm products.
COPIES = 5
WARM = 20


def add_arguments(parser):
    group = parser.add_argument_group("scale suite")
    group.add_argument("--rows", type=positive_int, default=50000,
                       help="rows of the batch-size-first operand (default 50000)")


def _synchronised_seconds(fn):
    cupy.cuda.get_current_stream().synchronize()
    t0 = time.perf_counter()
    fn()
    cupy.cuda.get_current_stream().synchronize()
    return time.perf_counter() - t0


def fresh_copy_row(name, rows):
    """One row: the first product of fresh copies of ``OPERATORS[name]`` against the warm
    product of the original."""
    make, dtype = OPERATORS[name]
    op = make(dtype)
    rng = cupy.random.default_rng(0)
    X = rng.standard_normal((rows, op.shape[1]), dtype=numpy.float32).astype(dtype)
    op.matmul(X, layout="bsf")                       # compiles, plans: the process is warm
    warm = [_synchronised_seconds(lambda: op.matmul(X, layout="bsf")) for _ in range(WARM)]
    pickled = pickle.dumps(op)
    first = []
    for _ in range(COPIES):
        twin = pickle.loads(pickled)
        first.append(_synchronised_seconds(lambda: twin.matmul(X, layout="bsf")))
    return {"suite": "fresh_copy", "operator": name, "dtype": numpy.dtype(dtype).name,
            "rows": rows, "first_s": float(numpy.median(first)),
            "warm_s": float(numpy.median(warm)), "first_all_s": first}


def main(args, baselines=None):
    out = pathlib.Path(args.out)
    meta = run_metadata()
    result = {"device": meta["gpu"], "commit": meta["commit"], "date": meta["date"],
              "command": meta["command"], "cupy": meta["cupy"], "kscupy": meta["kscupy"],
              "rows": [fresh_copy_row(name, args.rows) for name in OPERATORS]}
    out.write_text(json.dumps(result, indent=1))
    print(f"\n{result['device']}")
    for r in result["rows"]:
        print(f"{r['operator']:16s} first product of a copy {r['first_s'] * 1e3:8.3f} ms, "
              f"warm {r['warm_s'] * 1e3:8.3f} ms ({r['first_s'] / r['warm_s']:.2f}x)")
