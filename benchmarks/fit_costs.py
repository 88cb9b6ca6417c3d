"""Fit the tensor-core kernel's cost-model constants to an engine benchmark.

    python3 benchmarks/fit_costs.py benchmarks/results/engine.json

For each model key of the tensor-core kernel (its copy order, batch, in-group or group, with
``_dmma`` on the FP64 tensor cores, ``_hmma`` for float16, ``_complex`` for complex64:
``kscupy.costs.mma_variant``) and dtype, fits ``(bytes_factor, efficiency, m0)`` of
``kscupy.costs``' single-factor model to the measured ``kernel`` seconds of the default
precision rows (least squares on log time), and prints them with the RMS log error and how
often the model, with the fitted constants, ranks the kernel against the measured ``bmm``
correctly. Paste the constants into ``costs._SINGLE``. Then prints, per layout, what
``auto`` would reach on the file's measured times if it chose with the current constants
(``--current``: without refitting). Runs on the CPU (the device's rates are read from the
file; no tuning cache is read).
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

import kscupy as ks  # noqa: E402
from kscupy import costs  # noqa: E402
from kscupy.kernels import ks_mma  # noqa: E402
from kscupy.problem import Problem  # noqa: E402

def problems(rows):
    for row in rows:
        if row.get("precision", "default") != "default" or "kernel" not in row["seconds"]:
            continue
        p = Problem(ks.KSPattern(*row["pattern"]), row["batch"], numpy.dtype(row["dtype"]),
                    row["layout"], row["layout"] == "bsl", False)
        yield p, row


def replay_auto(data, rates):
    """Per dtype, layout and sample: median and minimum of best baseline / the measured time of the backend
    the model picks, and the rows below 0.95."""
    from kscupy import tuning
    out = {}
    for p, row in problems(data["rows"]):
        s = row["seconds"]
        pick = tuning._choose(p, rates).backend
        if pick not in s:
            continue
        best = min(v for k, v in s.items() if k.startswith("base_"))
        sample = "" if row.get("sample", "default") == "default" else f' {row["sample"]}'
        out.setdefault(f'{p.dtype.name} {row["layout"]}{sample}', []).append(
            (best / s[pick], row["pattern"], pick))
    for layout, values in sorted(out.items()):
        ratios = numpy.array([v[0] for v in values])
        low = [f"{tuple(pat)} {pick} {r:.2f}" for r, pat, pick in sorted(values) if r < 0.95]
        print(f"auto replayed, {layout}: median {numpy.median(ratios):.2f}, min {ratios.min():.2f}; "
              f"below 0.95: {'; '.join(low) or 'none'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="an engine.json with 'rates' (the model's device rates)")
    parser.add_argument("--current", action="store_true", help="replay auto only, no fit")
    args = parser.parse_args()
    data = json.loads(pathlib.Path(args.results).read_text())
    rates = costs.DeviceRates(**data["rates"])
    os.environ["KSCUPY_CACHE_DIR"] = tempfile.mkdtemp()    # the model, never a tuning cache
    if args.current:
        replay_auto(data, rates)
        return
    groups = {}
    for p, row in problems(data["rows"]):
        order = costs.mma_variant(p, ks_mma.heuristic_config(p))
        groups.setdefault((order, p.dtype.name), []).append((p, row))
    for (order, dtype), cases in sorted(groups.items()):
        measured = numpy.log([row["seconds"]["kernel"] for _, row in cases])

        def predicted(theta):
            factor, efficiency, m0 = theta
            out = []
            for p, _ in cases:
                costs._SINGLE[("mma", order)] = (factor, efficiency, m0)
                out.append(costs.mma_kernel_seconds(p, rates, ks_mma.heuristic_config(p)))
            return numpy.log(out)

        fit = least_squares(lambda t: predicted(t) - measured, x0=(2.0, 0.5, 30.0),
                            bounds=((0.5, 0.02, 0.0), (10.0, 3.0, 2000.0)))
        rms = float(numpy.sqrt(numpy.mean(fit.fun ** 2)))
        model = numpy.exp(predicted(fit.x))
        right = sum((m < row["seconds"]["bmm"]) == (row["seconds"]["kernel"] < row["seconds"]["bmm"])
                    for m, (_, row) in zip(model, cases) if "bmm" in row["seconds"])
        print(f'("mma", "{order}") [{dtype}, {len(cases)} rows]: '
              f'({fit.x[0]:.3f}, {fit.x[1]:.3f}, {fit.x[2]:.1f})  RMS log error {rms:.2f}, '
              f'kernel-vs-bmm ranked right {right}/{len(cases)}')


if __name__ == "__main__":
    main()
