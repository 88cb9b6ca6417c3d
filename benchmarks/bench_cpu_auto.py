"""``backend="auto"`` on NumPy against the CPU backends it chooses from, in one run.

    PYTHONPATH=$PWD python3 benchmarks/bench_cpu_auto.py --out benchmarks/results/cpu_auto.json

Times ``op.matmul(X, layout=..., backend=...)`` for ``auto``, ``bmm``, ``einsum`` and
``sparse`` (the public path, so every backend pays the same dispatch) on:

1. single factors: a stratified sample of KS patterns like the paper's grid but sized for a
   CPU (``b, c`` from 2 to 256 with ``b = c`` or a ratio of 4, ``a`` and ``d`` powers of two,
   both matrix sides between 64 and 4096), each at batch sizes 1 to 4096 in both layouts, in
   one dtype per pattern (float32, float64, complex64, complex128 in turn);
2. chains, every factor under the same backend: ``dft(4096)`` (complex64, complex128) and a
   ``butterfly(1024)`` (float32, float64), both layouts, several batch sizes.

Operands are C-contiguous (``(N, B)`` in bsl, ``(B, N)`` in bsf). Each time is the best of
several calls after one warm-up call (the first call forms the CSR matrix and faults in
fresh memory), taken in rounds that interleave the backends (see ``time_backends``) once the
allocator is settled (see ``settle_allocator``). Rows whose product is too large for the
time budget are left out (``--max-macs``, ``--max-elements``). Rows where ``auto`` misses
the target are timed again (``--retimes``), every backend keeping its best time: a slow spell
of the virtual machine (OpenBLAS's thread hand-offs taking milliseconds, seen for tens of
seconds at a time on the 2-core development VM) otherwise shows up as a miss of the model.

Writes JSON rows ``{pattern | chain, layout, dtype, batch, seconds: {auto, bmm, einsum,
sparse}, ratio, choice}`` (``ratio``: auto's time over the fastest of the others;
``choice``: how many factors auto ran with each backend) and a summary (max and median
ratio, rows above ``--target``; ``held_out``: the patterns ``--fitted`` does not hold), and
prints the rows that miss it. ``--backends bmm einsum sparse`` times the backends alone (the
rows ``fit_cpu_costs.py`` fits the model to).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import itertools
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
import timeit

import numpy

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import kscupy as ks  # noqa: E402
from kscupy.engine import cpu_choice  # noqa: E402
from kscupy.bench.grid import stratified_sample  # noqa: E402

BACKENDS = ("auto", "bmm", "einsum", "sparse")
DTYPES = ("float32", "float64", "complex64", "complex128")
BATCHES = (1, 16, 256, 4096)
BLOCK_SIDES = (2, 4, 8, 16, 32, 64, 128, 256)
POWERS = tuple(2 ** k for k in range(12))
SIDE_RANGE = (64, 4096)


def candidate_patterns():
    """Every ``(a, b, c, d)`` with b, c in BLOCK_SIDES (equal or a ratio of 4), a, d powers
    of two, and both matrix sides in SIDE_RANGE."""
    out = []
    for a, b, c, d in itertools.product(POWERS, BLOCK_SIDES, BLOCK_SIDES, POWERS):
        if not (b == c or b == 4 * c or c == 4 * b):
            continue
        M, N = a * b * d, a * c * d
        if SIDE_RANGE[0] <= min(M, N) and max(M, N) <= SIDE_RANGE[1]:
            out.append((a, b, c, d))
    return out


def random_operand(seed, shape, dtype):
    rng = numpy.random.default_rng(seed)
    X = rng.standard_normal(shape)
    if numpy.dtype(dtype).kind == "c":
        X = X + 1j * rng.standard_normal(shape)
    return X.astype(dtype)


def single_cases(args):
    """``(row, make)`` per single-factor product: ``row`` describes it, ``make()`` builds its
    operator and operand (again when the row is timed again)."""
    patterns = stratified_sample(candidate_patterns(), args.patterns, args.shift)
    for index, pattern in enumerate(patterns):
        dtype = args.dtypes[index % len(args.dtypes)]
        (M, N), nnz = ks.KSPattern(*pattern).shape, ks.KSPattern(*pattern).nnz
        for batch, layout in itertools.product(args.batches, ("bsl", "bsf")):
            if batch * nnz > args.max_macs or batch * max(M, N) > args.max_elements:
                continue
            shape = (N, batch) if layout == "bsl" else (batch, N)

            def make(pattern=pattern, dtype=dtype, seed=index, shape=shape):
                return (ks.KSMatrix.random(pattern, dtype=dtype, seed=seed),
                        random_operand(seed, shape, dtype))
            yield {"pattern": list(pattern), "layout": layout, "dtype": dtype,
                   "batch": batch}, make


def chain_cases(args):
    """``(row, make)`` per chain product, as ``single_cases``."""
    chains = (("dft(4096)", lambda dtype: ks.dft(4096, dtype=dtype), ("complex64", "complex128")),
              ("butterfly(1024)", lambda dtype: ks.butterfly(1024, dtype=dtype, seed=0),
               ("float32", "float64")))
    for name, chain, dtypes in chains:
        for dtype, batch, layout in itertools.product(dtypes, args.chain_batches, ("bsl", "bsf")):
            n = 4096 if name.startswith("dft") else 1024
            shape = (n, batch) if layout == "bsl" else (batch, n)

            def make(chain=chain, dtype=dtype, shape=shape):
                return chain(dtype), random_operand(0, shape, dtype)
            yield {"chain": name, "layout": layout, "dtype": dtype, "batch": batch}, make


def time_backends(op, X, layout, args):
    """Best time of ``op.matmul(X, layout=layout, backend=b)`` for each backend: one warm-up
    call each, then ``args.rounds`` rounds that each time every backend in turn (as many
    calls as fit in ``args.budget`` seconds, at least one), so that a slow spell of the
    machine hits all of them alike."""
    calls = {b: (lambda b=b: op.matmul(X, layout=layout, backend=b)) for b in args.backends}
    best = {}
    for backend, call in calls.items():
        start = time.perf_counter()
        call()
        best[backend] = time.perf_counter() - start     # an upper bound: sizes the rounds
    for _ in range(args.rounds):
        for backend, call in calls.items():
            repeat = int(min(args.max_repeat, max(1, args.budget / best[backend])))
            best[backend] = min(best[backend], *timeit.repeat(call, number=1, repeat=repeat))
    return best


def auto_choices(op, X, layout):
    """How many factors ``auto`` runs with each backend for ``op @ X`` (recorded during one
    call: a chain on NumPy applies every factor through ``kscupy.engine.single``)."""
    choose, picked = cpu_choice.choose_cpu_for, collections.Counter()

    def recording(factor, X, layout):
        backend = choose(factor, X, layout)
        picked[backend] += 1
        return backend
    cpu_choice.choose_cpu_for = recording
    try:
        op.matmul(X, layout=layout, backend="auto")
    finally:
        cpu_choice.choose_cpu_for = choose
    return dict(picked)


def measure(row, make, args):
    """Time ``row``'s product (keeping each backend's best over earlier timings of it)."""
    op, X = make()
    seconds = time_backends(op, X, row["layout"], args)
    kept = row.get("seconds", seconds)
    row["seconds"] = {b: min(kept[b], seconds[b]) for b in args.backends}
    if "auto" in args.backends:
        row["choice"] = auto_choices(op, X, row["layout"])
        row["ratio"] = row["seconds"]["auto"] / min(t for b, t in row["seconds"].items()
                                                    if b != "auto")
    return row


def settle_allocator():
    """Allocate and free one array just under 32 MiB, as a process that has handled large
    arrays before would have. glibc's malloc adapts its mmap and trim thresholds to the
    largest block freed (up to 32 MiB): after this it serves arrays up to that size from its
    heap instead of mapping fresh pages on every call. Without it the timings of a row depend
    on the rows timed before it: a product with a few MiB of temporaries ran 10x slower in a
    fresh process (every call faulting in its pages)."""
    numpy.ones((32 << 20) // 8 - 512)


def summary(rows, target):
    ratios = numpy.array([r["ratio"] for r in rows])
    return {"rows": len(rows), "max_ratio": round(float(ratios.max()), 3),
            "median_ratio": round(float(numpy.median(ratios)), 3),
            f"rows_above_{target}": int((ratios > target).sum())}


def metadata(args, seconds):
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip()
                   for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import scipy
    return {"cpu": cpu, "cores": os.cpu_count(), "numpy": numpy.__version__,
            "scipy": scipy.__version__, "commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": " ".join([sys.executable.split("/")[-1]] + sys.argv),
            "seconds": round(seconds, 1),
            "args": {k: str(v) if isinstance(v, pathlib.Path) else v
                     for k, v in vars(args).items()}}


def describe(row):
    what = row.get("chain") or tuple(row["pattern"])
    times = " ".join(f"{b} {t * 1e3:.3f}" for b, t in row["seconds"].items())
    ratio = f" ratio {row['ratio']:.2f} {row['choice']}" if "ratio" in row else ""
    return f"{str(what):20s} {row['layout']} {row['dtype']:10s} B={row['batch']:<5d} ms: {times}{ratio}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path,
                        default=ROOT / "benchmarks" / "results" / "cpu_auto.json")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--patterns", type=int, default=96,
                        help="single-factor patterns in the stratified sample")
    parser.add_argument("--shift", type=float, default=0.0,
                        help="sample shift in [0, 1): 0.5 gives a disjoint (held-out) sample")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    parser.add_argument("--chain-batches", nargs="+", type=int, default=[1, 64, 1024])
    parser.add_argument("--no-chains", action="store_true", help="single factors only")
    parser.add_argument("--max-macs", type=float, default=2 ** 27,
                        help="leave out products with more multiply-adds (batch x nnz)")
    parser.add_argument("--max-elements", type=float, default=2 ** 22,
                        help="leave out products whose operand or result has more elements")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of timing every backend in turn (see time_backends)")
    parser.add_argument("--budget", type=float, default=0.02,
                        help="seconds of repeated calls per backend, row and round")
    parser.add_argument("--max-repeat", type=int, default=100)
    parser.add_argument("--retimes", type=int, default=2,
                        help="times a row above the target is timed again")
    parser.add_argument("--target", type=float, default=1.3,
                        help="the ratio auto must stay under")
    parser.add_argument("--fitted", type=pathlib.Path,
                        default=ROOT / "benchmarks" / "results" / "cpu_train.json",
                        help="the rows the model was fitted to: the summary also gives the "
                             "rows of other patterns alone ('held_out')")
    args = parser.parse_args(argv)

    settle_allocator()
    start = time.perf_counter()
    cases = list(single_cases(args))
    if not args.no_chains:
        cases += list(chain_cases(args))
    rows = []
    for row, make in cases:
        rows.append(measure(row, make, args))
        print(describe(row), flush=True)
    for _ in range(args.retimes if "auto" in args.backends else 0):
        again = [(row, make) for row, make in cases if row["ratio"] > args.target]
        for row, make in again:
            measure(row, make, args)
            row["timed"] = row.get("timed", 1) + 1
            print("again:", describe(row), flush=True)
    result = {"meta": metadata(args, time.perf_counter() - start), "rows": rows}
    if "auto" in args.backends:
        fitted = set()
        if args.fitted and args.fitted.exists():
            fitted = {tuple(r["pattern"]) for r in json.loads(args.fitted.read_text())["rows"]}
        kinds = {"all": rows, "patterns": [r for r in rows if "pattern" in r],
                 "held_out": [r for r in rows if "pattern" in r
                              and tuple(r["pattern"]) not in fitted],
                 "chains": [r for r in rows if "chain" in r]}
        result["summary"] = {kind: summary(chosen, args.target)
                             for kind, chosen in kinds.items() if chosen}
        print(json.dumps(result["summary"], indent=1))
        misses = [r for r in rows if r["ratio"] > args.target]
        if misses:
            print(f"\n{len(misses)} rows above {args.target}:")
            for row in misses:
                print(describe(row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
