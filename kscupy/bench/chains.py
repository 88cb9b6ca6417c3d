"""The chains suite: KS chains (transforms, butterflies, Monarch, the paper's two-factor
layers) against what a user would run instead, in one run.

    python -m kscupy bench --suite chains --out chains.json

Rows (``{"suite": "transforms", "transform": ..., "seconds": {...}, "relerr": {...}}``):

* ``dft``: ``kscupy.dft(n)``, complex64, batch-size-first rows, ``--elements`` = B·n values;
  ``auto`` (the planned chain), ``base_cufft`` (``cupy.fft.fft`` along rows),
  ``base_bmm_chain`` (the radix-2 chain factor by factor with ``bmm``: cuBLAS on the groups
  in place, two transposes a factor where d > 1).
* ``butterfly``: random square dyadic chains (``kscupy.butterfly``), float32 and complex64,
  both layouts, ``--elements`` values; ``auto`` and ``base_per_factor``.
* ``hadamard``: float32, both layouts; ``auto`` and ``base_per_factor``.
* ``monarch``: two factors with sqrt(n) blocks, float32, B = ``--batch``; ``auto``,
  ``base_per_factor``, ``base_dense``, and the BMM of the baselines a caller adds
  (``base_torch_bmm``, per factor, :mod:`.baselines`).
* ``paper_chain``: the paper's two-factor chains, float32, B = ``--batch``, both layouts;
  same methods as ``monarch``.

``base_per_factor`` is the chain applied one factor at a time with the fastest single-factor
method for each factor (each backend prepared once and timed on the intermediate that factor
receives, the fastest of three medians of its winner), plus its permutation passes; an added
BMM baseline likewise keeps the fastest of three medians a factor. A row whose
``auto`` reads below 0.95 of its best baseline is timed again, ``auto`` and the other
baselines alike, each keeping its faster time (:func:`.engine.retime_misses`; the first
times in ``first_seconds``). ``floor_s`` is the bytes of X, Y and the weights over the measured
copy bandwidth (X read and Y written once). Every timed result is checked against an
independent reference (cuFFT in complex128, or the dense product in float64) on a few rows.
Writes JSON and prints a summary table.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import numpy

try:
    import cupy
except ImportError:     # --help works without CuPy; main() says what is missing
    cupy = None

from .. import KSChain, KSMatrix, butterfly, dft, hadamard, monarch
from ..transforms.factories import radix_factors
from ..transforms.fourier import prime_factors
from ..core import device
from ..engine import single
from .baselines import NONE
from ..arguments import checked, choice_list, listed, positive_int, positive_int_list, \
    power_of_two_list
from .engine import median_gpu_seconds, retime_misses
from .timing import measure_ceilings, run_metadata, time_fn

PAPER_CHAINS = (((1, 192, 48, 2), (2, 48, 192, 1)), ((1, 768, 192, 2), (6, 64, 64, 1)),
                ((1, 128, 128, 3), (6, 64, 256, 1)), ((1, 64, 256, 16), (64, 64, 64, 1)),
                ((2, 48, 192, 1), (1, 192, 48, 2)))
PER_FACTOR_BACKENDS = ("kernel", "bmm", "dense")
#: The parts of the suite, in the order a run takes them (``--parts``).
PARTS = ("dft", "butterfly", "hadamard", "monarch", "paper_chain")
CHECK_ROWS = 64


def _random(shape, dtype, seed):
    rng = cupy.random.default_rng(seed)
    real = rng.standard_normal(shape, dtype=numpy.float32)
    if numpy.dtype(dtype).kind == "c":
        real = real + 1j * rng.standard_normal(shape, dtype=numpy.float32)
    return real.astype(dtype)


def _check_slice(Y, layout):
    """The first CHECK_ROWS batch rows of a result, as (rows, features)."""
    return Y[:, :CHECK_ROWS].T if layout == "bsl" else Y[:CHECK_ROWS]


def _rel(got, ref):
    return float(cupy.linalg.norm(got.astype(ref.dtype) - ref) / cupy.linalg.norm(ref))


def _dense_reference(chain, X, layout):
    """float64 (complex128) product of the chain's dense matrix with CHECK_ROWS rows."""
    wide = numpy.complex128 if chain.dtype.kind == "c" else numpy.float64
    D = chain.todense().astype(wide)
    return _check_slice(X, layout).astype(wide) @ D.T


def fastest_median(run, X, count):
    """The fastest of ``count`` medians of ``run(X)`` (a factor of a per-factor baseline)."""
    return min(time_fn(run, [X], max_repeat=20) for _ in range(count))


def per_factor(chain, X, layout):
    """``(seconds, detail)``: the chain one factor at a time, each with its fastest
    single-factor backend timed on the intermediate it receives, plus its gathers."""
    total, detail = 0.0, []
    feature_axis = 0 if layout == "bsl" else 1
    gathers = [chain.input_permutation, chain.output_permutation]
    if gathers[0] is not None:
        total += time_fn(lambda x: cupy.take(x, gathers[0], axis=feature_axis), [X])
        X = cupy.take(X, gathers[0], axis=feature_axis)
    for K in reversed(chain.factors):
        runs, times = {}, {}
        for backend in PER_FACTOR_BACKENDS:
            try:        # prepared once, as a repeated product runs (no per-call set-up)
                runs[backend] = single.prepare(K.factor, X, layout, backend)
                times[backend] = time_fn(runs[backend], [X], max_repeat=20)
            except (MemoryError, ValueError):
                continue          # e.g. a dense matrix that does not fit
        best = min(times, key=times.get)
        # the winner's fastest of three medians: one slow sample of the baseline must not
        # read as a gain of auto's
        total += min(times[best], fastest_median(runs[best], X, 2))
        detail.append(best)
        X = runs[best](X)
    if gathers[1] is not None:
        total += time_fn(lambda x: cupy.take(x, gathers[1], axis=feature_axis), [X])
    return total, detail


def bmm_per_factor(chain, X, layout, baselines):
    """Seconds of the chain applied factor by factor with the added baselines' BMM (no
    permutations: the chains timed with it have none), each factor's the fastest of three
    medians (as ``per_factor``'s), or None where they have none."""
    total = 0.0
    for K in reversed(chain.factors):
        run = baselines.bmm(K.factor.blocks, layout)
        if run is None:
            return None
        total += fastest_median(run, X, 3)
        X = K.matmul(X, layout=layout)
    return total


def chain_row(transform, chain, layout, batch, ceilings, *, extra=None, reference=None,
              methods=None, per_factor_base=False, dense_base=False, bmm_base=None):
    """One row: ``auto`` and the requested baselines on a random batch. ``reference(X)``
    gives the checked rows' exact result (default: the dense product in double precision);
    ``methods``: more ``base_`` functions of X; ``bmm_base``: the added baselines whose BMM
    is timed factor by factor (:func:`bmm_per_factor`)."""
    n_in = chain.shape[1]
    X = _random((n_in, batch) if layout == "bsl" else (batch, n_in), chain.dtype, seed=batch)
    plan = chain.plan(layout, chain.dtype, batch)
    weights = sum(K.values.nbytes for K in chain.factors)
    row = {"suite": "transforms", "transform": transform, "dtype": str(chain.dtype),
           "layout": layout, "batch": batch, **(extra or {}),
           "floor_s": (X.nbytes * (1 + chain.shape[0] / n_in) + weights)
           / ceilings["copy_bandwidth_Bps"],
           "plan": plan.describe().splitlines(), "launches": plan.launches,
           "model_s": plan.seconds,
           "seconds": {}, "relerr": {}}
    ref = _dense_reference(chain, X, layout) if reference is None else reference(X)
    methods = {"auto": lambda x: chain.matmul(x, layout=layout), **(methods or {})}
    if dense_base:
        D = chain.todense()
        methods["base_dense"] = (lambda x: D @ x) if layout == "bsl" else (lambda x: x @ D.T)
    for name, fn in methods.items():
        row["relerr"][name] = _rel(_check_slice(fn(X), layout), ref)
        row["seconds"][name] = time_fn(fn, [X], max_repeat=30)
    if per_factor_base:
        row["seconds"]["base_per_factor"], row["per_factor_backends"] = per_factor(chain, X, layout)
    if bmm_base is not None:
        seconds = bmm_per_factor(chain, X, layout, bmm_base)
        if seconds is not None:
            row["seconds"][f"base_{bmm_base.name}_bmm"] = seconds
    # a row where auto reads below 0.95 of its best baseline: auto and the baselines timed
    # here once more, each keeping its faster time (the per-factor baselines already keep
    # the fastest of three medians of each factor's product)
    retime_misses(row, methods, [X], median_gpu_seconds, lead="auto")
    return row


def dft_chain_size(n: int) -> int:
    """``n`` where ``dft(n)`` is a KS chain, as the dft rows need (they weigh and time its
    factors); ValueError for a size with a prime factor above the chains' largest radix,
    whose ``dft`` is Bluestein's operator, which has no factors."""
    try:
        radix_factors(n)
    except ValueError:
        raise ValueError(f"dft({n}) is not a KS chain: its prime factor {prime_factors(n)[-1]} "
                         f"is above the largest radix") from None
    return n


def rows_of(elements, n):
    """The batch size B of a row of size ``n`` with B·n = ``elements`` values: at least one
    row, where ``n`` exceeds ``elements``."""
    return max(1, elements // n)


def transform_chain(kind, n, dtype, xp):
    """The chain a ``dft``, ``hadamard`` or ``butterfly`` row of size ``n`` measures (random
    butterflies seeded by ``n``, so that fit_costs.py can rebuild a row's chain)."""
    if kind == "dft":
        return dft(n, dtype=dtype, xp=xp)
    if kind == "hadamard":
        return hadamard(n, dtype=dtype, xp=xp)
    return butterfly(n, dtype=dtype, xp=xp, seed=n)


def bench_dft(n, elements, ceilings):
    F = transform_chain("dft", n, numpy.complex64, cupy)
    exact = lambda x: cupy.fft.fft(_check_slice(x, "bsf").astype(numpy.complex128), axis=-1)  # noqa: E731
    return chain_row("dft", F, "bsf", rows_of(elements, n), ceilings, extra={"n": n},
                     reference=exact, methods={
                         "base_cufft": lambda x: cupy.fft.fft(x, axis=-1),
                         "base_bmm_chain": lambda x: F.matmul(x, layout="bsf", backend="bmm")})


def _summary(rows):
    lines = []
    for r in rows:
        s = r["seconds"]
        best_name = min((k for k in s if k.startswith("base_")), key=s.get, default=None)
        what = r.get("n", r.get("chain"))
        speed = f"best {best_name} {s[best_name] * 1e3:8.3f} ms  x{s[best_name] / s['auto']:5.2f}" \
            if best_name else ""
        lines.append(f"{r['transform']:12s} {str(what):36s} {r['dtype']:9s} {r['layout']} "
                     f"B={r['batch']:<7d} auto {s['auto'] * 1e3:8.3f} ms  floor frac "
                     f"{r['floor_s'] / s['auto']:4.2f}  {speed}")
    return "\n".join(lines)


def add_arguments(parser):
    group = parser.add_argument_group("chains suite")
    group.add_argument("--sizes", type=listed(checked(positive_int, dft_chain_size), "DFT sizes"),
                       default="256,1024,4096,16384",
                       help="DFT sizes whose dft is a KS chain (no large prime factor)")
    group.add_argument("--elements", type=positive_int, default=2**26,
                       help="B·n for dft, butterfly, hadamard (B at least 1)")
    group.add_argument("--butterfly", type=power_of_two_list, default="256,1024,4096",
                       help="butterfly sizes, powers of two")
    group.add_argument("--hadamard", type=power_of_two_list, default="256,1024,4096,8192",
                       help="Hadamard sizes, powers of two")
    group.add_argument("--monarch", type=positive_int_list, default="1024,4096,16384",
                       help="Monarch sizes (square, sqrt(n) blocks where n is a square)")
    group.add_argument("--chain-batch", type=positive_int, default=25088,
                       help="batch of the monarch and paper chains")
    group.add_argument("--parts", type=choice_list(PARTS), default=",".join(PARTS),
                       help=f"comma-separated, of {','.join(PARTS)}")


def main(args, baselines=NONE):
    parts = args.parts
    t0 = time.time()
    ceilings = measure_ceilings()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = run_metadata()
    result = {"device": meta["gpu"], **meta, "ceilings": ceilings,
              "rates": dataclasses.asdict(device.current()), "rows": []}
    bmm_base = baselines if baselines.name else None

    def add(row):
        result["rows"].append(row)
        result["seconds"] = time.time() - t0
        out.write_text(json.dumps(result, indent=1))
        print(_summary([row]), flush=True)
        cupy.get_default_memory_pool().free_all_blocks()

    if "dft" in parts:
        for n in args.sizes:
            add(bench_dft(n, args.elements, ceilings))
    if "butterfly" in parts:
        for dtype in (numpy.float32, numpy.complex64):
            for n in args.butterfly:
                C = transform_chain("butterfly", n, dtype, cupy)
                for layout in ("bsf", "bsl"):
                    add(chain_row("butterfly", C, layout, rows_of(args.elements, n), ceilings,
                                  extra={"n": n}, per_factor_base=True))
    if "hadamard" in parts:
        for n in args.hadamard:
            H = transform_chain("hadamard", n, numpy.float32, cupy)
            for layout in ("bsf", "bsl"):
                add(chain_row("hadamard", H, layout, rows_of(args.elements, n), ceilings,
                              extra={"n": n}, per_factor_base=True))
    if "monarch" in parts:
        for n in args.monarch:
            M = monarch(n, dtype=numpy.float32, xp=cupy, seed=n)
            for layout in ("bsf", "bsl"):
                add(chain_row("monarch", M, layout, args.chain_batch, ceilings, extra={
                    "n": n, "chain": [list(p) for p in M.patterns]},
                    per_factor_base=True, dense_base=True, bmm_base=bmm_base))
    if "paper_chain" in parts:
        for patterns in PAPER_CHAINS:
            C = KSChain([KSMatrix.random(p, dtype=numpy.float32, xp=cupy, seed=i)
                         for i, p in enumerate(patterns)])
            for layout in ("bsf", "bsl"):
                add(chain_row("paper_chain", C, layout, args.chain_batch, ceilings,
                              extra={"chain": [list(p) for p in patterns]},
                              per_factor_base=True, dense_base=True, bmm_base=bmm_base))
    print(f"\n{result['gpu']}: copy {ceilings['copy_bandwidth_Bps'] / 1e12:.2f} TB/s, "
          f"{time.time() - t0:.0f} s")
    print(_summary(result["rows"]))
