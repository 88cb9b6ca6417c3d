"""Probe: ``bmm`` (cuBLAS's strided-batched GEMM on the groups where they lie,
``kernels/gemm.prepare_groups``) and ``bmm_tf32`` beside PyTorch's BMM (the paper's permute /
``torch.bmm`` / permute, TF32 allowed for the TF32 rows) on the engine's default sample
(``engine.py``), every dtype at its engine batch, both layouts, each result checked against
the float64 oracle. The rows are the data for ``costs.bmm_seconds``; the kernel's times on
the same rows are in the ``engine*.json`` results.

    PYTHONPATH=$PWD python3 benchmarks/probe_bmm.py --out benchmarks/results/bmm_groups.json
"""
import argparse
import dataclasses
import json
import pathlib
import sys

import cupy
import numpy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import kscupy as ks  # noqa: E402
from kscupy.core import device  # noqa: E402
from kscupy.engine import single  # noqa: E402
from torch_baselines import torch_bmm  # noqa: E402
from kscupy.bench.engine import BATCH, oracle, relative_error  # noqa: E402
from kscupy.bench.grid import paper_grid, stratified_sample  # noqa: E402
from kscupy.bench.timing import progress, run_metadata, time_fn  # noqa: E402

#: (dtype, precision) -> the kscupy methods timed
CASES = {("float32", "default"): "bmm", ("float32", "tf32"): "bmm_tf32",
         ("float16", "default"): "bmm", ("float64", "default"): "bmm",
         ("complex64", "default"): "bmm"}


def probe_row(pattern, layout, dtype, precision, method):
    B = BATCH[dtype]
    K = ks.KSMatrix.random(pattern, dtype=dtype, xp=cupy, seed=0)
    M, N = K.shape
    rng = cupy.random.default_rng(1)
    shape = (N, B) if layout == "bsl" else (B, N)
    X = rng.standard_normal(shape, dtype=numpy.float32).astype(dtype)
    if numpy.dtype(dtype).kind == "c":
        X += 1j * rng.standard_normal(shape, dtype=numpy.float32)
    runs = {method: single.prepare(K.factor, X, layout, method)}
    tb = torch_bmm(K.blocks, layout, tf32=precision == "tf32")
    if tb is not None:
        runs["base_torch_bmm"] = tb
    row = {"pattern": list(pattern), "layout": layout, "dtype": dtype, "precision": precision,
           "batch": B, "seconds": {}, "relerr": {}}
    ref = oracle(K, X, layout)
    for name, run in runs.items():
        Y = run(X)
        if not isinstance(Y, cupy.ndarray):
            Y = cupy.from_dlpack(Y)
        row["relerr"][name] = relative_error(Y, ref, layout)
        del Y
        row["seconds"][name] = time_fn(run, [X], budget_s=0.05, max_repeat=10)
    del X, runs
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--cases", default=",".join(f"{d}:{p}" for d, p in CASES))
    args = parser.parse_args(argv)
    patterns = stratified_sample(paper_grid(), args.count)
    cases = [tuple(c.split(":")) for c in args.cases.split(",")]
    rows = []
    result = dict(run_metadata(), rates=dataclasses.asdict(device.current()), rows=rows)
    todo = [(p, lay, d, prec) for d, prec in cases for p in patterns for lay in ("bsl", "bsf")]
    for p, lay, d, prec in progress(todo, desc="bmm"):
        rows.append(probe_row(p, lay, d, prec, CASES[(d, prec)]))
        pathlib.Path(args.out).write_text(json.dumps(result))
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    for d, prec in cases:
        for lay in ("bsl", "bsf"):
            rs = [r for r in rows if (r["dtype"], r["precision"], r["layout"]) == (d, prec, lay)]
            if not rs or "base_torch_bmm" not in rs[0]["seconds"]:
                continue
            m = CASES[(d, prec)]
            q = [r["seconds"]["base_torch_bmm"] / r["seconds"][m] for r in rs]
            err = max(r["relerr"][m] / max(r["relerr"]["base_torch_bmm"], 1e-30) for r in rs)
            print(f"{d} {prec} {lay}: torch / {m} median {numpy.median(q):.2f}, "
                  f"min {min(q):.2f}, max {max(q):.2f}; error / torch's at most {err:.2f}")


if __name__ == "__main__":
    main()
