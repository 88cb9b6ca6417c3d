"""Issue 10's benchmark: small batches, solver loops and first use.

    PYTHONPATH=$PWD python3 benchmarks/bench_latency.py --out benchmarks/results/latency.json

Four parts (``--parts``, all by default; ``--quick`` for a smoke run of about a minute):

``rows``
    B = 1 and B = 64, float32, both layouts, on a stratified sample of the paper's grid
    (``--patterns``, default 20). Rows as engine.json's (``engine.bench_row``: the same
    methods, inputs, floor and float64 oracle), suite ``patterns_small_batch``: kscupy's
    ``auto``, ``kernel``, ``kernel_fma``, ``bmm`` and the baselines ``base_torch_bmm`` (when
    torch imports), ``base_cupy_bmm``, ``base_dense`` (where the dense matrix takes at most
    ``--dense-limit`` GiB). Two times per method, both medians of ``cupyx.profiler.benchmark``:
    ``seconds`` (the headline), the CUDA-event span of one call, and ``host_seconds``, the CPU
    time of the call. The benchmark records an event, calls, records a second event and
    waits, once per repeat: the GPU is idle when each call starts, so the span covers the
    host's launch time as well as the kernels, and is what one isolated call costs a user
    (at least the CPU time, at least the device time). ``floor_s`` is the roofline floor,
    mostly the values' bytes over the copy bandwidth at these batches; ``ceilings.launch_s``
    is the span of the smallest CuPy launch timed the same way, the floor under any call.
``first_use``
    ``benchmarks/first_use.py`` in a fresh process with empty caches (``CUPY_CACHE_DIR``,
    ``KSCUPY_CACHE_DIR`` and ``CUDA_CACHE_PATH`` in a new temporary folder), then in a second
    fresh process on the same, now warm, caches: the time from before ``import kscupy`` to
    the results on the host (import, one new pattern in both layouts, ``dft(1024)``), and
    each process's wall time from the interpreter's start. Medians over
    ``--first-use-trials`` pairs; every trial is kept.
``host``
    Host time of one repeated call on a tiny problem (pattern (1, 4, 4, 1)): ``K @ x`` for a
    vector (the headline, ``host_overhead_us``), the same in BSF, and ``dft(1024) @ v``; the
    median over ``--host-loops`` loops of ``--host-calls`` calls without a synchronization
    inside (the GPU drains between loops, off the clock). ``floor_us``: the same for the two
    things any such call does, allocating its result (CuPy's pool) and launching the
    prepared kernel, whose sum no call that returns a new array can go under.
``solver``
    cupyx's ``cg`` on ``K^H K + I`` and ``gmres`` on ``K`` (``K = 10 * monarch(n)``, float32,
    through ``kscupy.aslinearoperator``) and ``gmres`` on the circulant ``F^H diag(h) F``
    (``F = dft(n, norm="ortho")``, complex64, one KS chain), each against the same solver on
    the dense matrix as a CuPy array, for n in ``--solver-sizes`` where the dense matrix fits
    (``--solver-dense-limit`` GiB and the free device memory; the reason is recorded
    otherwise). Tolerances are zero, so every solve runs its ``maxiter``; ``seconds_per_iter``
    is the median solve's wall time (synchronized) over the operator applications it made
    (one per cg iteration or Arnoldi step, plus the residuals'), counted in an untimed first
    solve that also warms up. ``floor_diagonal``: the solver's own time per iteration, with a
    diagonal operator (one elementwise product per application).

The summary compares each part with issue 10's targets (:data:`ROW_TARGETS` and the
constants below) and says whether each is met; a short table is printed last.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

try:
    import cupy  # noqa: E402
    from cupyx.profiler import benchmark  # noqa: E402
except ImportError:     # --help works without CuPy; main() says what is missing
    cupy = benchmark = None

import kscupy as ks  # noqa: E402
from kscupy.bench import engine  # noqa: E402
from torch_baselines import torch, torch_available  # noqa: E402
from kscupy.bench.grid import paper_grid, stratified_sample  # noqa: E402
from kscupy.bench.timing import (host_seconds, measure_ceilings, progress,  # noqa: E402
                                 run_metadata)

PARTS = ("first_use", "rows", "host", "solver")   # first use runs before this process uses CUDA
SMALL_BATCH_SUITE = "patterns_small_batch"
BATCHES = (1, 64)
LAYOUTS = ("bsl", "bsf")
#: Issue 10's targets for ``auto`` against the best baseline: the median over the patterns
#: of each layout, and the least any pattern may reach.
ROW_TARGETS = {1: {"median": 2.0, "min": 1.0}, 64: {"median": 1.5, "min": 0.95}}
FIRST_USE_TARGETS_S = {"empty_cache_s": 1.5, "warm_cache_s": 0.3}
HOST_OVERHEAD_TARGET_US = 5.0
#: Every (solver, operator): median over the sizes where the dense matrix fits.
SOLVER_TARGET = 1.5
TINY_PATTERN = (1, 4, 4, 1)
HOST_DFT_SIZE = 1024
FIRST_USE_CHILD = ROOT / "benchmarks" / "first_use.py"
#: Options --quick changes, unless given on the command line.
QUICK = {"patterns": 4, "repeat": 100, "first_use_trials": 1, "host_loops": 5,
         "solver_sizes": "1024,4096"}
NOTES = ("rows: 'seconds' (headline) is the median CUDA-event span of one call on an idle "
         "GPU, host launch time included; 'host_seconds' the median CPU time of the call. "
         "first_use: seconds from before 'import kscupy' to the results on the host; "
         "*_process_s: the child's wall time from the interpreter's start. solver: "
         "seconds_per_iter = solve wall time / operator applications.")


def add_arguments(parser):
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: " + ", ".join(f"--{k.replace('_', '-')} {v}"
                                                         for k, v in QUICK.items()))
    rows = parser.add_argument_group("rows")
    rows.add_argument("--patterns", type=int, default=20,
                      help="patterns of the stratified sample of the paper's grid")
    rows.add_argument("--shift", type=float, default=0.0,
                      help="shift of the stratified sample (0.5: disjoint from the default)")
    rows.add_argument("--repeat", type=int, default=200, help="timed calls per method")
    rows.add_argument("--dense-limit", type=float, default=4.0, help="GiB, base_dense")
    rows.add_argument("--dense-flops", type=float, default=6e12, help="max FLOP, base_dense")
    first = parser.add_argument_group("first_use")
    first.add_argument("--first-use-trials", type=int, default=3,
                       help="pairs of fresh processes (empty caches, then warm)")
    host = parser.add_argument_group("host")
    host.add_argument("--host-loops", type=int, default=15)
    host.add_argument("--host-calls", type=int, default=1000, help="calls per loop")
    solver = parser.add_argument_group("solver")
    solver.add_argument("--solver-sizes", default="1024,4096,16384,65536")
    solver.add_argument("--solver-dense-limit", type=float, default=32.0,
                        help="GiB: the largest dense matrix of the baseline")
    solver.add_argument("--cg-iterations", type=int, default=40)
    solver.add_argument("--gmres-restart", type=int, default=20,
                        help="Arnoldi steps per cycle; maxiter is the same number: one cycle "
                             "where cupyx counts maxiter in steps, that many cycles where it "
                             "counts cycles as SciPy does (the time per step is the same)")
    solver.add_argument("--solver-repeat", type=int, default=3, help="timed solves")


# -- rows -----------------------------------------------------------------------------------------
def small_batch_timer(repeat, budget_s=0.25):
    """A timer for ``engine.bench_row``: medians of the CUDA-event span (``seconds``) and of the
    CPU time (``host_seconds``) of ``repeat`` calls (fewer past ``budget_s``), cycling
    through ``inputs``."""
    def timer(fn, inputs):
        state = {"i": 0}

        def step():
            state["i"] = (state["i"] + 1) % len(inputs)
            return fn(inputs[state["i"]])
        result = benchmark(step, n_repeat=repeat, n_warmup=10, max_duration=budget_s)
        return {"seconds": float(numpy.median(result.gpu_times)),
                "host_seconds": float(numpy.median(result.cpu_times))}
    return timer


def launch_seconds(repeat):
    """The span of the smallest CuPy kernel (a one-element sum), timed as the rows are."""
    src = cupy.zeros(1, dtype=numpy.float32)
    dst = cupy.empty_like(src)
    return small_batch_timer(repeat)(lambda x: cupy.add(x, x, out=dst), [src])["seconds"]


def run_rows(args, ceilings, rows, save, progress):
    patterns = stratified_sample(paper_grid(), args.patterns, args.shift)
    sample = "default" if args.shift == 0 else f"shift{args.shift:g}"
    timer = small_batch_timer(args.repeat)
    cases = [(p, layout, B) for B in BATCHES for p in patterns for layout in LAYOUTS]
    for pattern, layout, B in progress(cases, desc="small batches"):
        rows.append(engine.bench_row(pattern, layout, "float32", "default", sample, args,
                                     ceilings, batch=B, timer=timer, suite=SMALL_BATCH_SUITE,
                                     extra_methods=("kernel_skinny",)))
        save()


# -- first use ------------------------------------------------------------------------------------
def run_child(env):
    """first_use.py in a fresh interpreter: its JSON line, plus ``process_s``, the wall time
    of the whole process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(FIRST_USE_CHILD)], env=env, capture_output=True,
                          text=True, timeout=600)
    process_s = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{FIRST_USE_CHILD.name} failed with status {done.returncode}:\n"
                           f"{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process_s": process_s}


def run_first_use(trials):
    """Pairs of fresh processes on new, empty cache folders: the first fills them, the second
    finds them warm. ``KSCUPY_AUTOTUNE`` is dropped: first use with the default settings."""
    runs = []
    for _ in range(trials):
        with tempfile.TemporaryDirectory(prefix="kscupy-first-use-") as caches:
            env = {k: v for k, v in os.environ.items() if k != "KSCUPY_AUTOTUNE"}
            env.update(CUPY_CACHE_DIR=os.path.join(caches, "cupy"),
                       KSCUPY_CACHE_DIR=os.path.join(caches, "kscupy"),
                       CUDA_CACHE_PATH=os.path.join(caches, "cuda"),
                       PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH"))
                                                  if p))
            runs.append({"empty": run_child(env), "warm": run_child(env)})
    return first_use_summary(runs)


def first_use_summary(runs):
    """The issue's ``first_use`` fields: medians over the trials, every trial kept."""
    def median(which, field):
        return float(numpy.median([run[which][field] for run in runs]))
    return {"empty_cache_s": median("empty", "work_s"), "warm_cache_s": median("warm", "work_s"),
            "empty_cache_process_s": median("empty", "process_s"),
            "warm_cache_process_s": median("warm", "process_s"), "trials": runs}


# -- host overhead --------------------------------------------------------------------------------
def run_host(loops, calls):
    rng = cupy.random.default_rng(1)
    K = ks.KSMatrix.random(TINY_PATTERN, dtype=numpy.float32, xp=cupy, seed=0)
    x = rng.standard_normal(K.shape[1], dtype=numpy.float32)
    x_row = x.reshape(1, -1)
    F = ks.dft(HOST_DFT_SIZE, dtype=numpy.complex64, xp=cupy)
    v = rng.standard_normal(HOST_DFT_SIZE, dtype=numpy.float32).astype(numpy.complex64)
    cases = {"matrix_vector": lambda: K @ x,
             "matrix_bsf_row": lambda: K.matmul(x_row, layout="bsf"),
             f"dft{HOST_DFT_SIZE}_vector": lambda: F @ v}
    # what any call that returns a new CuPy array from one launch costs on this host: the
    # allocation (CuPy's memory pool) and the launch of the prepared kernel K @ x runs
    run = ks.engine.prepare(K.factor, x.reshape(-1, 1), "bsl", "auto")
    y = run(x.reshape(-1, 1))
    floors = {"allocate_result": lambda: cupy.ndarray((K.shape[0],), numpy.float32),
              "prepared_launch": lambda: run.launch(x.data.ptr, y.data.ptr)}
    return {"pattern": list(TINY_PATTERN), "loops": loops, "calls": calls,
            "us": {name: 1e6 * host_seconds(fn, calls, loops)
                   for name, fn in cases.items()},
            "floor_us": {name: 1e6 * host_seconds(fn, calls, loops)
                         for name, fn in floors.items()}}


# -- solvers --------------------------------------------------------------------------------------
def solver_cases(n):
    """``(solver, operator name, dtype, build)`` per case; ``build()`` returns the KS
    LinearOperator and a function applying the same operator to an (n, w) block."""
    from cupyx.scipy.sparse.linalg import LinearOperator

    def normal_equations():
        K = ks.monarch(n, dtype=numpy.float32, xp=cupy, seed=0) * 10
        L = ks.aslinearoperator(K)
        A = LinearOperator((n, n), matvec=lambda x: L.rmatvec(L.matvec(x)) + x, dtype=L.dtype)
        return A, lambda E: K.H.matmul(K.matmul(E)) + E

    def monarch():
        K = ks.monarch(n, dtype=numpy.float32, xp=cupy, seed=0) * 10
        return ks.aslinearoperator(K), K.matmul

    def circulant():
        F = ks.dft(n, dtype=numpy.complex64, norm="ortho", xp=cupy)
        rng = numpy.random.default_rng(0)
        # eigenvalues in the disk of centre 1 and radius 0.9: no early convergence
        h = 1 + 0.9 * numpy.sqrt(rng.random(n)) * numpy.exp(2j * numpy.pi * rng.random(n))
        C = F.H @ ks.KSMatrix(cupy.asarray(h.reshape(n, 1, 1, 1), dtype=numpy.complex64)) @ F
        return ks.aslinearoperator(C), C.matmul

    return [("cg", "K^H K + I, K = 10 * monarch(n)", "float32", normal_equations),
            ("gmres", "K = 10 * monarch(n)", "float32", monarch),
            ("gmres", "F^H diag(h) F, F = dft(n, norm='ortho')", "complex64", circulant)]


def zero_tolerances(solver):
    """Keyword arguments that make a cupyx solver run all its iterations: ``rtol`` and
    ``atol`` in newer CuPy, ``tol`` and ``atol`` in older."""
    names = inspect.signature(solver).parameters
    return {"rtol": 0.0, "atol": 0.0} if "rtol" in names else {"tol": 0.0, "atol": 0.0}


def dense_of(apply_block, n, dtype, block):
    """The dense matrix of an operator, ``block`` identity columns at a time (bounded
    temporaries)."""
    D = cupy.empty((n, n), dtype=dtype)
    for start in range(0, n, block):
        width = min(block, n - start)
        E = cupy.zeros((n, width), dtype=dtype)
        E[start + cupy.arange(width), cupy.arange(width)] = 1
        D[:, start:start + width] = apply_block(E)
        del E
    return D


def applications(solve, A, b):
    """How many times ``solve`` applies ``A`` (a CuPy array or LinearOperator), counted in one
    untimed solve through a counting wrapper; it also warms up (NVRTC, plans, cuBLAS)."""
    from cupyx.scipy.sparse.linalg import LinearOperator, aslinearoperator
    inner = aslinearoperator(A)
    count = [0]

    def matvec(x):
        count[0] += 1
        return inner.matvec(x)
    solve(LinearOperator(A.shape, matvec=matvec, dtype=A.dtype), b)
    return count[0]


def solve_wall_seconds(solve, A, b, repeat):
    """Median wall time of ``repeat`` synchronized solves, and the last solution."""
    times = []
    for _ in range(repeat):
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        x = solve(A, b)
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - start)
    return float(numpy.median(times)), x


def solver_row(solver, operator, dtype, build, n, args):
    from cupyx.scipy.sparse.linalg import cg, gmres
    if solver == "cg":
        options = {"maxiter": args.cg_iterations, **zero_tolerances(cg)}

        def solve(A, b):
            return cg(A, b, **options)[0]
    else:
        options = {"restart": args.gmres_restart, "maxiter": args.gmres_restart,
                   **zero_tolerances(gmres)}

        def solve(A, b):
            return gmres(A, b, **options)[0]
    b = cupy.random.default_rng(2).standard_normal(n, dtype=numpy.float32).astype(dtype)
    row = {"suite": "solver", "solver": solver, "operator": operator, "n": n, "dtype": dtype,
           "options": {k: v for k, v in options.items() if k in ("maxiter", "restart")},
           "iterations": {}, "seconds_per_iter": {}}
    A, apply_block = build()
    solutions = {}
    row["iterations"]["auto"] = applications(solve, A, b)
    wall, solutions["auto"] = solve_wall_seconds(solve, A, b, args.solver_repeat)
    row["seconds_per_iter"]["auto"] = wall / row["iterations"]["auto"]
    # the solver's own time per iteration: the same solve with a diagonal operator (one
    # elementwise product per application), under which no operator can go
    from cupyx.scipy.sparse.linalg import LinearOperator
    diagonal = 1 + cupy.random.default_rng(3).random(n, dtype=numpy.float32).astype(dtype)
    D_op = LinearOperator((n, n), matvec=lambda x: diagonal * x, dtype=dtype)
    applied = applications(solve, D_op, b)
    wall, _ = solve_wall_seconds(solve, D_op, b, args.solver_repeat)
    row["seconds_per_iter"]["floor_diagonal"] = wall / applied
    itemsize = numpy.dtype(dtype).itemsize
    dense_bytes = itemsize * n * n
    block = min(n, 4096)
    cupy.get_default_memory_pool().free_all_blocks()
    free = cupy.cuda.runtime.memGetInfo()[0]
    needed = dense_bytes + 4 * itemsize * n * block + 2**30     # the block's temporaries
    if dense_bytes > args.solver_dense_limit * 2**30:
        row["dense_skipped"] = f"{dense_bytes / 2**30:.1f} GiB > --solver-dense-limit"
    elif needed > free:
        row["dense_skipped"] = f"needs {needed / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
    else:
        D = dense_of(apply_block, n, dtype, block)
        row["iterations"]["base_dense"] = applications(solve, D, b)
        wall, solutions["base_dense"] = solve_wall_seconds(solve, D, b, args.solver_repeat)
        row["seconds_per_iter"]["base_dense"] = wall / row["iterations"]["base_dense"]
        # same solver, same steps: the solutions differ by rounding unless the operators do
        ref = solutions["base_dense"]
        row["solution_relerr"] = float(cupy.linalg.norm(solutions["auto"] - ref)
                                       / cupy.linalg.norm(ref))
        del D
    del A, apply_block, solutions
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def run_solvers(args, rows, save, progress):
    sizes = [int(n) for n in args.solver_sizes.split(",")]
    cases = [(n, case) for n in sizes for case in solver_cases(n)]
    for n, (solver, operator, dtype, build) in progress(cases, desc="solvers"):
        rows.append(solver_row(solver, operator, dtype, build, n, args))
        save()


# -- summary --------------------------------------------------------------------------------------
def speedups(rows, method, field="seconds"):
    """Best baseline's time over ``method``'s, per row (> 1: the method is faster)."""
    return numpy.array([min(t for k, t in r[field].items() if k.startswith("base_"))
                        / r[field][method] for r in rows])


def summarize(result):
    """Per part, the figures issue 10's targets are stated in and whether each is met;
    ``targets_met`` gathers the verdicts of the parts present."""
    summary, met = {}, {}
    rows = result.get("rows", [])
    small = [r for r in rows if r["suite"] == SMALL_BATCH_SUITE]
    for B, layout in sorted({(r["batch"], r["layout"]) for r in small}):
        group = [r for r in small if (r["batch"], r["layout"]) == (B, layout)]
        auto = speedups(group, "auto")
        entry = {"patterns": len(group), "auto_median": float(numpy.median(auto)),
                 "auto_min": float(auto.min()), "below_1.0": int((auto < 1.0).sum()),
                 "below_0.95": int((auto < 0.95).sum()),
                 "kernel_median": float(numpy.median(speedups(group, "kernel"))),
                 "auto_host_median": float(numpy.median(speedups(group, "auto",
                                                                 "host_seconds")))}
        target = ROW_TARGETS.get(B)
        if target is not None:
            entry["met"] = bool(entry["auto_median"] >= target["median"]
                                and entry["auto_min"] >= target["min"])
            met[f"B={B}|{layout}"] = entry["met"]
        summary[f"B={B}|{layout}"] = entry
    if "first_use" in result:
        first = {k: result["first_use"][k] for k in FIRST_USE_TARGETS_S}
        first["met"] = all(first[k] <= limit for k, limit in FIRST_USE_TARGETS_S.items())
        met["first_use"] = first["met"]
        summary["first_use"] = first
    if "host_overhead_us" in result:
        met["host_overhead"] = result["host_overhead_us"] <= HOST_OVERHEAD_TARGET_US
        summary["host_overhead"] = {"us": result["host_overhead_us"],
                                    "met": met["host_overhead"]}
    solved = [r for r in rows if r["suite"] == "solver"]
    for solver, operator in sorted({(r["solver"], r["operator"]) for r in solved}):
        group = [r for r in solved if (r["solver"], r["operator"]) == (solver, operator)
                 and "base_dense" in r["seconds_per_iter"]]
        ratios = [r["seconds_per_iter"]["base_dense"] / r["seconds_per_iter"]["auto"]
                  for r in group]
        entry = {"sizes": [r["n"] for r in group],
                 "speedup_median": float(numpy.median(ratios)) if ratios else None}
        entry["met"] = bool(ratios) and entry["speedup_median"] >= SOLVER_TARGET
        summary[f"{solver}|{operator}"] = entry
        met[f"{solver}|{operator}"] = entry["met"]
    summary["targets_met"] = met
    return summary


def print_summary(result):
    summary = result["summary"]
    print(f"\n{result['device']}, {len(result['rows'])} rows, {result['seconds']:.0f} s")
    for key, entry in summary.items():
        if key == "targets_met":
            continue
        figures = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in entry.items() if k != "met")
        verdict = {True: "met ", False: "MISS", None: "    "}[entry.get("met")]
        print(f"{key:50s} {verdict} {figures}")
    verdicts = summary["targets_met"]
    print(f"targets met: {sum(verdicts.values())} of {len(verdicts)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {','.join(PARTS)}")
    if cupy is None:
        sys.exit(f"{pathlib.Path(__file__).name} times GPU kernels and needs CuPy and a CUDA device")

    t0 = time.time()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"notes": NOTES, "rows": []}

    def save():
        result["seconds"] = time.time() - t0
        out.write_text(json.dumps(result, indent=1))

    if "first_use" in parts:     # before this process creates a CUDA context
        result["first_use"] = run_first_use(args.first_use_trials)
        save()
    meta = run_metadata()
    result.update(device=meta["gpu"], commit=meta["commit"], date=meta["date"],
                  command=meta["command"], cupy=meta["cupy"], cuda_runtime=meta["cuda_runtime"],
                  torch=torch.__version__ if torch_available() else None)
    if "rows" in parts:
        measured = measure_ceilings()
        result["ceilings"] = {"bandwidth": measured["copy_bandwidth_Bps"],
                              "sgemm": measured["sgemm_flops"],
                              "launch_s": launch_seconds(args.repeat)}
        result["pattern_sample"] = {"kind": "stratified", "count": args.patterns,
                                    "shift": args.shift}
        run_rows(args, result["ceilings"], result["rows"], save, progress)
    if "host" in parts:
        result["host_overhead"] = run_host(args.host_loops, args.host_calls)
        result["host_overhead_us"] = result["host_overhead"]["us"]["matrix_vector"]
        save()
    if "solver" in parts:
        run_solvers(args, result["rows"], save, progress)
    result["summary"] = summarize(result)
    save()
    print_summary(result)


if __name__ == "__main__":
    main()
