"""Timing shared by the benchmark suites: CUDA-event medians, the ceilings measured in the
same run, the run's metadata, progress bars.

Importing this module makes every product of the process wait for its kernel: the
benchmarks time the kernels ``auto`` chooses, not the direct kernel it runs while one
compiles in the background (:mod:`kscupy.engine.execute`).
"""
from __future__ import annotations

import contextlib
import datetime
import os
import pathlib
import subprocess
import sys
import time

import numpy

try:
    import cupy
    from cupyx.profiler import benchmark
except ImportError:     # the suites parse --help without CuPy
    cupy = benchmark = None

from .. import __version__
from ..kernels import nvrtc

nvrtc.BACKGROUND = False


def progress(iterable, **kwargs):
    """``tqdm(iterable, **kwargs)`` where tqdm is installed, else the iterable itself."""
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, **kwargs)


def l2_bytes():
    return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["l2CacheSize"]


def time_fn(fn, inputs, budget_s=0.15, max_repeat=50):
    """Median seconds of fn(x) over CUDA events, cycling through ``inputs``."""
    state = {"i": 0}

    def step():
        state["i"] = (state["i"] + 1) % len(inputs)
        return fn(inputs[state["i"]])

    first = benchmark(step, n_repeat=2, n_warmup=2).gpu_times.max()
    repeat = int(min(max_repeat, max(3, budget_s / max(first, 1e-6))))
    return float(numpy.median(benchmark(step, n_repeat=repeat, n_warmup=1).gpu_times))


def throughput_seconds(fn, inputs, budget_s=0.15, max_calls=1000, rounds=3):
    """Seconds per call of ``fn(x)`` run back to back, cycling through ``inputs``: CUDA events
    recorded around a whole run of calls after warm-up, the median of ``rounds`` runs. What
    a pipeline that launches products one after another sees; host time between launches
    counts where it leaves the GPU idle. :func:`time_fn` times each call on its own
    (latency); :class:`Interleaved` times several functions this way, their runs
    interleaved."""
    return interleaved_seconds({"fn": fn}, inputs, budget_s, max_calls, rounds)["fn"]


def interleaved_seconds(methods, inputs, budget_s=0.15, max_calls=1000, rounds=5,
                        contexts=None):
    """``{name: seconds per call}`` of each function of ``methods`` (``{name: fn}``), timed as
    :func:`throughput_seconds` times one, their runs interleaved: round ``r`` runs every
    function once, in an order rotated by ``r``, and each keeps the median of its rounds.

    A GPU's clocks and power state drift over the tenths of a second a row takes, moving one
    cuBLAS GEMM's time by a tenth or more from one run to the next: timed one after another,
    two functions doing the same work could read that far apart. Interleaved, a drift falls
    on every function alike, and no function always runs first. ``contexts``: ``{name:
    factory}``, a context manager the named function's calls run in (entered outside its
    timed span)."""
    contexts = contexts or {}
    calls = len(inputs)

    def run(fn, count):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for k in range(count):
            fn(inputs[k % calls])
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) * 1e-3 / count

    names = list(methods)
    counts = {}
    for name in names:
        with contexts.get(name, contextlib.nullcontext)():
            run(methods[name], max(3, calls))                     # warm-up
            once = run(methods[name], calls)
        counts[name] = int(min(max_calls, max(calls, budget_s / rounds / max(once, 1e-7))))
    times = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            with contexts.get(name, contextlib.nullcontext)():
                times[name].append(run(methods[name], counts[name]))
    return {name: float(numpy.median(ts)) for name, ts in times.items()}


def host_seconds(fn, calls=300, loops=1, warmup=None):
    """The host's seconds per call of ``fn`` called back to back: the median over ``loops``
    loops of ``calls`` calls (each loop's ``perf_counter`` time over ``calls``, no
    synchronisation inside, the GPU drained between loops, off the clock), after ``warmup``
    untimed calls (default ``calls``: compiles, plans, memoized choices). Where the GPU's
    time per call is the longer, the loop waits on it once the launch queue fills: the figure
    is the host's own only where it is below the CUDA-event throughput
    (:func:`throughput_seconds`)."""
    for _ in range(calls if warmup is None else warmup):
        fn()
    cupy.cuda.Device().synchronize()
    per_call = []
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls)
        cupy.cuda.Device().synchronize()
    return float(numpy.median(per_call))


class Interleaved:
    """A timer of the suites' rows (:func:`kscupy.bench.engine.time_methods`): called as
    ``timer(fn, inputs)`` it times one function, ``{"seconds": ...}`` by
    :func:`throughput_seconds`; ``timer.together(methods, inputs, contexts)`` times several
    at once, ``{"seconds": {name: ...}}`` by :func:`interleaved_seconds`, each with
    ``budget_s`` seconds of calls in ``rounds`` runs."""

    def __init__(self, budget_s=0.15, rounds=5):
        self.budget_s, self.rounds = budget_s, rounds

    def __call__(self, fn, inputs):
        return {"seconds": self.together({"fn": fn}, inputs)["seconds"]["fn"]}

    def together(self, methods, inputs, contexts=None):
        return {"seconds": interleaved_seconds(methods, inputs, self.budget_s,
                                               rounds=self.rounds, contexts=contexts)}


def measure_ceilings():
    """Copy bandwidth (bytes read + written per second) and cuBLAS SGEMM rate, measured here."""
    n = 1 << 28                                           # 1 GiB of float32
    src = cupy.random.default_rng(0).standard_normal(n, dtype=numpy.float32)
    dst = cupy.empty_like(src)
    t = time_fn(lambda s: dst.__setitem__(slice(None), s), [src], max_repeat=30)
    bandwidth = 2 * src.nbytes / t
    m = 8192
    A = cupy.random.default_rng(1).standard_normal((m, m), dtype=numpy.float32)
    Bm = cupy.random.default_rng(2).standard_normal((m, m), dtype=numpy.float32)
    t = time_fn(lambda x: A @ x, [Bm], max_repeat=20)
    return {"copy_bandwidth_Bps": bandwidth, "sgemm_flops": 2 * m**3 / t}


def source_commit() -> str:
    """The source checkout's commit, ``BENCH_COMMIT`` where the checkout's own HEAD is not it
    (a copy of a working tree whose .git is older than its files), or "unknown" (an
    installed package)."""
    commit = os.environ.get("BENCH_COMMIT")
    if commit:
        return commit
    root = pathlib.Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return "unknown"
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def run_metadata() -> dict:
    """GPU, CUDA runtime, CuPy and kscupy versions, commit, date and command of this run."""
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return {
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "cupy": cupy.__version__,
        "kscupy": __version__, "commit": source_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "command": " ".join([sys.executable.split("/")[-1]] + sys.argv),
    }
