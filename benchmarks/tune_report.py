"""Calibrate the launch heuristic and the cost model of ``auto`` against measurements.

    PYTHONPATH=$PWD python3 benchmarks/tune_report.py [--batch 25088] [--out report.json]

For each pattern and layout (FP32): times every candidate kernel configuration, CuPy BMM and
cuBLAS dense (kscupy.tune, with a throw-away cache), and prints the heuristic
configuration's time, the best candidate, the baselines, the cost model's estimates and
what ``auto`` would choose. A developer's tool: it writes nothing into the user's cache.
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["KSCUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="kscupy-tune-report-")

import numpy  # noqa: E402

import dataclasses  # noqa: E402

from kscupy import KSPattern  # noqa: E402
from kscupy.core import device  # noqa: E402
from kscupy.core.problem import Problem  # noqa: E402
from kscupy.engine import decide, tune, tuning_cache  # noqa: E402
from kscupy.kernels.ks_matmul import heuristic_config  # noqa: E402

PATTERNS = [(1, 1024, 1024, 1), (1, 256, 256, 4), (16, 64, 64, 4), (1, 48, 48, 64),
            (64, 2, 2, 64), (1, 768, 192, 2), (6, 64, 64, 1), (1, 192, 768, 8),
            (4, 128, 128, 16), (1, 96, 384, 32), (2, 512, 512, 4), (128, 48, 192, 4)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=25088)
    parser.add_argument("--out")
    args = parser.parse_args()
    rates = device.current()
    rows = []
    print(f"{'pattern':20s} lay {'heur ms':>8s} {'best ms':>8s} {'bmm':>7s} {'dense':>7s} | "
          f"model kernel/bmm/dense ms -> auto | best config")
    for pattern in PATTERNS:
        for layout in ("bsl", "bsf"):
            problem = Problem(KSPattern(*pattern), args.batch, numpy.dtype("float32"),
                                     layout, layout == "bsl", False)
            tune(problem, progress=False, n_repeat=10)
            seconds = tuning_cache.timings(problem, rates)
            kernels = {k: v for k, v in seconds.items() if k.startswith("kernel")}
            best = min(kernels, key=kernels.get)
            heur = f"kernel{heuristic_config(problem).as_tuple()}"
            model = {be: decide.seconds(problem, be, rates) for be in ("kernel", "bmm", "dense")}
            rows.append({"pattern": pattern, "layout": layout, "seconds": seconds,
                         "heuristic": heur, "model": model})
            ms = lambda k: 1e3 * seconds.get(k, float("nan"))  # noqa: E731
            print(f"{str(pattern):20s} {layout} {ms(heur):8.3f} {ms(best):8.3f} {ms('bmm'):7.3f} "
                  f"{ms('dense'):7.3f} | {1e3*model['kernel']:.3f}/{1e3*model['bmm']:.3f}/"
                  f"{1e3*model['dense']:.3f} -> {min(model, key=model.get)} | {best[6:]}", flush=True)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"rates": dataclasses.asdict(rates), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
