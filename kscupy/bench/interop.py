"""The interop suite: products captured in CUDA graphs and replayed, against cuBLAS's dense
product captured and replayed the same way.

    python -m kscupy bench --suite interop --out bench-results

Rows ``{"suite": "graph", "batch": B, "pattern": ..., "layout": ..., "dtype": "float32",
"seconds": {"auto": ..., "base_dense_graph": ...}, "eager_seconds": {...}, "relerr": {...}}``
over the float32 small-batch sample (the stratified sample of ``--count`` patterns of the
paper's grid; B = 1 and 64, both layouts): ``seconds`` per replay of a graph that holds one
product (``K.matmul(X, layout=...)``, after one call outside the capture), CUDA events
around graphs launched back to back on a non-blocking stream. ``base_dense_gemm``: cuBLAS's
GEMM on the dense matrix, the call CuPy's ``D @ X`` makes, prepared as kscupy's ``dense``
backend prepares it (CuPy's own bindings refuse cuBLAS during a capture) and captured
alike; ``base_framework_dense``: the baselines' own captured dense product where they have
one (``benchmarks/bench_suite.py``: PyTorch's ``torch.mv`` at B = 1, ``torch.mm`` else, in
a ``torch.cuda.CUDAGraph``); ``base_dense_graph``: the faster of the two.
``eager_seconds`` are kscupy's products called back to back without a graph, for the host
time a graph removes. ``relerr``: each replayed result against a float64 product of the
dense matrix. ``errors``: the products that could not be captured, and why.

Rows ``{"suite": "bf16", ...}`` (where ``ml_dtypes`` gives CuPy bfloat16): the engine
suite's rows (:func:`.engine.bench_row`, its schema and baselines) in bfloat16 at
B = :data:`BF16_BATCH`, both layouts, over the same patterns: every kscupy method and
``auto`` against ``baselines``' BMM (PyTorch's ``torch.bmm`` in bfloat16 under
``benchmarks/bench_suite.py``; CuPy's batched matmul has no bfloat16) and the dense
product, all in bfloat16; with ``baselines`` that have a framework, ``auto`` on its arrays
too (``auto_torch``: ``K @ tensor`` for a PyTorch tensor, through DLPack). The file then
holds the ceilings the floors are priced with (bfloat16 at float16's tensor-core rate).

``--interop-rows`` makes some kinds of rows only (``"<kind>": "not run: ..."`` in the file
for the others).
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy

try:
    import cupy
except ImportError:
    cupy = None

from ..arguments import choice_list
from ..core import arrays
from ..kernels import gemm
from ..operators.matrix import KSMatrix
from . import engine
from .baselines import NONE
from .timing import progress, run_metadata, throughput_seconds

BATCHES = (1, 64)
#: The kinds of rows, in the order a run makes them (``--interop-rows``).
KINDS = ("graph", "bf16")
#: The bfloat16 rows' batch (the paper's).
BF16_BATCH = 25088
#: Rows whose dense matrix in float64 would take more than this (GiB) leave out the dense
#: baseline and the error.
DENSE_LIMIT_GIB = 4


def _captured(fn, stream):
    """``(graph, out)``: ``fn()`` run once on ``stream`` (so that everything it prepares and
    allocates exists), then captured; ``out`` is the captured call's result, which every
    replay writes again."""
    with stream:
        fn()
        stream.synchronize()
        stream.begin_capture()
        try:
            out = fn()
        finally:
            graph = stream.end_capture()
    return graph, out


def _replay_seconds(graph, stream):
    with stream:
        return throughput_seconds(lambda _: graph.launch(stream), [None])


def _relerr(got, ref):
    got = got.astype(numpy.float64)
    return float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))


def graph_row(pattern, layout, B, baselines=NONE):
    """One row: ``auto``'s product and cuBLAS's dense one, replayed from graphs and called
    eagerly; ``baselines``' graph-captured dense product beside them where it has one."""
    K = KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    M, N = K.shape
    X = cupy.random.default_rng(1).standard_normal(
        (N, B) if layout == "bsl" else (B, N), dtype=numpy.float32)
    D = K.todense() if 8 * M * N <= DENSE_LIMIT_GIB * 2**30 else None
    methods = {"auto": lambda: K.matmul(X, layout=layout)}
    dense = gemm.prepare(D, X, layout) if D is not None else None   # C-order D and X: a run
    if dense is not None:
        methods["base_dense_gemm"] = dense
    stream = cupy.cuda.Stream(non_blocking=True)
    row = {"suite": "graph", "batch": B, "pattern": list(pattern), "layout": layout,
           "dtype": "float32", "seconds": {}, "eager_seconds": {}, "relerr": {}}
    ref = None
    if D is not None:
        D64, X64 = D.astype(numpy.float64), X.astype(numpy.float64)
        ref = D64 @ X64 if layout == "bsl" else X64 @ D64.T
        del D64
    outs = {}
    for name, fn in methods.items():
        run = fn if name == "auto" else (lambda fn=fn: fn(X))
        try:
            graph, outs[name] = _captured(run, stream)
        except Exception as exc:        # a product that cannot be captured: say so, go on
            row.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
            stream = cupy.cuda.Stream(non_blocking=True)   # the failed capture's is spent
            continue
        row["seconds"][name] = _replay_seconds(graph, stream)
        with stream:
            row["eager_seconds"][name] = throughput_seconds(lambda _: run(), [None])
            graph.launch(stream)
            stream.synchronize()
    if D is not None:
        captured = baselines.dense_graph(D, X, layout)
        if captured is not None:
            replay, outs["base_framework_dense"] = captured
            row["seconds"]["base_framework_dense"] = throughput_seconds(lambda _: replay(),
                                                                        [None])
            replay()
            cupy.cuda.Device().synchronize()
    if ref is not None:
        for name, out in outs.items():
            row["relerr"][name] = _relerr(cupy.asarray(out).reshape(ref.shape), ref)
    dense = [t for k, t in row["seconds"].items() if k.startswith("base_")]
    if dense:
        row["seconds"]["base_dense_graph"] = min(dense)
    return row


def summarize(rows):
    """Per batch and layout: the median and lowest speed-up of the replayed ``auto`` over the
    replayed dense product, and of the replay over ``auto`` called eagerly; the bfloat16
    rows as the engine suite summarizes its own."""
    out = engine.summarize([r for r in rows if r["suite"] == "bf16"])
    for key in sorted({(r["batch"], r["layout"]) for r in rows if r["suite"] == "graph"}):
        rs = [r for r in rows if r["suite"] == "graph" and (r["batch"], r["layout"]) == key
              and "auto" in r["seconds"]]
        vs_dense = numpy.array([r["seconds"]["base_dense_graph"] / r["seconds"]["auto"]
                                for r in rs if "base_dense_graph" in r["seconds"]])
        vs_eager = numpy.array([r["eager_seconds"]["auto"] / r["seconds"]["auto"] for r in rs])
        out[f"B={key[0]}|{key[1]}"] = {
            "patterns": len(rs), "dense_rows": int(vs_dense.size),
            "not_captured": sum(1 for r in rows if r["suite"] == "graph"
                                and (r["batch"], r["layout"]) == key
                                and "auto" not in r["seconds"]),
            "auto_over_dense_graph_median":
                float(numpy.median(vs_dense)) if vs_dense.size else None,
            "auto_over_dense_graph_min": float(vs_dense.min()) if vs_dense.size else None,
            "replay_over_eager_median": float(numpy.median(vs_eager))}
    return out


def add_arguments(parser):
    group = parser.add_argument_group("interop suite")
    group.add_argument("--interop-rows", type=choice_list(KINDS), default=",".join(KINDS),
                       help=f"comma-separated kinds of rows to make, of {','.join(KINDS)} "
                            f"(default: all)")


def main(args, baselines=NONE):
    out = pathlib.Path(args.out)
    t0 = time.time()
    meta = run_metadata()
    result = {"device": meta["gpu"], "commit": meta["commit"], "date": meta["date"],
              "command": meta["command"], "cupy": meta["cupy"], "kscupy": meta["kscupy"],
              "timing": "events", "rows": []}
    patterns = engine.samples(["default"], args.count, 0)["default"]
    for kind in KINDS:
        if kind not in args.interop_rows:
            result[kind] = "not run: left out of --interop-rows"
    cases = [(p, layout, B) for B in BATCHES for p in patterns for layout in args.layouts]
    for case in progress(cases if "graph" in args.interop_rows else [], desc="graphs"):
        result["rows"].append(graph_row(*case, baselines=baselines))
        out.write_text(json.dumps(result))
    if "bf16" in args.interop_rows and arrays.BFLOAT16 is None:
        result["bf16"] = "not run: no bfloat16 dtype (ml_dtypes is not installed)"
    elif "bf16" in args.interop_rows:
        result["ceilings"] = ceilings = engine.measure_ceilings(baselines)
        cases = [(p, layout) for p in patterns for layout in args.layouts]
        for pattern, layout in progress(cases, desc="bfloat16"):
            result["rows"].append(engine.bench_row(
                pattern, layout, "bfloat16", "default", "default", args, ceilings,
                batch=BF16_BATCH, suite="bf16", baselines=baselines,
                framework_operands=True))
            out.write_text(json.dumps(result))
    engine.finish(result, out, time.time() - t0, summarize)
