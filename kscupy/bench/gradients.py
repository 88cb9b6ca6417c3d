"""The gradients suite: the values' gradient of one KS factor (:func:`kscupy.values_grad`)
against what a user would otherwise run, on samples of the paper's grid.

    python -m kscupy bench --suite gradients --count 40 --out bench-results

Rows have the engine suite's schema (:mod:`.engine`) with ``"suite": "values_grad"``: for
``Y = K @ X`` (bsl; ``X @ K.T`` in bsf) and an upstream gradient ``G`` of ``Y``'s shape, the
time of ``dW`` (``seconds``, CUDA events around back-to-back calls) by ``values_grad`` (the
public path, whose first call of a row times its ways and keeps the fastest:
:mod:`kscupy.engine.gradient_paths`), by ``kernel_values_grad`` and ``cublas_values_grad``
(two of those ways alone: the tensor-core kernel, and cuBLAS with batch-size-first
operands transposed) and by the baselines: ``base_cupy_bmm`` (the paper's permutes of
``G`` and ``X``, then CuPy's batched product ``G_g X_g^H``), ``base_torch_bmm``
(PyTorch's autograd of the paper's BMM product, the backward to the weights only;
``benchmarks/bench_suite.py`` adds it) and ``base_dense`` (cuBLAS's ``G X^H`` on the dense ``M x N``, then the support gathered), with
each one's relative error against a float64 ``einsum`` of the definition over the whole
batch. ``floor_s`` is the engine suite's (read ``X`` and ``G``, write the values).

Rows ``{"suite": "fit", "planted": ..., "target": ..., "start": ..., "heldout_relerr": ...,
"factorize_relerr": ..., "seconds": ...}`` (:func:`fit_rows`, on the GPU, float64): planted
chains (a random butterfly(1024) and Monarch(1024, 32)) seen only through a function,
fitted from ``factorize`` of ``T @ I`` and from a random start; and a Gaussian kernel
matrix of 2048 sorted points (width 0.1) fitted as a butterfly from ``factorize``, with
``frobenius_relerr`` of the fitted chain beside ``factorize_relerr``.
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

from .. import butterfly, factorize, fit, monarch, values_grad
from ..arguments import nonnegative_int
from ..core import reference
from ..kernels import gemm, ks_values_grad
from . import engine
from .baselines import NONE
from .timing import progress, run_metadata, throughput_seconds

#: The dtypes and batch of the issue's table.
DTYPES = ("float32", "float16")
BATCH = 25088


def _blocks_of(method, dW, pattern):
    """A method's gradient as ``(a, d, b, c)`` blocks, whatever order it gives."""
    a, b, c, d = pattern
    if method in ("values_grad", "kernel_values_grad"):
        return dW.transpose(0, 3, 1, 2)                        # from (a, b, c, d)
    return cupy.asarray(dW).reshape(a, d, b, c)                # torch's (a*d, b, c) too


def gradient_row(pattern, layout, dtype, B, args, ceilings, baselines=NONE):
    """One row: every method's values' gradient for one pattern, layout and dtype."""
    K, inputs = engine.operands(pattern, layout, dtype, B)
    M, N = K.shape
    # two pairs at most (one for large operands): PyTorch's baseline keeps its permuted copy
    # of each X, and the float64 oracle needs room
    inputs = inputs[:1 if numpy.dtype(dtype).itemsize * N * B > 2**30 else 2]
    rng = cupy.random.default_rng(2)
    shape = (M, B) if layout == "bsl" else (B, M)
    pairs = [(X, rng.standard_normal(shape, dtype=numpy.float32).astype(dtype))
             for X in inputs]
    a, b, c, d = pattern
    methods = {"values_grad": lambda X, G: values_grad(K, X, G, layout=layout),
               "cublas_values_grad": lambda X, G: gemm.values_gradient(G, X, pattern, layout),
               "kernel_values_grad": lambda X, G: ks_values_grad.values_gradient(
                   G, X, pattern, layout),
               "base_cupy_bmm": lambda X, G: reference.blocks_gradient(G, X, pattern, layout,
                                                                       cupy)}
    torch_grad = baselines.bmm_values_grad(K.blocks, layout)
    if torch_grad is not None:
        methods[f"base_{baselines.name}_bmm"] = torch_grad
    if K.dtype.itemsize * M * N <= args.dense_limit * 2**30 and \
            2 * B * M * N <= args.dense_flops:
        rows, cols = K.pattern.indices(cupy)                   # (a, d, b, c) each

        def dense(X, G):
            full = G @ X.conj().T if layout == "bsl" else G.T @ X.conj()    # (M, N)
            return full[rows, cols]
        methods["base_dense"] = dense
    X0, G0 = pairs[0]
    X64, G64 = X0.astype(numpy.float64), G0.astype(numpy.float64)
    if layout == "bsf":
        X64, G64 = X64.T, G64.T
    ref = cupy.einsum("ikjn,iljn->ijkl", G64.reshape(a, b, d, B),
                      X64.conj().reshape(a, c, d, B))          # (a, d, b, c)
    del X64, G64            # the oracle's float64 copies go back to the device, not the pool,
    cupy.get_default_memory_pool().free_all_blocks()         # before PyTorch allocates
    row = {"suite": "values_grad", "sample": "default", "pattern": list(pattern),
           "layout": layout, "dtype": dtype, "precision": "default", "batch": B,
           "floor_s": engine.floor_seconds(pattern, B, dtype, "default", ceilings),
           "seconds": {}, "relerr": {}}
    for name, fn in methods.items():
        got = _blocks_of(name, fn(X0, G0), pattern).astype(numpy.float64)
        row["relerr"][name] = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))
        row["seconds"][name] = throughput_seconds(lambda pair: fn(*pair), pairs)
    del inputs, pairs, methods, torch_grad, fn, got, X0, G0, ref
    engine.release(K, baselines)
    return row


def fit_rows(steps=2000):
    """The fitting rows (see the module docstring), on CuPy in float64, yielded one by one
    as each fit ends."""
    planted = {"butterfly(1024)": butterfly(1024, dtype=numpy.float64, xp=cupy, seed=0),
               "monarch(1024, 32)": monarch(1024, blocks=32, dtype=numpy.float64, xp=cupy,
                                           seed=0)}
    for name, C in planted.items():
        for start in ("auto", "random"):
            result = fit(lambda P: C @ P, C.patterns, shape=C.shape, xp=cupy, start=start,
                         steps=steps, seed=1)
            yield {"suite": "fit", "planted": True, "target": name, "start": result.start,
                   "heldout_relerr": result.heldout_relerr,
                   "start_relerr": result.start_relerr, "steps": result.steps,
                   "stopped": result.stopped, "seconds": result.seconds}
    x = numpy.sort(numpy.random.default_rng(0).uniform(0, 1, 2048))
    D = cupy.asarray(numpy.exp(-(x[:, None] - x[None, :]) ** 2 / (2 * 0.1 ** 2)))
    patterns = butterfly(2048).patterns

    def frobenius(chain):
        return float(cupy.linalg.norm(chain.todense() - D) / cupy.linalg.norm(D))
    t0 = time.perf_counter()
    factorized = frobenius(factorize(D, patterns))
    factorize_seconds = time.perf_counter() - t0
    result = fit(D, patterns, steps=steps, seed=2)
    yield {"suite": "fit", "planted": False, "target": "gaussian kernel (2048, 0.1)",
           "patterns": "butterfly", "start": result.start,
           "factorize_relerr": factorized, "frobenius_relerr": frobenius(result.chain),
           "heldout_relerr": result.heldout_relerr, "steps": result.steps,
           "stopped": result.stopped, "seconds": result.seconds,
           "factorize_seconds": factorize_seconds}


def add_arguments(parser):
    group = parser.add_argument_group("gradients suite")
    group.add_argument("--fit-steps", type=nonnegative_int, default=2000,
                       help="the fitting rows' step limit (0 leaves them out)")


def _median_speedup(rows, method):
    """The median speed-up of ``method`` over the best baseline in ``rows`` that timed it."""
    ratios = [engine.speedup(r, method) for r in rows if method in r["seconds"]]
    return float(numpy.median(ratios)) if ratios else None


def summarize(rows):
    """Per dtype and layout: the median and lowest speed-up of ``values_grad`` over the best
    baseline, rows below 0.95x, the worst error ratio to the dense product, and the median
    speed-ups of its two paths where they were timed (``cublas_median``, ``kernel_median``)."""
    out = {}
    rows = [r for r in rows if r["suite"] == "values_grad"]
    for key in sorted({(r["dtype"], r["layout"]) for r in rows}):
        rs = [r for r in rows if (r["dtype"], r["layout"]) == key]
        ratios = numpy.array([engine.speedup(r, "values_grad") for r in rs])
        errs = [r["relerr"]["values_grad"] / r["relerr"]["base_dense"] for r in rs
                if r["relerr"].get("base_dense")]
        out["|".join(key)] = {"patterns": len(rs), "values_grad_median": float(numpy.median(ratios)),
                              "values_grad_min": float(ratios.min()),
                              "cublas_median": _median_speedup(rs, "cublas_values_grad"),
                              "kernel_median": _median_speedup(rs, "kernel_values_grad"),
                              "below_0.95": int((ratios < 0.95).sum()),
                              "err_over_dense_max": float(max(errs)) if errs else None}
    return out


def main(args, baselines=NONE):
    out = pathlib.Path(args.out)
    t0 = time.time()
    ceilings = engine.measure_ceilings(baselines)
    meta = run_metadata()
    result = {"device": meta["gpu"], "commit": meta["commit"], "date": meta["date"],
              "command": meta["command"], "cupy": meta["cupy"], "kscupy": meta["kscupy"],
              baselines.name or "baselines": baselines.version, "timing": "events",
              "ceilings": ceilings, "rows": []}
    patterns = engine.samples(["default"], args.count, 0)["default"]
    dtypes = args.dtypes or list(DTYPES)
    cases = [(p, lay, dt) for dt in dtypes for p in patterns for lay in args.layouts]
    for case in progress(cases, desc="gradients"):
        result["rows"].append(gradient_row(*case, BATCH, args, ceilings, baselines))
        out.write_text(json.dumps(result))
    for row in fit_rows(args.fit_steps) if args.fit_steps else ():
        result["rows"].append(row)
        out.write_text(json.dumps(result))
    engine.finish(result, out, time.time() - t0, summarize)
    for r in result["rows"]:
        if r["suite"] == "fit":
            print({k: v for k, v in r.items() if k != "suite"})
