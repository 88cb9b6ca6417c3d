"""Probe: the tensor-core kernel in its in-group order (batch-size-first, d = 1) beside
``kernel_bsl`` and ``bmm``, on 16 random d = 1 patterns per dtype, written as engine-like rows
that ``fit_costs.py`` fits the in-group constants of ``kscupy.costs`` to (the engine grid
has a single d = 1 row).

    PYTHONPATH=$PWD python3 benchmarks/probe_ingroup.py benchmarks/results/ingroup_h200.json
    python3 benchmarks/fit_costs.py benchmarks/results/ingroup_h200.json
    python3 benchmarks/fit_costs.py --bmm benchmarks/results/ingroup_h200.json

(the second fits bmm's ``groups_rows`` keys, the GEMMs of batch-size-first with d = 1).

An optional second argument names the dtypes (default float32,float64,float16,complex64).
"""
import dataclasses
import json
import pathlib
import sys

import cupy
import numpy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import kscupy as ks  # noqa: E402
from kscupy.core import device  # noqa: E402
from kscupy.bench.timing import time_fn  # noqa: E402


def main(out, dtypes="float32,float64,float16,complex64"):
    rng = numpy.random.default_rng(11)
    sides = [48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
    pats = set()
    while len(pats) < 16:
        b, c = rng.choice(sides, 2)
        a = int(rng.choice([1, 2, 4, 6, 16, 64]))
        if a * max(b, c) <= 16384:
            pats.add((a, int(b), int(c), 1))
    pats = sorted(pats)
    rows = []
    batches = {"float32": 25088, "float64": 8192, "float16": 25088, "complex64": 8192}
    for dtype, B in ((name, batches[name]) for name in dtypes.split(",")):
        for pat in pats:
            K = ks.KSMatrix.random(pat, dtype=dtype, xp=cupy, seed=1)
            M, N = K.shape
            X = cupy.random.default_rng(0).standard_normal((B, N)).astype(dtype)
            s = {}
            for name in ("kernel", "kernel_bsl", "bmm"):
                s[name] = time_fn(lambda x: K.matmul(x, layout="bsf", backend=name), [X])
            s["base_cupy_bmm"] = s["bmm"]
            rows.append(dict(pattern=list(pat), layout="bsf", dtype=dtype, precision="default",
                             batch=B, seconds=s))
            print(dtype, pat, {k: round(v * 1e3, 3) for k, v in s.items()}, flush=True)
    json.dump(dict(rates=dataclasses.asdict(device.current()), rows=rows),
              open(out, "w"), indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:3])
