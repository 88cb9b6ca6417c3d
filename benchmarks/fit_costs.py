"""Fit the tensor-core kernel's cost-model constants to an engine benchmark.

    python3 benchmarks/fit_costs.py benchmarks/results/engine.json

For each model key of the tensor-core kernel (its copy order, batch, in-group or group, with
``_dmma`` on the FP64 tensor cores, ``_hmma`` for float16, ``_complex`` for complex64,
``_tf32`` for one TF32 product: ``kscupy.engine.costs.gpu.mma_variant``) and dtype, fits
``(bytes_factor, efficiency, m0)`` of the GPU cost model's single-factor model to the
measured ``kernel`` (``kernel_tf32``) seconds (least squares on log time), and prints them
with the RMS log error and how often the model, with the fitted constants, ranks the kernel
against the measured ``bmm`` correctly, as lines of the constants' data files: put them in
``kscupy/engine/costs/gpu.json``, or in the device's ``gpu-<word>.json`` where they hold for
that GPU only, with a source that names the device, the date and the commands. ``--current``
prints, per layout, what ``auto`` would reach on the file's measured times if it chose with
the current constants. Runs on the CPU (the device's facts are read from the file; no tuning
cache is read).

Several files (of one GPU) are fitted together, the first giving the device's facts:

    python3 benchmarks/fit_costs.py probe_block_dense_h100.json interop.json --rates parity.json

(the tensor-core kernel's times of the first and the bf16 rows of the second, bfloat16 priced
as float16: the fit of ``mma/group_hmma`` in ``gpu-h100.json``).

    python3 benchmarks/fit_costs.py --bmm benchmarks/results/bmm_groups.json

fits bmm's keys instead (``group_gemm_variant``: per dtype and precision, and whether
the batch runs along the GEMM's rows) to the ``bmm`` and ``bmm_tf32`` seconds of
``benchmarks/probe_bmm.py``'s rows (or ``probe_ingroup.py``'s, for ``groups_rows``).

    python3 benchmarks/fit_costs.py --chains benchmarks/results/chains.json [--rates engine.json]

prices each DFT, Hadamard and butterfly row of a chains suite's file with the planner as it
is now and prints its plan's modelled time against the measured ``auto`` time, for the rows
whose plan is still the one measured (the device: the file's, or an engine file's from the
same GPU).

    python3 benchmarks/fit_costs.py --regret engine.json engine_f64.json probe_host_h100.json

replays the model's pick among the backends each row timed (``base_dense`` standing for
``dense``: the same cuBLAS GEMM), and ``auto``'s rule (the fastest of the rivals its close
calls time), and prints, per file and over all, their time over the fastest of them
(geometric mean) and the rows they lose by more than 10%: the check of a change to the
model's form or constants, or to the close-call rule, against what was measured, on the
CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

import numpy
from scipy.optimize import least_squares

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import dataclasses  # noqa: E402

import kscupy as ks  # noqa: E402
from kscupy.core import device as devices  # noqa: E402
from kscupy.core.problem import Problem  # noqa: E402
from kscupy.engine import decide  # noqa: E402
from kscupy.engine.costs import gpu as gpu_costs  # noqa: E402
from kscupy.kernels import ks_mma  # noqa: E402

#: The method each precision's rows are fitted to and replayed as.
KERNEL = {"default": "kernel", "tf32": "kernel_tf32"}
BMM = {"default": "bmm", "tf32": "bmm_tf32"}
AUTO = {"default": "auto", "tf32": "auto_tf32"}


def problems(rows):
    """``(problem, row, precision)`` of the rows that timed the tensor-core kernel; bfloat16
    rows as float16 (the same kernels, at the same tensor-core rate)."""
    for row in rows:
        precision = row.get("precision", "default")
        if KERNEL[precision] not in row["seconds"]:
            continue
        dtype = "float16" if row["dtype"] == "bfloat16" else row["dtype"]
        p = Problem(ks.KSPattern(*row["pattern"]), row["batch"], numpy.dtype(dtype),
                    row["layout"], row["layout"] == "bsl", False)
        yield p, row, precision


def replay_auto(data, rates):
    """Per dtype, precision, layout and sample: median and minimum of best baseline / the
    measured time of the backend the model picks, and the rows below 0.95."""
    out = {}
    for p, row, precision in problems(data["rows"]):
        s = row["seconds"]
        pick = decide.ranked(p, rates, precision)[0][1].name    # the model's choice
        if pick not in s and f"base_{pick}" in s:   # dense (_tf32): the baseline's own call
            pick = f"base_{pick}"
        if pick not in s:
            continue
        best = min(v for k, v in s.items() if k.startswith("base_"))
        sample = "" if row.get("sample", "default") == "default" else f' {row["sample"]}'
        out.setdefault(f'{p.dtype.name} {AUTO[precision]} {row["layout"]}{sample}', []).append(
            (best / s[pick], row["pattern"], pick))
    for layout, values in sorted(out.items()):
        ratios = numpy.array([v[0] for v in values])
        low = [f"{tuple(pat)} {pick} {r:.2f}" for r, pat, pick in sorted(values) if r < 0.95]
        print(f"auto replayed, {layout}: median {numpy.median(ratios):.2f}, min {ratios.min():.2f}; "
              f"below 0.95: {'; '.join(low) or 'none'}")


def fit(cases, key, seconds_of, x0, rates):
    """Least squares on log time of the constants ``key`` of ``rates``' device (the table
    :mod:`kscupy.engine.costs.constants` loaded for it) over ``cases`` (``(problem, row,
    measured seconds)``), ``seconds_of(problem)`` the model; prints the fit as a line of the
    data files and returns the model's times with it."""
    from kscupy.engine.costs import constants
    measured = numpy.log([t for _, _, t in cases])
    table = constants.gpu(rates.name).single

    def predicted(theta):
        table[key] = tuple(theta)
        return numpy.log([seconds_of(p) for p, _, _ in cases])

    # efficiencies above 1: the model's peak (gemm_peak) is an estimate of the rate
    result = least_squares(lambda t: predicted(t) - measured, x0=x0,
                           bounds=((0.2, 0.02, 0.0), (10.0, 20.0, 3000.0)))
    rms = float(numpy.sqrt(numpy.mean(result.fun ** 2)))
    worst = float(numpy.abs(result.fun).max())
    print(f'  "{key[0]}/{key[1]}": [[{result.x[0]:.3f}, {result.x[1]:.3f}, {result.x[2]:.1f}], '
          f'"SOURCE"],   [{len(cases)} rows] RMS log error {rms:.2f}, worst {worst:.2f}')
    return numpy.exp(predicted(result.x))


def fit_bmm(data, rates):
    groups = {}
    for row in data["rows"]:
        precision = row.get("precision", "default")
        method = BMM[precision]
        p = Problem(ks.KSPattern(*row["pattern"]), row["batch"], numpy.dtype(row["dtype"]),
                    row["layout"], row["layout"] == "bsl", False)
        key = ("bmm", gpu_costs.group_gemm_variant(p, precision))
        groups.setdefault((key, precision), []).append((p, row, row["seconds"][method]))
    for (key, precision), cases in sorted(groups.items()):
        fit(cases, key, lambda p: gpu_costs.bmm_seconds(p, rates, precision),
            (1.0, 0.8, 50.0), rates)


#: The measured methods the model's backends are replayed against: a row's own name, and
#: the dense baseline's GEMM as ``dense``.
REPLAYED = {"kernel": "kernel", "kernel_bsl": "kernel_bsl", "kernel_fma": "kernel_fma",
            "kernel_skinny": "kernel_skinny", "bmm": "bmm", "block_dense": "block_dense",
            "dense": "dense", "base_dense": "dense"}


def regret(files, names, rates):
    """Per file and over all: the time of the model's pick among the backends a row timed
    (rows of default precision; ``events_us`` rows of probe_host.py in microseconds) over
    the fastest of them, and that of ``auto``'s rule: the fastest measured of the rivals
    :func:`kscupy.engine.decide.close_call` names (what its timing would find), else the
    pick."""
    everything = {"pick": [], "auto": []}
    for name, data in zip(names, files):
        ratios, slow = {"pick": [], "auto": []}, []
        for row in data["rows"]:
            if row.get("precision", "default") != "default" or row.get("suite") == "graph":
                continue
            times = row.get("seconds") or {k: v * 1e-6 for k, v in
                                           row.get("events_us", {}).items()}
            dtype = "float16" if row["dtype"] == "bfloat16" else row["dtype"]
            p = Problem(ks.KSPattern(*row["pattern"]), row["batch"], numpy.dtype(dtype),
                        row["layout"], row["layout"] == "bsl", False)
            measured = {REPLAYED[k]: v for k, v in times.items() if k in REPLAYED}
            weighed = [(t, b.name) for t, b in decide.ranked(p, rates) if b.name in measured]
            if len(weighed) < 2:
                continue
            pick, fastest = weighed[0][1], min(measured[n] for _, n in weighed)
            rivals = [c.backend for c in decide.close_call(p, rates) or ()
                      if c.backend in measured] or [pick]
            ratios["pick"].append(measured[pick] / fastest)
            ratios["auto"].append(min(measured[n] for n in rivals) / fastest)
            if ratios["pick"][-1] > 1.1:
                slow.append(f"{tuple(row['pattern'])} {row['layout']} {dtype} B={row['batch']}:"
                            f" {pick} {ratios['pick'][-1]:.2f}, auto {ratios['auto'][-1]:.2f}")
        for key in everything:
            everything[key] += ratios[key]
        if ratios["pick"]:
            print(f"{name}: {len(ratios['pick'])} rows, over the fastest (geometric mean, rows "
                  f"more than 10% slow): {_regret_line(ratios)}")
            for line in slow:
                print(f"    {line}")
    if everything["pick"]:
        print(f"all: {len(everything['pick'])} rows, {_regret_line(everything)}")


def _regret_line(ratios):
    return ", ".join(f"{key} {numpy.exp(numpy.mean(numpy.log(r))):.4f} "
                     f"({sum(x > 1.1 for x in r)})" for key, r in ratios.items())


def compare_chains(data, rates, max_cluster=None):
    """Modelled / measured time of the chains rows whose plan the planner still makes, the
    planner taking the clusters the file's GPU runs (``max_cluster``; by default the
    file's device facts, an H200's where it recorded none)."""
    from kscupy.engine import planner
    from kscupy.bench.chains import transform_chain
    if max_cluster is not None:
        rates = dataclasses.replace(rates, max_cluster=max_cluster)
    ratios = []
    for row in data["rows"]:
        kind, dtype = row["transform"], numpy.dtype(row["dtype"])
        if kind not in ("dft", "hadamard", "butterfly"):
            continue
        n = row["n"]
        chain = transform_chain(kind, n, dtype, numpy)
        plan = planner.plan(chain.factor_chain, row["layout"], dtype, row["batch"],
                            device=rates)
        measured = row["seconds"]["auto"]
        same = plan.describe().splitlines() == row["plan"]
        note = "" if same else f"  (plan now: {plan.describe().splitlines()[0][:60]})"
        print(f"{kind:9s} {n:6d} {dtype.name:9s} {row['layout']} measured {1e3 * measured:7.3f} "
              f"ms, model {1e3 * plan.seconds:7.3f} ms, ratio {plan.seconds / measured:5.2f}{note}")
        if same:
            ratios.append(plan.seconds / measured)
    logs = numpy.log(ratios)
    print(f"{len(ratios)} rows with the measured plan: model / measured {min(ratios):.2f} .. "
          f"{max(ratios):.2f}, RMS log error {float(numpy.sqrt(numpy.mean(logs ** 2))):.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+",
                        help="an engine.json with 'rates' (the model's device rates); the rows "
                             "of further files (of the same GPU) are fitted with its rows")
    parser.add_argument("--current", action="store_true", help="replay auto only, no fit")
    parser.add_argument("--bmm", action="store_true",
                        help="fit bmm's keys to a probe_bmm.py file instead")
    parser.add_argument("--regret", action="store_true",
                        help="replay the model's picks against the backends each row timed")
    parser.add_argument("--chains", action="store_true",
                        help="compare the planner's times with a chains suite's file")
    parser.add_argument("--rates", help="take the device's facts from this engine file")
    parser.add_argument("--max-cluster", type=int, default=None,
                        help="--chains: most blocks of a cluster the file's GPU ran (default: "
                             "the file's device facts)")
    args = parser.parse_args()
    files = [json.loads(pathlib.Path(name).read_text()) for name in args.results]
    data = dict(files[0], rows=[row for f in files for row in f["rows"]])
    source = json.loads(pathlib.Path(args.rates).read_text()) if args.rates else data
    rates = devices.from_record(source["rates"])
    os.environ["KSCUPY_CACHE_DIR"] = tempfile.mkdtemp()    # the model, never a tuning cache
    if args.current:
        replay_auto(data, rates)
        return
    if args.regret:
        regret(files, args.results, rates)
        return
    if args.bmm:
        fit_bmm(data, rates)
        return
    if args.chains:
        compare_chains(data, rates, args.max_cluster)
        return
    groups = {}
    for p, row, precision in problems(data["rows"]):
        order = gpu_costs.mma_variant(p, ks_mma.heuristic_config(p), precision)
        groups.setdefault((order, p.dtype.name, precision), []).append((p, row))
    for (order, dtype, precision), cases in sorted(groups.items()):
        kernel, bmm = KERNEL[precision], BMM[precision]
        model = fit([(p, row, row["seconds"][kernel]) for p, row in cases], ("mma", order),
                    lambda p: gpu_costs.mma_kernel_seconds(p, rates, ks_mma.heuristic_config(p),
                                                           precision),
                    (2.0, 0.5, 30.0), rates)
        ranked = [(m < row["seconds"][bmm]) == (row["seconds"][kernel] < row["seconds"][bmm])
                  for m, (_, row) in zip(model, cases) if bmm in row["seconds"]]
        if ranked:
            print(f"    [{dtype}] {kernel}-vs-{bmm} ranked right {sum(ranked)}/{len(ranked)} "
                  f"(by the kernel's model against bmm's measured time)")


if __name__ == "__main__":
    main()
