"""The parity suite: ``auto`` in both layouts for every dtype, against the baselines, with
each row's floor priced at its dtype's tensor-core rate. It asks whether batch-size-first
(``X @ K.T``) runs as fast as batch-size-last for each dtype, and how close to the floor.

    python -m kscupy bench --suite parity --count 60 --out bench-results

float16 and float32 at B = 25088, float64, complex64 and complex128 at B = 8192 (the engine
suite's batches, :data:`.engine.BATCH`), the default and the held-out sample of the paper's
grid (the held-out seed drawn at run time and recorded). Rows have the engine suite's schema
(:mod:`.engine`); only ``auto`` and the baselines are timed (throughput: back-to-back calls
between CUDA events, the methods' runs interleaved, :class:`.timing.Interleaved`), so a row
costs about a third of an engine row and the five dtypes fit a few device calls
(``--append`` goes on where a file stops, with its ceilings and seed).

A row's ``floor_s`` is max(bytes / copy bandwidth, flops / rate) (:func:`floor_seconds`),
the rate that of its dtype's tensor-core GEMM measured in the same run: cuBLAS's float16
GEMM for float16 (and bfloat16), a third of the TF32 GEMM's for float32 and complex64 (their
float32-grade products take three TF32 products each), DGEMM (the FP64 tensor cores) for
float64 and complex128. The engine suite prices float32 at SGEMM's rate instead, so the two
suites' floors differ for float32 and complex64.

The summary (:func:`summarize`) has the engine suite's entries per dtype, layout and sample
plus ``auto_floor_fraction`` (the median of floor / ``auto``'s time), and per dtype and
sample ``dtype|parity[|heldout]`` with ``bsf_over_bsl``: ``auto``'s median speed-up in
batch-size-first over its median in batch-size-last, and ``bsl_time_over_bsf_median``: per
pattern, the batch-size-last time over the batch-size-first one.
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

from ..arguments import UsageError
from ..core.problem import problem_of
from ..engine import decide
from . import engine
from .baselines import NONE
from .results import read_results
from .timing import Interleaved, progress, time_fn

#: The dtypes the suite measures unless ``--dtypes`` says.
DTYPES = ("float16", "float32", "float64", "complex64", "complex128")
#: Per method and row: CUDA-event time of back-to-back calls, five runs of this many seconds
#: in all, interleaved with the other methods' runs (as the portability suite's rows, which
#: also time only ``auto`` and baselines).
BUDGET_S = 0.06


def measure_ceilings(baselines=NONE):
    """The engine suite's ceilings (:func:`.engine.measure_ceilings`), with the TF32 GEMM
    rate measured by kscupy's own cuBLAS call where ``baselines`` gave none."""
    out = engine.measure_ceilings(baselines)
    if "tf32_gemm" not in out:
        from ..kernels import gemm
        m = 8192
        A = cupy.random.default_rng(1).standard_normal((m, m), dtype=numpy.float32)
        run = gemm.prepare(A, A.copy(), "bsl", "tf32")
        out["tf32_gemm"] = 2 * m**3 / time_fn(run, [A.copy()], max_repeat=20)
    return out


def rate(dtype, ceilings) -> float:
    """The tensor-core rate (flops per second) a row of ``dtype`` is priced at."""
    name = numpy.dtype(dtype).name
    if name in ("float64", "complex128"):
        return ceilings["dgemm"]
    if name in ("float16", "bfloat16"):
        return ceilings["hgemm"]
    return ceilings["tf32_gemm"] / 3          # float32, complex64: three TF32 products


def floor_seconds(pattern, B, dtype, ceilings) -> float:
    """The engine suite's floor (:func:`.engine.floor_seconds`) priced at :func:`rate`."""
    return engine.floor_seconds(pattern, B, dtype, "default", ceilings,
                                rate=rate(dtype, ceilings))


#: The rows' timer: every method of a row timed together, their runs interleaved.
TIMER = Interleaved(budget_s=BUDGET_S)


def parity_row(pattern, layout, dtype, sample, args, ceilings, baselines=NONE):
    """One row: ``auto`` and the baselines on one pattern, layout and dtype (a row that reads
    below 0.95 of the best baseline timed again, :func:`.engine.retime_misses`)."""
    B = engine.BATCH[dtype]
    K, inputs = engine.operands(pattern, layout, dtype, B)
    ref = engine.oracle(K, inputs[0], layout)
    methods = {"auto": lambda x: K.matmul(x, layout=layout, backend="auto")}
    methods.update(engine.baseline_methods(K, layout, "default", B, args, baselines))
    row = {"suite": "patterns", "sample": sample, "pattern": list(pattern), "layout": layout,
           "dtype": dtype, "precision": "default", "batch": B,
           "floor_s": floor_seconds(pattern, B, dtype, ceilings), "seconds": {},
           "relerr": {}}
    engine.time_methods(row, methods, inputs, ref, layout, TIMER)
    engine.retime_misses(row, methods, inputs, TIMER)
    row["auto_choice"] = decide.choose(problem_of(K.factor, inputs[0], layout)).backend
    del inputs
    engine.release(K, baselines)
    return row


def summarize(rows):
    """The engine suite's summary (:func:`.engine.summarize`) with ``auto_floor_fraction``
    per group, and per dtype and sample the two layouts compared (see the module)."""
    out = engine.summarize(rows)
    for key, entry in out.items():
        group = [r for r in rows if engine.group_key(r) == key]
        entry["auto_floor_fraction"] = float(numpy.median(
            [r["floor_s"] / r["seconds"]["auto"] for r in group]))
    for dtype in sorted({r["dtype"] for r in rows}):
        for sample in sorted({r["sample"] for r in rows if r["dtype"] == dtype}):
            by_layout = {lay: {tuple(r["pattern"]): r for r in rows
                               if (r["dtype"], r["sample"], r["layout"]) == (dtype, sample, lay)}
                         for lay in ("bsl", "bsf")}
            both = sorted(set(by_layout["bsl"]) & set(by_layout["bsf"]))
            if not both:
                continue
            bsl = [by_layout["bsl"][p] for p in both]
            bsf = [by_layout["bsf"][p] for p in both]
            speedups = [numpy.median([engine.lead_ratio(r) for r in rs]) for rs in (bsf, bsl)]
            key = f"{dtype}|parity" + ("" if sample == "default" else f"|{sample}")
            out[key] = {"patterns": len(both),
                        "bsf_over_bsl": float(speedups[0] / speedups[1]),
                        "bsl_time_over_bsf_median": float(numpy.median(
                            [l["seconds"]["auto"] / f["seconds"]["auto"]
                             for l, f in zip(bsl, bsf)]))}
    return out


def check_arguments(args, out):
    """``--dtypes`` left out becomes :data:`DTYPES`; UsageError for a held-out sample larger
    than the grid allows (:func:`.engine.check_heldout_room`), or ``--append`` to a file that
    no engine-schema run wrote (:func:`.engine.check_append`) or whose ceilings lack a rate
    the parity floors price with (an engine file without the TF32 GEMM's, say)."""
    if args.dtypes is None:
        args.dtypes = list(DTYPES)
    engine.check_heldout_room(args)
    engine.check_append(args, out)
    if args.append and pathlib.Path(out).exists():
        ceilings = read_results(out, "--append to")["ceilings"]
        missing = {"tf32_gemm", "dgemm", "hgemm"} - set(ceilings)
        if missing:
            raise UsageError(f"--append to {out}: its ceilings lack {', '.join(sorted(missing))}, "
                             f"which the parity floors need: start a new file")


def main(args, baselines=NONE):
    """Run the suite into ``args.out`` (rewritten after each row, so a run cut short keeps
    its rows; ``--append`` goes on where a file stops, with its ceilings and seed)."""
    out = pathlib.Path(args.out)
    t0 = time.time()
    result, ceilings = engine.open_results(args, out, baselines, measure_ceilings,
                                           suite="parity", budget_s=BUDGET_S)
    drawn = engine.samples(args.samples, args.count, result["heldout_seed"])
    cases = [(p, lay, dt, name) for dt in args.dtypes for name, pats in drawn.items()
             for p in pats for lay in args.layouts]
    done = {(tuple(r["pattern"]), r["layout"], r["dtype"], r["sample"])
            for r in result["rows"]}
    for case in progress([c for c in cases if c not in done], desc="parity"):
        result["rows"].append(parity_row(*case, args, ceilings, baselines))
        out.write_text(json.dumps(result))
    engine.finish(result, out, time.time() - t0, summarize)
