"""``python -m kscupy bench``: run the benchmark suites (:mod:`kscupy.bench`) or plot their
results.

Each suite writes ``<suite>.json`` into ``--out`` (a folder), with the GPU, date, command
and versions recorded inside; ``--plot FILE...`` draws plots of existing results (no GPU
needed).
"""
from __future__ import annotations

import argparse
import pathlib
import sys

from ..arguments import UsageError, out_of_memory
from ..core import arrays
from . import baselines as baselines_module
from .results import read_results

__all__ = ["main", "parser", "SUITES"]

SUITES = ("grid", "sweep", "engine", "parity", "portability", "chains", "scale", "gradients",
          "interop")
#: What ``--suite all`` runs (with ``--quick``, grid and chains), and the small sample
#: ``--quick`` takes of each (values as their options' types give them).
ALL = ("grid", "sweep", "chains")
QUICK = {"count": 4, "sizes": [256, 1024], "elements": 2**22, "hadamard": [1024],
         "parts": ["dft", "hadamard"], "butterfly": [256], "monarch": [1024],
         "fit_steps": 20, "host_gb": 1.0, "pageable_gb": 0.5, "streams": [2]}


def parser() -> argparse.ArgumentParser:
    from . import chains, engine, gradients, interop, patterns, portability, scale
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
                   help="plot these result files (JSON objects with the rows a suite "
                        "measured) into --out instead of running anything; needs matplotlib")
    patterns.add_arguments(p)
    engine.add_arguments(p)
    portability.add_arguments(p)
    chains.add_arguments(p)
    scale.add_arguments(p)
    gradients.add_arguments(p)
    interop.add_arguments(p)
    return p


def _kind(result) -> str:
    rows = result.get("rows") or []
    if rows and "transform" in rows[0]:
        return "chains"
    if rows and "precision" in rows[0]:
        return "engine"
    return "grid"


def plot(paths, out):
    """Plot result files (their suite read from their rows) into the folder ``out``;
    UsageError, before anything is drawn, for a file that holds no results
    (:func:`.results.read_results`) or a folder ``out`` that cannot be made."""
    from . import plots
    out = pathlib.Path(out)
    results = {path: read_results(path) for path in paths}
    _make_folder(out)
    kinds = {}
    for path, result in results.items():
        kinds.setdefault(_kind(result), []).append(path)
    for path in kinds.get("chains", []):
        plots.plot_chains(path, out)
    if "engine" in kinds:
        plots.plot_engine(kinds["engine"], out / "engine_speedups.png")
    grids = [p for p in kinds.get("grid", []) if results[p].get("rows")]
    sweeps = [p for p in kinds.get("grid", []) if results[p].get("batch_sweep")]
    if grids or sweeps:
        plots.plot_grid(grids, out, sweep=sweeps[0] if sweeps else None)


def _make_folder(out):
    """Make the folder ``--out`` names; UsageError where it cannot be (a file there, no
    permission)."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot make this folder ({exc.strerror or exc})") from None


def _plot_files(paths, out):
    """``--plot``: the plots of the files ``paths`` into the folder ``out``."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot draws with matplotlib, which is not installed "
                         "(pip install kscupy[bench])") from None
    try:
        plot(paths, out)
    except KeyError as exc:     # a JSON object with rows that no suite wrote
        raise UsageError(f"--plot {' '.join(paths)}: not the results of a kscupy bench suite "
                         f"(they lack the field {exc} that its plots read)") from None
    print(f"plots in {out}")
    return 0


def _suites(args):
    """The suites the arguments run, in order."""
    if args.suite != "all":
        return (args.suite,)
    return ("grid", "chains") if args.quick else ALL


def _check(args, suites, out):
    """UsageError where the arguments ask a suite of ``suites`` for what it cannot run."""
    from . import engine, parity, patterns, portability
    patterns.check_arguments(args, suites)
    if "engine" in suites:
        engine.check_arguments(args, out / "engine.json")
    if "parity" in suites:
        parity.check_arguments(args, out / "parity.json")
    if "portability" in suites:
        portability.check_arguments(args, out / "portability.json")


def _run(args, baselines):
    """Parsed arguments to an exit status (UsageError for a request that cannot run)."""
    out = pathlib.Path(args.out)
    if args.plot:
        return _plot_files(args.plot, out)
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    suites = _suites(args)
    _check(args, suites, out)
    cupy, why = arrays.gpu_module()
    if cupy is None:
        print(f"python -m kscupy bench times GPU kernels and needs a GPU: {why}. "
              f"(python -m kscupy demo --cpu runs on the CPU.)", file=sys.stderr)
        return 2
    from . import chains, engine, gradients, interop, parity, patterns, portability, scale
    _make_folder(out)
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
    if "parity" in suites:
        args.out = str(out / "parity.json")
        parity.main(args, baselines)
        written.append(args.out)
    if "portability" in suites:
        args.out = str(out / "portability.json")
        portability.main(args, baselines)
        written.append(args.out)
    if "chains" in suites:
        args.out = str(out / "chains.json")
        chains.main(args, baselines)
        written.append(args.out)
    if "scale" in suites:        # no plot: a table of a few rows
        args.out = str(out / "scale.json")
        scale.main(args, baselines)
    if "gradients" in suites:    # its own summary; not plotted yet
        args.out = str(out / "gradients.json")
        gradients.main(args, baselines)
    if "interop" in suites:      # its own summary; not plotted yet
        args.out = str(out / "interop.json")
        interop.main(args, baselines)
    try:
        if written:
            plot(written, out)
    except ImportError:
        print("(no plots: matplotlib is not installed; pip install kscupy[bench])")
    print(f"\nresults and plots in {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def main(argv=None, baselines=baselines_module.NONE) -> int:
    """Run the suites the arguments ask for (``baselines``: those beyond CuPy's a caller
    adds, :class:`kscupy.bench.baselines.Baselines`), or plot results; a request that cannot
    run exits with argparse's usage line and status 2, before anything runs."""
    p = parser()
    args = p.parse_args(argv)
    try:
        return _run(args, baselines)
    except UsageError as exc:
        p.error(str(exc))
    except MemoryError as exc:      # past the checks made up front: a run that failed
        return out_of_memory(p.prog, exc)
