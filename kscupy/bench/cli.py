"""``python -m kscupy bench``: run the benchmark suites (:mod:`kscupy.bench`) or plot their
results.

Each suite writes ``<suite>.json`` into ``--out`` (a folder), with the GPU, date, command
and versions recorded inside; ``--plot FILE...`` draws plots of existing results (no GPU
needed).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

from ..core import arrays
from . import baselines as baselines_module

__all__ = ["main", "parser", "SUITES"]

SUITES = ("grid", "sweep", "engine", "chains")
#: What ``--suite all`` runs (with ``--quick``, grid and chains), and the small sample
#: ``--quick`` takes of each.
ALL = ("grid", "sweep", "chains")
QUICK = {"count": 4, "sizes": [256, 1024], "elements": 2**22, "hadamard": [1024],
         "parts": "dft,hadamard", "butterfly": [256], "monarch": [1024]}


def parser() -> argparse.ArgumentParser:
    from . import chains, engine, patterns
    p = argparse.ArgumentParser(
        prog="python -m kscupy bench",
        description="Run kscupy's benchmark suites on the GPU (medians of the CUDA-event "
                    "time of single calls after warm-up, against the baselines timed in the "
                    "same run), or plot their results. Needs CuPy and a CUDA device, but for "
                    "--plot.")
    p.add_argument("--suite", default="all", choices=SUITES + ("all",),
                   help="all: grid, sweep and chains, then their plots (default)")
    p.add_argument("--quick", action="store_true",
                   help="a few patterns and sizes of each suite (minutes)")
    p.add_argument("--out", default="bench-results",
                   help="folder for the JSON results and plots (default: bench-results)")
    p.add_argument("--plot", nargs="+", metavar="FILE",
                   help="plot these result files into --out instead of running anything")
    patterns.add_arguments(p)
    engine.add_arguments(p)
    chains.add_arguments(p)
    return p


def _kind(result) -> str:
    rows = result.get("rows") or []
    if rows and "transform" in rows[0]:
        return "chains"
    if rows and "precision" in rows[0]:
        return "engine"
    return "grid"


def plot(paths, out):
    """Plot result files (their suite read from their rows) into the folder ``out``."""
    from . import plots
    out = pathlib.Path(out)
    kinds = {}
    for path in paths:
        kinds.setdefault(_kind(json.loads(pathlib.Path(path).read_text())), []).append(path)
    for path in kinds.get("chains", []):
        plots.plot_chains(path, out)
    if "engine" in kinds:
        plots.plot_engine(kinds["engine"], out / "engine_speedups.png")
    grids = [p for p in kinds.get("grid", [])
             if json.loads(pathlib.Path(p).read_text()).get("rows")]
    sweeps = [p for p in kinds.get("grid", [])
              if json.loads(pathlib.Path(p).read_text()).get("batch_sweep")]
    if grids or sweeps:
        plots.plot_grid(grids, out, sweep=sweeps[0] if sweeps else None)


def main(argv=None, baselines=baselines_module.NONE) -> int:
    """Run the suites the arguments ask for (``baselines``: those beyond CuPy's a caller
    adds, :class:`kscupy.bench.baselines.Baselines`)."""
    args = parser().parse_args(argv)
    out = pathlib.Path(args.out)
    if args.plot:
        plot(args.plot, out)
        print(f"plots in {out}")
        return 0
    cupy, why = arrays.gpu_module()
    if cupy is None:
        print(f"python -m kscupy bench times GPU kernels and needs a GPU: {why}. "
              f"(python -m kscupy demo --cpu runs on the CPU.)", file=sys.stderr)
        return 2
    from . import chains, engine, patterns
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    out.mkdir(parents=True, exist_ok=True)
    suites = ((ALL if not args.quick else ("grid", "chains")) if args.suite == "all"
              else (args.suite,))
    if baselines.name is None:
        print("baselines: CuPy's BMM, cuBLAS dense and cuFFT (the repository's "
              "benchmarks/bench_suite.py adds PyTorch's BMM)", flush=True)
    written = []
    if "grid" in suites or "sweep" in suites:
        parts = tuple(s for s in ("grid", "sweep") if s in suites)
        args.out = str(out / ("patterns.json" if len(parts) == 2 else f"{parts[0]}.json"))
        patterns.main(args, parts)
        written.append(args.out)
    if "engine" in suites:
        args.out = str(out / "engine.json")
        engine.main(args, baselines)
        written.append(args.out)
    if "chains" in suites:
        args.out = str(out / "chains.json")
        chains.main(args, baselines)
        written.append(args.out)
    try:
        plot(written, out)
    except ImportError:
        print("(no plots: matplotlib is not installed; pip install kscupy[bench])")
    print(f"\nresults and plots in {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0
