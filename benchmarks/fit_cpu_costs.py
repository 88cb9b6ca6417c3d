"""Fit the CPU cost model (``kscupy/engine/costs/cpu.json``) to timed single-factor products.

    PYTHONPATH=$PWD python3 benchmarks/fit_cpu_costs.py benchmarks/results/cpu_train.json \\
        --check benchmarks/results/cpu_auto.json

The input files are ``benchmarks/bench_cpu_auto.py`` outputs (``auto`` need not be among
their backends). Rows of the same product in several files (repeated runs) are merged, each
backend keeping its best time: a slow spell of the machine during one run then does not
enter the fit. ``--save`` writes the merged rows.

For each algorithm (bmm, einsum, sparse) and regime of the model ("vector", "bsl", "bsf"),
the constants ``c >= 0`` minimise the soft-L1 loss of ``log(sum_k c_k n_k) - log(t)`` over
the rows (``n_k``: the counts of ``kscupy.engine.costs.cpu.cpu_terms``, ``t``: the measured
seconds),
started from the non-negative least-squares fit of the relative error. Prints the table to
put in ``cpu.json``'s ``"terms"`` (terms whose fitted constant never reaches 1% of a row's modelled
time are left out), the RMS log error of each algorithm, and how well the model chooses on
the fitted rows and on the ``--check`` files: the measured time of the algorithm it picks
over the fastest one (max, median, rows above ``--target``).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy
from scipy.optimize import least_squares, nnls

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from kscupy import KSPattern  # noqa: E402
from kscupy.engine.costs import cpu as costs  # noqa: E402
from kscupy.core.problem import Problem  # noqa: E402

ALGORITHMS = ("bmm", "einsum", "sparse")
REGIMES = ("vector", "bsl", "bsf")


def row_problem(row) -> Problem:
    """The product of a benchmark row: C-contiguous operands, as the benchmark times."""
    return Problem(KSPattern(*row["pattern"]), row["batch"], numpy.dtype(row["dtype"]),
                   row["layout"], row["layout"] == "bsl" or row["batch"] == 1, False)


def load(paths):
    """Single-factor rows of the files, repeated products merged (best time per backend)."""
    merged = {}
    for path in paths:
        for row in json.loads(pathlib.Path(path).read_text())["rows"]:
            if "pattern" not in row:
                continue
            key = (tuple(row["pattern"]), row["layout"], row["dtype"], row["batch"])
            if key in merged:
                kept = merged[key]["seconds"]
                for backend, seconds in row["seconds"].items():
                    kept[backend] = min(kept.get(backend, seconds), seconds)
            else:
                merged[key] = {k: row[k] for k in ("pattern", "layout", "dtype", "batch")}
                merged[key]["seconds"] = dict(row["seconds"])
    return list(merged.values())


def _constants(n, t):
    """Non-negative ``c`` minimising the soft-L1 loss of ``log(n @ c) - log(t)``."""
    relative = n / t[:, None]
    scale = relative.max(axis=0)
    scale[scale == 0] = 1.0
    start, _ = nnls(relative / scale, numpy.ones(len(t)))
    start = numpy.maximum(start / scale, 1e-9 / scale)      # positive: the fit is in log space
    solution = least_squares(lambda z: numpy.log(n @ numpy.exp(z)) - numpy.log(t),
                             numpy.log(start), loss="soft_l1", f_scale=0.2)
    return numpy.exp(solution.x)


def fit(rows):
    """``{(algorithm, regime): {term: constant}}`` fitted to ``rows``: all terms first, then
    again with those that reach 1% of some row's modelled time."""
    table = {}
    for algorithm in ALGORITHMS:
        for regime in REGIMES:
            chosen = [r for r in rows
                      if costs._regime(row_problem(r)) == regime and algorithm in r["seconds"]]
            counts = [costs.cpu_terms(row_problem(r), algorithm) for r in chosen]
            terms = sorted(set().union(*counts))
            n = numpy.array([[c.get(term, 0.0) for term in terms] for c in counts])
            t = numpy.array([r["seconds"][algorithm] for r in chosen])
            constants = _constants(n, t)
            kept = (n * constants / (n @ constants)[:, None]).max(axis=0) >= 0.01
            constants = _constants(n[:, kept], t)
            table[(algorithm, regime)] = {str(term): float(f"{c:.3g}") for term, c
                                          in zip(numpy.array(terms)[kept], constants)}
    return table


def modelled(table, row, algorithm):
    counts = costs.cpu_terms(row_problem(row), algorithm)
    constants = table[(algorithm, costs._regime(row_problem(row)))]
    return sum(constants.get(term, 0.0) * count for term, count in counts.items())


def report(table, rows, label, target):
    errors = {a: [] for a in ALGORITHMS}
    ratios, misses = [], []
    for row in rows:
        seconds = {a: row["seconds"][a] for a in ALGORITHMS}
        predicted = {a: modelled(table, row, a) for a in ALGORITHMS}
        for a in ALGORITHMS:
            errors[a].append(numpy.log(predicted[a] / seconds[a]))
        pick = min(predicted, key=predicted.get)
        ratios.append(seconds[pick] / min(seconds.values()))
        if ratios[-1] > target:
            misses.append((ratios[-1], row, pick))
    ratios = numpy.array(ratios)
    rms = " ".join(f"{a} {numpy.sqrt(numpy.mean(numpy.square(e))):.2f}" for a, e in errors.items())
    print(f"{label}: {len(rows)} rows; picked / fastest: max {ratios.max():.2f}, median "
          f"{numpy.median(ratios):.3f}, above {target}: {len(misses)}; RMS log error: {rms}")
    for ratio, row, pick in sorted(misses, key=lambda m: -m[0]):
        times = " ".join(f"{a} {row['seconds'][a] * 1e3:.3f}" for a in ALGORITHMS)
        print(f"  {tuple(row['pattern'])} {row['layout']} {row['dtype']} B={row['batch']}: "
              f"picks {pick}, {ratio:.2f}x (ms: {times})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=pathlib.Path, help="rows to fit")
    parser.add_argument("--check", nargs="*", type=pathlib.Path, default=[],
                        help="rows to replay the fitted model's choices on")
    parser.add_argument("--save", type=pathlib.Path, help="write the merged rows here")
    parser.add_argument("--target", type=float, default=1.3)
    args = parser.parse_args(argv)

    rows = load(args.files)
    if args.save:
        merged = {"meta": {"merged_from": [str(p) for p in args.files],
                           "note": "each backend's best time over the files"}, "rows": rows}
        args.save.write_text(json.dumps(merged, indent=1) + "\n")
    table = fit(rows)
    print(' "terms": {')
    lines = [f'  "{algorithm}/{regime}": {json.dumps(constants)}'
             for (algorithm, regime), constants in table.items()]
    print(",\n".join(lines) + "\n },")
    report(table, rows, "fitted rows", args.target)
    if args.check:
        report(table, load(args.check), "check rows", args.target)


if __name__ == "__main__":
    main()
