"""The engine suite: every kscupy method and every baseline on samples of the paper's grid,
per dtype and precision, with relative errors against a float64 oracle.

    python -m kscupy bench --suite engine --dtypes float32,float64,complex64 \\
        --samples default,heldout --out engine.json

Baselines (``base_`` prefix, timed in the same run): ``base_cupy_bmm`` (the paper's permute /
batched GEMM / permute with ``cupy.matmul``), ``base_dense`` (cuBLAS on the dense matrix
where it fits), and those a caller adds (:mod:`.baselines`: the repository's
``benchmarks/bench_suite.py`` adds ``base_torch_bmm`` and ``base_torch_dense``, and for the
TF32 opt-in ``base_torch_bmm_tf32`` and ``base_dense_tf32``, PyTorch with TF32 allowed). kscupy
methods: ``auto``, ``kernel`` (tensor cores), ``kernel_fma``, ``bmm`` (cuBLAS on the groups
where they lie), in batch-size-first also ``kernel_bsl`` (the kernel between two
transposes); for the opt-in ``auto_tf32`` and its candidates ``kernel_tf32`` and ``bmm_tf32``.
Each row's ``floor_s`` is max(bytes / bandwidth, flops / ceiling) with the ceiling of the
dtype's arithmetic measured in the same run (SGEMM for float32 and complex64, the TF32
GEMM for the opt-in, DGEMM for float64, cuBLAS's float16 GEMM for float16). ``--append``
adds rows to an existing file, so that a long run can be split across calls; the held-out
sample's seed is drawn at run time and recorded. A row where ``auto`` reads below 0.95 of
the best baseline is timed a second time, every method, each keeping its faster time
(``retime_misses``; the first times stay in the row's ``first_seconds``).
A row's ``seconds`` are per call of calls run back to back between two CUDA events
(throughput, the file's ``"timing": "events"``; a row's methods timed together, their runs
interleaved, :class:`.timing.Interleaved`), its ``call_seconds`` the median of calls timed
one at a time (latency).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import time

import numpy

try:
    import cupy
except ImportError:
    cupy = None

from .. import KSMatrix, KSPattern
from ..core import arrays, device, reference
from ..core.problem import problem_of
from ..engine import decide
from .baselines import NONE
from .grid import paper_grid, stratified_sample
from .timing import Interleaved, l2_bytes, progress, run_metadata, source_commit, time_fn
from ..arguments import UsageError, choice_list, nonnegative_int
from .results import read_results
from .timing import measure_ceilings as copy_and_sgemm

#: Batch size per dtype (the issue's benchmark).
BATCH = {"float32": 25088, "float16": 25088, "float64": 8192, "complex64": 8192,
         "complex128": 8192}
#: The dtypes the suite measures unless ``--dtypes`` says.
DTYPES = ("float32", "float64", "complex64")
KSCUPY = {"default": ("auto", "kernel", "kernel_fma", "bmm"),
          "tf32": ("auto_tf32", "kernel_tf32", "bmm_tf32")}
#: The method a precision's summary leads with (its automatic choice).
LEAD = {"default": "auto", "tf32": "auto_tf32"}
#: ... and in batch-size-first, at default precision: the kernel between two transposes.
KSCUPY_BSF = ("kernel_bsl",)
ORACLE_COLUMNS = 256
#: The samples of the paper's grid a run can take (:func:`samples`).
SAMPLES = ("default", "heldout")
#: A row whose lead method reads below this fraction of the best baseline is timed again.
RETIME_BELOW = 0.95


def add_arguments(parser):
    group = parser.add_argument_group("engine suite")
    group.add_argument("--dtypes", type=choice_list(tuple(BATCH)), default=None,
                       help=f"comma-separated, of {','.join(BATCH)} (default: "
                            f"{','.join(DTYPES)})")
    group.add_argument("--precisions", type=choice_list(tuple(KSCUPY)), default=",".join(KSCUPY),
                       help=f"comma-separated, of {','.join(KSCUPY)}; tf32 rows are made for "
                            f"float32 only")
    group.add_argument("--samples", type=choice_list(SAMPLES), default=",".join(SAMPLES),
                       help=f"comma-separated, of {','.join(SAMPLES)} (the held-out sample: "
                            f"--count patterns of the grid outside the default sample)")
    group.add_argument("--heldout-seed", type=nonnegative_int, default=None,
                       help="default: drawn at run time (recorded in the JSON)")
    group.add_argument("--append", action="store_true", help="add rows to --out")


def measure_ceilings(baselines=NONE):
    """Copy bandwidth and GEMM rates measured here: timing.py's copy and SGEMM, plus DGEMM,
    the float16 GEMM (CuPy: cuBLAS, float32 accumulation) and, where ``baselines`` measure
    it, the TF32 GEMM."""
    base = copy_and_sgemm()
    out = {"bandwidth": base["copy_bandwidth_Bps"], "sgemm": base["sgemm_flops"]}
    m = 8192
    A = cupy.random.default_rng(1).standard_normal((m, m))
    out["dgemm"] = 2 * m**3 / time_fn(lambda x: A @ x, [A.copy()], max_repeat=20)
    H = A.astype(numpy.float16)
    out["hgemm"] = 2 * m**3 / time_fn(lambda x: H @ x, [H.copy()], max_repeat=20)
    tf32 = baselines.tf32_gemm_flops()
    if tf32 is not None:
        out["tf32_gemm"] = tf32
    return out


def floor_seconds(pattern, B, dtype, precision, ceilings, rate=None):
    """The row's floor: the slower of moving its bytes (X and Y once, the values once) at the
    copy bandwidth and its flops at ``rate``, by default the dtype's GEMM rate, both
    measured in the run (``ceilings``)."""
    p = KSPattern(*pattern)
    M, N = p.shape
    isz = numpy.dtype(dtype).itemsize
    macs = B * p.nnz
    flops = (8 if numpy.dtype(dtype).kind == "c" else 2) * macs
    if rate is None:
        rate = ceilings["dgemm"] if dtype in ("float64", "complex128") \
            else ceilings["hgemm"] if dtype in ("float16", "bfloat16") \
            else ceilings.get("tf32_gemm", ceilings["sgemm"]) if precision == "tf32" \
            else ceilings["sgemm"]
    return max(isz * (B * (M + N) + p.nnz) / ceilings["bandwidth"], flops / rate)


def oracle(K, X, layout):
    """The float64 definition of the product on the first ORACLE_COLUMNS batch columns,
    as an (M, columns) array."""
    a, b, c, d = K.pattern
    w = K.values.astype(numpy.complex128 if K.dtype.kind == "c" else numpy.float64)
    cols = X[:, :ORACLE_COLUMNS] if layout == "bsl" else X[:ORACLE_COLUMNS].T
    ref = cupy.einsum("iklj,iljn->ikjn", w, cols.astype(w.dtype).reshape(a, c, d, -1))
    return ref.reshape(a * b * d, -1)


def relative_error(Y, ref, layout):
    """Relative error of the result ``Y`` on the columns :func:`oracle` computed."""
    got = Y[:, :ORACLE_COLUMNS] if layout == "bsl" else Y[:ORACLE_COLUMNS].T
    got = cupy.asarray(got)
    return float(cupy.linalg.norm(got.astype(ref.dtype) - ref) / cupy.linalg.norm(ref))


def median_gpu_seconds(fn, inputs):
    """``{"seconds": ...}``: the median per-call CUDA-event time (latency)."""
    return {"seconds": time_fn(fn, inputs)}


class EventsAndCalls(Interleaved):
    """The rows' timer: ``seconds``, the time per call of back-to-back calls between two
    CUDA events (throughput, what a pipeline sees: the rows' figure, recorded as
    ``"timing": "events"``), the methods of a row timed together, their runs interleaved
    (:class:`~kscupy.bench.timing.Interleaved`); and ``call_seconds``, each method's median
    per-call time (latency)."""

    def __call__(self, fn, inputs):
        return {name: times["fn"] for name, times in self.together({"fn": fn}, inputs).items()}

    def together(self, methods, inputs, contexts=None):
        out = super().together(methods, inputs, contexts)
        out["call_seconds"] = {}
        for name, fn in methods.items():
            with (contexts or {}).get(name, contextlib.nullcontext)():
                out["call_seconds"][name] = time_fn(fn, inputs)
        return out


#: The engine suite's timer (and that of the suites made of its rows).
EVENTS_AND_CALLS = EventsAndCalls()


def operands(pattern, layout, dtype, B):
    """A random KS matrix of ``pattern`` (seed 0) and the inputs a row cycles through: enough
    copies of a random ``(N, B)`` (bsl) or ``(B, N)`` (bsf) batch that together they exceed
    twice the L2 cache (at most 4), so that no call reads its input from L2."""
    K = KSMatrix.random(pattern, dtype=dtype, xp=cupy, seed=0)
    N = K.shape[1]
    shape = (N, B) if layout == "bsl" else (B, N)
    isz = numpy.dtype(dtype).itemsize
    copies = int(min(4, max(1, -(-2 * l2_bytes() // (isz * N * B)))))
    rng = cupy.random.default_rng(1)
    inputs = []
    for _ in range(copies):
        X = rng.standard_normal(shape, dtype=numpy.float64)
        if numpy.dtype(dtype).kind == "c":
            X = X + 1j * rng.standard_normal(shape, dtype=numpy.float64)
        inputs.append(X.astype(dtype))
    return K, inputs


def baseline_methods(K, layout, precision, B, args, baselines=NONE):
    """``{name: fn}``: the baselines of a row (``base_`` prefix): CuPy's BMM (not for bfloat16,
    which its batched matmul lacks), ``baselines'`` BMM, and the dense matrix's product by
    CuPy (cuBLAS) and by ``baselines`` where it fits ``args.dense_limit`` (GiB) and
    ``args.dense_flops``; for the TF32 opt-in the ``baselines'`` TF32 versions."""
    M, N = K.shape
    blocks = K.blocks
    tf32 = precision == "tf32"
    suffix = "_tf32" if tf32 else ""
    methods = {}
    if not tf32 and not arrays.is_bfloat16(K.dtype):   # CuPy's batched matmul has none
        methods["base_cupy_bmm"] = lambda x: reference.bmm(blocks, x, layout, cupy)
    tb = baselines.bmm(blocks, layout, tf32=tf32)
    if tb is not None:
        methods[f"base_{baselines.name}_bmm" + suffix] = tb
    if K.dtype.itemsize * M * N <= args.dense_limit * 2**30 and 2 * B * M * N <= args.dense_flops:
        D = K.todense()
        if tf32:
            td = baselines.dense(D, layout, tf32=True)
            if td is not None:
                methods["base_dense_tf32"] = td
        else:
            methods["base_dense"] = lambda x: reference.dense(D, x, layout, cupy)
            # the caller's own dense product: the same GEMM, but a framework may issue it
            # with less host time than CuPy's matmul, which short products feel
            td = baselines.dense(D, layout)
            if td is not None:
                methods[f"base_{baselines.name}_dense"] = td
    return methods


def time_methods(row, methods, inputs, ref, layout, timer, contexts=None):
    """Fill ``row``'s ``relerr`` (against the oracle ``ref``) and the timer's fields for each
    of ``methods`` (``{name: fn}``, each run in its context of ``contexts``, see
    :func:`timed`)."""
    contexts = contexts or {}
    for name, fn in methods.items():
        with contexts.get(name, contextlib.nullcontext)():
            Y = fn(inputs[0])
        if not isinstance(Y, cupy.ndarray):
            Y = cupy.from_dlpack(Y)
        row["relerr"][name] = relative_error(Y, ref, layout)
        del Y
    for field, times in timed(methods, inputs, timer, contexts).items():
        row.setdefault(field, {}).update(times)


def timed(methods, inputs, timer, contexts=None):
    """``{field: {name: seconds}}`` of ``methods``: by ``timer.together(methods, inputs,
    contexts)`` where the timer times several functions at once
    (:class:`~kscupy.bench.timing.Interleaved`), else by ``timer(fn, inputs)`` for each in
    turn. ``contexts`` (``{name: factory}``, a context manager a method runs in) needs a
    timer of the first kind."""
    together = getattr(timer, "together", None)
    if together is not None:
        return together(methods, inputs, contexts)
    if contexts:
        raise ValueError("methods with contexts need a timer that times them together")
    out = {}
    for name, fn in methods.items():
        for field, seconds in timer(fn, inputs).items():
            out.setdefault(field, {})[name] = seconds
    return out


def bench_row(pattern, layout, dtype, precision, sample, args, ceilings, *, batch=None,
              timer=EVENTS_AND_CALLS, suite="patterns", extra_methods=(),
              baselines=NONE, framework_operands=False):
    """One row: every method of ``precision`` (and the kscupy backends ``extra_methods``) on
    one pattern and layout, its relative error against the float64 oracle and its time.
    ``batch`` defaults to :data:`BATCH` of the dtype; ``timer(fn, inputs)`` returns
    ``{field: seconds}``, each field a dict of the row keyed by method (default:
    :data:`EVENTS_AND_CALLS`). ``baselines``: those beyond CuPy's;
    ``framework_operands``: time ``auto`` on their framework's arrays too (method
    ``auto_<name>``, e.g. ``auto_torch``: ``K @ tensor`` through DLPack, a tensor back)."""
    B = BATCH[dtype] if batch is None else batch
    K, inputs = operands(pattern, layout, dtype, B)
    methods = {m: (lambda m: lambda x: K.matmul(x, layout=layout, backend=m))(m)
               for m in KSCUPY[precision] + tuple(extra_methods)
               + (KSCUPY_BSF if layout == "bsf" and precision == "default" else ())}
    if framework_operands and baselines.tensor(inputs[0]) is not None:
        tensors = {id(x): baselines.tensor(x) for x in inputs}      # made before timing
        methods[f"{LEAD[precision]}_{baselines.name}"] = \
            lambda x: K.matmul(tensors[id(x)], layout=layout, backend=LEAD[precision])
    methods.update(baseline_methods(K, layout, precision, B, args, baselines))
    ref = oracle(K, inputs[0], layout)
    row = {"suite": suite, "sample": sample, "pattern": list(pattern), "layout": layout,
           "dtype": dtype, "precision": precision, "batch": B,
           "floor_s": floor_seconds(pattern, B, dtype, precision, ceilings), "seconds": {}, "relerr": {}}
    time_methods(row, methods, inputs, ref, layout, timer)
    retime_misses(row, methods, inputs, timer)
    # after auto ran: on a close call of the model its first run timed the rivals, and the
    # fastest is the choice (kscupy.engine.decide)
    row[f"{LEAD[precision]}_choice"] = decide.choose(problem_of(K.factor, inputs[0], layout),
                                                     precision=precision).backend
    del inputs
    release(K, baselines)
    return row


def release(K, baselines):
    """Free what a row held: the matrix's cached copies, CuPy's pooled memory, the
    baselines' copies."""
    K.clear_cache()
    cupy.get_default_memory_pool().free_all_blocks()
    baselines.release()


def speedup(row, method):
    """The best baseline's time over ``method``'s in ``row``: above 1 where it is faster."""
    base = min(t for k, t in row["seconds"].items() if k.startswith("base_"))
    return base / row["seconds"][method]


def lead_ratio(row, lead=None):
    """:func:`speedup` of ``lead``, by default the precision's lead method (its automatic
    choice)."""
    return speedup(row, lead or LEAD[row["precision"]])


def retime_misses(row, methods, inputs, timer, lead=None, contexts=None):
    """Time every method of ``row`` (``{name: fn}``, baselines included, in their
    ``contexts`` as :func:`timed` takes them) a second time where ``lead``
    (:func:`lead_ratio`'s) reads below :data:`RETIME_BELOW` of the best baseline, each
    keeping the faster of its two times; rows without a baseline are left alone.

    One median of a cell can be an outlier (another process's work, a clock step). Every
    method is timed again, baselines too, so a second chance helps them as much as kscupy.
    Every field the timer gives (``seconds``; bench_latency's also ``host_seconds``) keeps
    its faster value, and its first values stay in ``first_<field>``."""
    if not any(k.startswith("base_") for k in row["seconds"]) \
            or lead_ratio(row, lead) >= RETIME_BELOW:
        return
    for field, times in timed(methods, inputs, timer, contexts).items():
        row["first_" + field] = dict(row[field])
        for name, seconds in times.items():
            row[field][name] = min(row[field][name], seconds)


def row_kinds(dtypes, precisions):
    """The (dtype, precision) pairs a run makes rows of: TF32 rows for float32 only."""
    return [(dt, prec) for dt in dtypes for prec in precisions
            if prec == "default" or dt == "float32"]


def check_arguments(args, out):
    """UsageError where the arguments ask for no row, for a held-out sample larger than the
    grid's patterns outside the default sample, or ``--append`` to a file ``out`` that is no
    engine results file or lacks a float16 row's ceiling; ``--dtypes`` left out becomes
    :data:`DTYPES`."""
    if args.dtypes is None:
        args.dtypes = list(DTYPES)
    if not row_kinds(args.dtypes, args.precisions):
        raise UsageError(f"--precisions {','.join(args.precisions)} with --dtypes "
                         f"{','.join(args.dtypes)}: no rows (tf32 rows are made for float32 "
                         f"only)")
    check_heldout_room(args)
    check_append(args, out)


def check_heldout_room(args):
    """UsageError for a held-out sample (``--samples``) larger than the grid's patterns
    outside the default sample of ``--count``."""
    grid = paper_grid()
    room = len(grid) - len(stratified_sample(grid, args.count))
    if "heldout" in args.samples and args.count > room:
        raise UsageError(f"--count {args.count}: the held-out sample takes that many patterns "
                         f"outside the default sample of as many, and the grid has "
                         f"{len(grid)}: give --count {len(grid) // 2} at most, or --samples "
                         f"default")


def check_append(args, out):
    """UsageError where ``--append`` names a file ``out`` that is no engine results file,
    lacks a float16 row's ceiling, or was measured at another commit (a file's rows are of
    one commit: the one it records)."""
    if args.append and pathlib.Path(out).exists():
        found = read_results(out, "--append to")
        recorded, current = str(found.get("commit", "")), source_commit()
        if recorded and "unknown" not in (recorded, current) and not (
                recorded.startswith(current) or current.startswith(recorded)):
            raise UsageError(f"--append to {out}: its rows were measured at commit "
                             f"{recorded}, this checkout is {current}: start a new file")
        ceilings = found.get("ceilings")
        if not isinstance(ceilings, dict):
            raise UsageError(f"--append to {out}: no ceilings recorded, not an engine "
                             f"results file")
        if "hgemm" not in ceilings and "float16" in args.dtypes:
            raise UsageError(f"--append to {out}: the file has no float16 ceiling, so no "
                             f"float16 rows: start a new file")


def samples(names, count, seed):
    """``{name: patterns}`` of the samples ``names`` of the paper's grid: the stratified
    sample of ``count`` and the held-out one (``count`` others, drawn with ``seed``)."""
    grid = paper_grid()
    default = stratified_sample(grid, count)
    out = {}
    if "default" in names:
        out["default"] = default
    if "heldout" in names:
        taken = set(default)
        rest = [p for p in grid if p not in taken]
        rng = numpy.random.default_rng(seed)
        out["heldout"] = [rest[i] for i in sorted(rng.choice(len(rest), count, replace=False))]
    return out


def group_key(row) -> str:
    """The summary key of a row: ``dtype|precision|layout``, then ``|B=<batch>`` where the
    batch is not the dtype's :data:`BATCH`, ``|sm_XX`` for a row measured in an emulated
    architecture and ``|heldout`` for the held-out sample."""
    key = f"{row['dtype']}|{row['precision']}|{row['layout']}"
    if row.get("batch", BATCH.get(row["dtype"])) != BATCH.get(row["dtype"]):
        key += f"|B={row['batch']}"
    if row.get("emulated_arch"):
        key += f"|{row['emulated_arch']}"
    return key + ("" if row["sample"] == "default" else f"|{row['sample']}")


def summarize(rows):
    """Per group of rows (:func:`group_key`: dtype, precision, layout, and batch, emulated
    architecture and sample where they differ from the default): medians of the automatic
    choice and of each kscupy method timed against the best baseline, patterns below 0.95x,
    the kernel's fraction of the floor, the worst error ratio to cuBLAS dense."""
    groups = {}
    for r in rows:
        groups.setdefault(group_key(r), []).append(r)
    out = {}
    for key in sorted(groups):
        rs = groups[key]
        precision = rs[0]["precision"]
        lead = LEAD[precision]
        lead_r = numpy.array([lead_ratio(r) for r in rs])
        entry = {"patterns": len(rs), f"{lead}_median": float(numpy.median(lead_r)),
                 f"{lead}_min": float(lead_r.min()), "below_0.95": int((lead_r < 0.95).sum())}
        for method in KSCUPY[precision][1:]:    # the methods auto chooses among, as timed
            if all(method in r["seconds"] for r in rs):
                entry[f"{method}_median"] = float(numpy.median([speedup(r, method) for r in rs]))
        for method in sorted({m for r in rs for m in r["seconds"]
                              if m.startswith(lead + "_") and m not in KSCUPY[precision]}):
            # the lead on a framework's arrays (bench_row's framework_operands)
            ratios = numpy.array([speedup(r, method) for r in rs if method in r["seconds"]])
            entry.update({f"{method}_median": float(numpy.median(ratios)),
                          f"{method}_min": float(ratios.min()),
                          f"{method}_below_0.95": int((ratios < 0.95).sum())})
        if precision == "default":
            if all("kernel" in r["seconds"] for r in rs):
                entry["kernel_floor_fraction"] = float(numpy.median(
                    [r["floor_s"] / r["seconds"]["kernel"] for r in rs]))
            errs = [r["relerr"]["auto"] / r["relerr"]["base_dense"] for r in rs
                    if "base_dense" in r["relerr"] and r["relerr"]["base_dense"] > 0]
            entry["auto_err_over_dense_max"] = float(max(errs)) if errs else None
        out[key] = entry
    return out


def open_results(args, out, baselines=NONE, measure=None, **fields):
    """``(result, ceilings)``: the results object a sampled run writes into ``out``: with
    ``--append`` the file's, its command added, else a new one with the run's metadata, the
    ceilings (``measure(baselines)``, default :func:`measure_ceilings`), the device's facts,
    the held-out seed (``--heldout-seed``, or drawn at run time) and ``fields``."""
    result = json.loads(out.read_text()) if args.append and out.exists() else None
    meta = run_metadata()
    seed = args.heldout_seed if args.heldout_seed is not None else \
        int.from_bytes(os.urandom(4), "little")
    if result is not None:                  # (a file from before seeds were recorded)
        result.setdefault("heldout_seed", seed)
        result.setdefault("commands", []).append(meta["command"])
        return result, result["ceilings"]
    ceilings = (measure or measure_ceilings)(baselines)
    result = {**fields, "device": meta["gpu"], "commit": meta["commit"], "date": meta["date"],
              "command": meta["command"], "cupy": meta["cupy"], "kscupy": meta["kscupy"],
              "heldout_seed": seed, baselines.name or "baselines": baselines.version,
              "timing": "events", "ceilings": ceilings,
              "rates": dataclasses.asdict(device.current()), "rows": []}
    return result, ceilings


def main(args, baselines=NONE):
    out = pathlib.Path(args.out)
    t0 = time.time()
    result, ceilings = open_results(args, out, baselines)
    print("ceilings: " + ", ".join(f"{k} {v / 1e12:.1f} T" for k, v in ceilings.items()), flush=True)
    drawn = samples(args.samples, args.count, result["heldout_seed"])
    cases = [(p, lay, dt, prec, name) for dt, prec in row_kinds(args.dtypes, args.precisions)
             for name, pats in drawn.items() for p in pats for lay in args.layouts]
    done = {(tuple(r["pattern"]), r["layout"], r["dtype"], r["precision"], r["sample"])
            for r in result["rows"]}
    for case in progress([c for c in cases if c not in done], desc="engine"):
        result["rows"].append(bench_row(*case, args, ceilings, baselines=baselines))
        out.write_text(json.dumps(result))
    finish(result, out, time.time() - t0)


def finish(result, out, seconds, summarize_rows=None):
    """Summarize the rows of ``result`` into it (by ``summarize_rows``, default the engine
    schema's :func:`summarize`), add ``seconds`` to its running time, write it to ``out``
    and print the summary."""
    result["summary"] = (summarize_rows or summarize)(result["rows"])
    result["seconds"] = result.get("seconds", 0) + seconds
    out.write_text(json.dumps(result, indent=1))
    print(f"\n{result['device']}, {len(result['rows'])} rows")
    for key, s in result["summary"].items():
        print(key, " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in s.items()))
