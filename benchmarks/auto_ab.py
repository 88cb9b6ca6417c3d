"""Did a change slow ``auto`` down? The throughput of ``K @ X`` (``backend="auto"``) under
two source trees of kscupy on one GPU, in alternating processes (before, after, before,
after), each case keeping its faster time per tree.

    PYTHONPATH=$PWD python3 benchmarks/auto_ab.py --before /tmp/old --after . \\
        --out ab.json

The cases are the engine suite's stratified sample of the paper's grid (``--count``), in
``--dtypes``, both layouts and at ``--batches``. Only public API runs in the trees
(``KSMatrix.random``, ``K.matmul``), so any two versions compare; the timer lives here for
the same reason: an older tree may lack :func:`kscupy.bench.timing.throughput_seconds`,
whose method it repeats (CUDA events around back-to-back calls, median of three runs).
Processes differ by a few per cent on their own; the summary's median over cases of
after / before is the figure to read.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def _worker(tree, cases_file):
    """Time each case with the kscupy of ``tree``; print ``{case_key: seconds}`` as JSON."""
    sys.path.insert(0, str(pathlib.Path(tree).resolve()))
    os.environ["KSCUPY_BACKGROUND_COMPILE"] = "0"    # time the kernel auto chose
    import cupy
    import numpy
    import kscupy as ks

    def throughput(fn, inputs, budget_s=0.06, rounds=3):
        def run(count):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            for k in range(count):
                fn(inputs[k % len(inputs)])
            end.record()
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end) * 1e-3 / count
        run(3)
        count = int(min(1000, max(len(inputs), budget_s / rounds / max(run(len(inputs)), 1e-7))))
        return float(numpy.median([run(count) for _ in range(rounds)]))

    out = {}
    for pattern, layout, dtype, B in json.loads(pathlib.Path(cases_file).read_text()):
        K = ks.KSMatrix.random(tuple(pattern), dtype=dtype, xp=cupy, seed=0)
        N = K.shape[1]
        rng = cupy.random.default_rng(1)
        shape = (N, B) if layout == "bsl" else (B, N)
        inputs = [rng.standard_normal(shape, dtype=numpy.float32).astype(dtype)
                  for _ in range(2)]
        out[_key(pattern, layout, dtype, B)] = throughput(
            lambda x: K.matmul(x, layout=layout, backend="auto"), inputs)
        del inputs, K
        cupy.get_default_memory_pool().free_all_blocks()
    print("RESULT " + json.dumps(out))


def _key(pattern, layout, dtype, B):
    return f"{','.join(map(str, pattern))}|{layout}|{dtype}|{B}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="source tree of the code before")
    p.add_argument("--after", default=str(HERE.parent), help="source tree of the code after")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--batches", default="25088,64")
    p.add_argument("--rounds", type=int, default=2, help="processes per tree")
    p.add_argument("--out", required=True)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--cases", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _worker(args.worker, args.cases)
    sys.path.insert(0, str(HERE.parent))
    from kscupy.bench.engine import samples
    from kscupy.bench.timing import run_metadata
    patterns = samples(["default"], args.count, 0)["default"]
    cases = [(list(p), lay, dt, int(B)) for dt in args.dtypes.split(",")
             for B in args.batches.split(",") for p in patterns for lay in ("bsl", "bsf")]
    out = pathlib.Path(args.out)
    cases_file = out.with_suffix(".cases.json")
    cases_file.write_text(json.dumps(cases))
    times = {"before": {}, "after": {}}
    for _ in range(args.rounds):
        for side in ("before", "after"):
            run = subprocess.run([sys.executable, __file__, "--worker", getattr(args, side),
                                  "--before", args.before,
                                  "--cases", str(cases_file), "--out", args.out],
                                 capture_output=True, text=True, check=True)
            line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")][-1]
            for key, seconds in json.loads(line[len("RESULT "):]).items():
                times[side][key] = min(seconds, times[side].get(key, float("inf")))
    ratios = {key: times["after"][key] / times["before"][key] for key in times["before"]}
    groups = {}
    for key, r in ratios.items():
        _, layout, dtype, B = key.split("|")
        groups.setdefault(f"{dtype}|{layout}|B={B}", []).append(r)
    import numpy
    meta = run_metadata()
    result = {"what": "throughput of auto, after / before, same GPU, alternating processes",
              "device": meta["gpu"], "date": meta["date"], "command": meta["command"],
              "commit": meta["commit"], "before": args.before, "after": args.after,
              "rounds": args.rounds,
              "summary": {"median_after_over_before": float(numpy.median(list(ratios.values()))),
                          **{g: {"median": float(numpy.median(v)), "max": float(max(v)),
                                 "min": float(min(v)), "cases": len(v)}
                             for g, v in sorted(groups.items())}},
              "seconds": times}
    out.write_text(json.dumps(result, indent=1))
    cases_file.unlink()
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
