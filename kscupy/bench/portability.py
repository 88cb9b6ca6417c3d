"""The portability suite: ``auto`` on the real GPU made to behave as an older one
(``KSCUPY_EMULATE_ARCH``, :func:`kscupy.core.device.emulating`), against the baselines.

    python -m kscupy bench --suite portability --archs sm_80,sm_89 --count 40 \\
        --out bench-results

Each emulated architecture applies its shared-memory and thread limits, turns clusters off
and prices every candidate with the unknown device's cost constants; what ``auto`` then
chooses runs on this GPU. Rows have the engine suite's schema (:mod:`.engine`) plus
``"emulated_arch"`` (``"sm_80"``): per pattern, layout, dtype and batch the baselines and
the oracle are computed once, and ``auto`` is timed once per architecture, each on a fresh
KS matrix whose plans were made under that architecture. Only ``auto`` and the baselines
are timed (throughput: back-to-back calls between CUDA events, every method's runs
interleaved with the others', :class:`.timing.Interleaved`), since the suite asks
whether ``auto`` stays sound with the unknown device's constants.

Emulation shows the choices and the limits of another GPU, not its speed: the clocks, the
memory bandwidth, the SM count and the schedulers stay this GPU's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import time

try:
    import cupy
except ImportError:
    cupy = None

from .. import KSMatrix
from ..arguments import choice_list, positive_int_list
from ..core import device
from ..core.problem import problem_of
from ..engine import decide
from . import engine
from .baselines import NONE
from .timing import Interleaved, progress, run_metadata

#: What the suite measures unless told otherwise (the issue's table).
DTYPES = ("float32", "float16")
BATCHES = (25088, 64)
ARCHS = tuple(f"sm_{cc}" for cc in device.EMULATED_LIMITS if cc < 90)
#: Per method and row: CUDA-event time of back-to-back calls, five runs of this many
#: seconds in all (a third of the engine suite's: every row times only auto and baselines),
#: interleaved with the other methods' runs.
BUDGET_S = 0.06


def add_arguments(parser):
    group = parser.add_argument_group(f"portability suite (also --dtypes, default "
                                      f"{','.join(DTYPES)}, --count, --layouts, "
                                      f"--dense-limit, --dense-flops, --append)")
    group.add_argument("--archs", type=choice_list(ARCHS), default="sm_80,sm_89",
                       help=f"comma-separated emulated architectures, of {','.join(ARCHS)}")
    group.add_argument("--batches", type=positive_int_list,
                       default=",".join(map(str, BATCHES)), help="comma-separated batch sizes")


@contextlib.contextmanager
def emulated(arch):
    """Within the block, kscupy treats the current GPU as one of ``arch`` (``"sm_80"``):
    sets ``KSCUPY_EMULATE_ARCH``, which every call reads (not thread-safe: the suite runs in
    one thread)."""
    before = os.environ.get(device.EMULATE_ARCH)
    os.environ[device.EMULATE_ARCH] = arch
    try:
        yield
    finally:
        if before is None:
            del os.environ[device.EMULATE_ARCH]
        else:
            os.environ[device.EMULATE_ARCH] = before


#: The rows' timer: the baselines and ``auto`` under every architecture timed together,
#: their runs interleaved.
TIMER = Interleaved(budget_s=BUDGET_S)


def rows_of_case(pattern, layout, dtype, B, archs, args, ceilings, baselines=NONE):
    """One row per architecture of ``archs`` for one pattern, layout, dtype and batch: the
    baselines' times and errors shared, ``auto``'s measured under each architecture, all
    timed together (``auto`` under ``sm_80`` is the method ``auto@sm_80``, run within
    :func:`emulated`)."""
    K, inputs = engine.operands(pattern, layout, dtype, B)
    ref = engine.oracle(K, inputs[0], layout)
    methods = engine.baseline_methods(K, layout, "default", B, args, baselines)
    matrices, contexts = {}, {}
    for arch in archs:
        with emulated(arch):
            Ka = matrices[arch] = KSMatrix(K.values)      # its plans are made under this arch
        name = f"auto@{arch}"
        methods[name] = (lambda Ka: lambda x: Ka.matmul(x, layout=layout, backend="auto"))(Ka)
        contexts[name] = functools.partial(emulated, arch)
    measured = {"seconds": {}, "relerr": {}}
    engine.time_methods(measured, methods, inputs, ref, layout, TIMER, contexts)
    # a second timing of everything where auto misses under any architecture
    worst = min(archs, key=lambda arch: engine.lead_ratio(measured, f"auto@{arch}"))
    engine.retime_misses(measured, methods, inputs, TIMER, f"auto@{worst}", contexts)
    rows = []
    for arch, Ka in matrices.items():
        row = {"suite": "patterns", "sample": "default", "pattern": list(pattern),
               "layout": layout, "dtype": dtype, "precision": "default", "batch": B,
               "emulated_arch": arch,
               "floor_s": engine.floor_seconds(pattern, B, dtype, "default", ceilings)}
        for field, times in measured.items():
            row[field] = {("auto" if name == f"auto@{arch}" else name): t
                          for name, t in times.items()
                          if not name.startswith("auto@") or name == f"auto@{arch}"}
        with emulated(arch):
            row["auto_choice"] = decide.choose(problem_of(Ka.factor, inputs[0], layout)).backend
        Ka.clear_cache()
        rows.append(row)
    del inputs
    engine.release(K, baselines)
    return rows


def check_arguments(args, out):
    """``--dtypes`` left out becomes :data:`DTYPES`; UsageError where ``--append`` names a
    file ``out`` that no engine-schema run wrote (:func:`.engine.check_append`)."""
    if args.dtypes is None:
        args.dtypes = list(DTYPES)
    engine.check_append(args, out)


def main(args, baselines=NONE):
    """Run the suite into ``args.out`` (rewritten after each case, so a run cut short keeps
    its rows; ``--append`` goes on where a file stops, with its ceilings)."""
    out = pathlib.Path(args.out)
    result = json.loads(out.read_text()) if args.append and out.exists() else None
    t0 = time.time()
    ceilings = result["ceilings"] if result else engine.measure_ceilings(baselines)
    meta = run_metadata()
    if result is None:
        result = {"device": meta["gpu"], "commit": meta["commit"], "date": meta["date"],
                  "command": meta["command"], "cupy": meta["cupy"], "kscupy": meta["kscupy"],
                  baselines.name or "baselines": baselines.version, "timing": "events",
                  "budget_s": BUDGET_S, "ceilings": ceilings,
                  "rates": dataclasses.asdict(device.current()),
                  "emulated_rates": {arch: _rates(arch) for arch in args.archs}, "rows": []}
    else:
        result.setdefault("commands", []).append(meta["command"])
    patterns = engine.samples(["default"], args.count, 0)["default"]
    cases = [(p, lay, dt, B) for dt in args.dtypes for B in args.batches
             for p in patterns for lay in args.layouts]
    done = {(tuple(r["pattern"]), r["layout"], r["dtype"], r["batch"]) for r in result["rows"]
            if r.get("emulated_arch") in args.archs}
    for case in progress([c for c in cases if c not in done], desc="portability"):
        result["rows"] += rows_of_case(*case, args.archs, args, ceilings, baselines)
        out.write_text(json.dumps(result))
    engine.finish(result, out, time.time() - t0)


def _rates(arch):
    """The device facts kscupy uses under ``arch`` (recorded in the file)."""
    with emulated(arch):
        return dataclasses.asdict(device.current())
