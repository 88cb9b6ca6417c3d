"""Command line: ``python -m kscupy {demo,info,bench,warmup}``.

``demo`` is the main job: it builds a random KS factor, multiplies it with every available
backend in both layouts, checks each result against the dense product in float64, times
each, and solves a small linear system through :func:`kscupy.aslinearoperator`. It runs on
the GPU with CuPy when a device is there, on the CPU with NumPy otherwise.

``bench`` runs the benchmark suites (:mod:`kscupy.bench`) on the GPU and writes the JSON
results and the PNG plots to ``--out``; ``--quick`` runs a small sample of each suite
(``python -m kscupy bench --help`` lists them and their options).

``warmup`` compiles ahead the kernels that given patterns, dtypes, layouts and batch sizes
(and DFT sizes) need (:func:`kscupy.warmup`), so that later processes find them in CuPy's
disk cache.

Each subcommand checks its arguments before it runs: a bad value, or a request that cannot
run (a demo whose buffers exceed the memory available, a suite left nothing to run, a results
file that holds none), ends in argparse's usage line, a one-line message naming the option,
and exit status 2.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy
import scipy

import kscupy
from kscupy.arguments import (UsageError, choice_list, out_of_memory, positive_int,
                              positive_int_list)
from kscupy.core import arrays, device, memory
from kscupy.engine.costs import constants
from kscupy.operators.base import LAYOUTS


def _device_lines(cupy):
    if cupy is None:
        return [f"device: CPU ({platform.processor() or platform.machine()})"]
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    rt = cupy.cuda.runtime.runtimeGetVersion()
    drv = cupy.cuda.runtime.driverGetVersion()
    return [f"device: {name} (compute capability {props['major']}.{props['minor']}, "
            f"{props['multiProcessorCount']} SMs, {props['totalGlobalMem'] / 2**30:.1f} GiB, "
            f"L2 {props['l2CacheSize'] / 2**20:.0f} MiB)",
            f"CUDA runtime {rt // 1000}.{rt % 1000 // 10}, driver {drv // 1000}.{drv % 1000 // 10}",
            *_model_lines(device.current())]


def _model_lines(facts) -> list:
    """What kscupy runs on the device ``facts`` describe, and which constants price it."""
    lines = []
    if facts.emulated_on:
        lines.append(f"emulating sm_{facts.compute_capability} on {facts.emulated_on} "
                     f"({device.EMULATE_ARCH}): its shared memory and features, not its speed")
    runs = ["FMA kernels"] + (["tensor-core kernels"] if facts.tensor_cores else []) \
        + (["TMA group kernel"] if facts.tma else []) \
        + ([f"clusters of up to {facts.max_cluster} blocks"] if facts.max_cluster > 1 else [])
    lines.append(f"kernels: {', '.join(runs)}")
    files = constants.files_for(facts.name)
    how = ("constants fitted on this device" if constants.fitted_on(facts.name)
           else "the generic constants applied to this device's own rates (not fitted "
           "here)")
    lines.append(f"cost model: {' + '.join(files)}: {how}")
    return lines


def info(_args=None) -> int:
    cupy, why = arrays.gpu_module()
    print(f"kscupy {kscupy.__version__}, Python {platform.python_version()}, "
          f"NumPy {numpy.__version__}, SciPy {scipy.__version__}, "
          f"CuPy {cupy.__version__ if cupy else 'not available'}")
    for line in _device_lines(cupy):
        print(line)
    if why:
        print(f"GPU path unavailable: {why}; kscupy runs on NumPy arrays on the CPU.")
    return 0


def _median_time(fn, xp, repeat):
    """Median seconds of ``fn()``: CUDA events via cupyx.profiler.benchmark on the GPU."""
    if xp is not numpy:
        from cupyx.profiler import benchmark
        result = benchmark(fn, n_repeat=repeat, n_warmup=3)
        return float(numpy.median(result.gpu_times))
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(numpy.median(times))


def _settled(fn):
    """``fn()`` after a first call and the background compiles it started: what is checked
    and timed is what ``auto`` runs from then on, not the direct kernel that answers while
    its own compiles (:mod:`kscupy.kernels.nvrtc`)."""
    fn()
    from kscupy.kernels import nvrtc
    nvrtc.finish_background_compiles()
    return fn()


def _rel_err(Y, ref):
    Y = numpy.asarray(Y.get() if hasattr(Y, "get") else Y, dtype=numpy.complex128)
    return float(numpy.linalg.norm(Y - ref) / numpy.linalg.norm(ref))


def _demo_buffers(pattern, dtype, B):
    """The largest buffers :func:`demo` holds at once for ``pattern``, ``dtype`` and the
    batch size ``B``: ``{what: (bytes, on_host)}``, ``on_host`` for the NumPy arrays it
    builds whatever the array module (the float64 oracle, the operand's draw), else with
    the array module (the factor, operands and results, the dense and sparse backends'
    matrices). The CG and FFT sections, of fixed sizes (a few hundred MiB at most), are left
    out."""
    (M, N), nnz, size = pattern.shape, pattern.nnz, dtype.itemsize
    return {
        "the dense complex128 oracle": (16 * M * N, True),
        "the oracle's complex128 values": (16 * nnz, True),
        "the operand's float64 draw and its cast": ((8 + size) * N * B, True),
        "the reference product and the error checks' complex128 copies":
            (16 * (N * B + 3 * M * B), True),
        "the factor's values and their making": (2 * size * nnz, False),
        "the operand in both layouts": (2 * size * N * B, False),
        "two results": (2 * size * M * B, False),
        "the dense backend's matrix": (size * M * N, False),
        "the sparse backend's CSR matrix": ((size + 8) * nnz, False),
    }


def _gib(nbytes) -> str:
    return f"{nbytes:,} bytes ({nbytes / 2**30:,.1f} GiB)"


def _check_demo_fits(args, xp):
    """UsageError, with the bytes needed, where the demo's buffers (:func:`_demo_buffers`)
    exceed the memory available now: found before anything is allocated, rather than as
    an allocation error (or a dimension NumPy cannot index) halfway through the run."""
    pattern = kscupy.KSPattern(*args.pattern)
    buffers = _demo_buffers(pattern, numpy.dtype(args.dtype), args.batch)
    sides = {"host memory": (numpy, lambda on_host: on_host or xp is numpy)}
    if xp is not numpy:
        sides[f"memory on GPU {xp.cuda.Device().id}"] = (xp, lambda on_host: not on_host)
    for where, (module, here) in sides.items():
        parts = {what: n for what, (n, on_host) in buffers.items() if here(on_host)}
        need, largest = sum(parts.values()), max(parts, key=parts.get)
        available = memory.available_bytes(module)
        # where the platform does not say, what no process can address still is refused
        limit = available if available is not None else sys.maxsize
        if need > limit:
            have = f"but only {_gib(available)} are available" if available is not None \
                else "more than a process can address"
            raise UsageError(
                f"--pattern {' '.join(map(str, pattern))} --batch {args.batch} --dtype "
                f"{args.dtype}: the demo needs about {_gib(need)} of {where} ({largest}: "
                f"{_gib(parts[largest])}), {have}")


def demo(args) -> int:
    cupy, why = arrays.gpu_module()
    if args.cpu:
        cupy, why = None, "--cpu was given"
    xp = cupy if cupy is not None else numpy
    _check_demo_fits(args, xp)
    info()
    print()
    pattern = kscupy.KSPattern(*args.pattern)
    dtype = numpy.dtype(args.dtype)
    B = args.batch
    K = kscupy.KSMatrix.random(pattern, dtype=dtype, xp=xp, seed=0)
    M, N = K.shape
    print(f"K = {K!r}: nnz {K.nnz}, density {pattern.density:.3g}, "
          f"h(b,c) {pattern.h:.3g}; batch B = {B}, running on {xp.__name__}")
    rng = numpy.random.default_rng(1)
    X_host = rng.standard_normal((N, B)).astype(dtype)
    X = xp.asarray(X_host)
    Xt = xp.ascontiguousarray(X.T)
    # float64 oracle: the dense matrix built from the canonical values by their definition
    w = numpy.asarray(K.values.get() if xp is not numpy else K.values, dtype=numpy.complex128)
    D = numpy.zeros((M, N), dtype=numpy.complex128)
    a, b, c, d = pattern
    for i in range(a):
        for j in range(d):
            D[numpy.ix_(i * b * d + numpy.arange(b) * d + j,
                        i * c * d + numpy.arange(c) * d + j)] = w[i, :, :, j]
    ref = D @ X_host
    backends = ["auto", "bmm", "einsum", "dense", "sparse"]
    if xp is not numpy:
        backends.insert(1, "kernel")
    print(f"\n{'backend':8s} {'layout':6s} {'rel. error':>11s} {'time':>10s}")
    for backend in backends:
        for layout, operand, expected in (("bsl", X, ref), ("bsf", Xt, ref.T)):
            try:
                fn = lambda: K.matmul(operand, layout=layout, backend=backend)  # noqa: E731
                err = _rel_err(_settled(fn), expected)
                t = _median_time(fn, xp, args.repeat)
                print(f"{backend:8s} {layout:6s} {err:11.2e} {t * 1e3:8.3f} ms")
            except (ImportError, NotImplementedError) as exc:
                print(f"{backend:8s} {layout:6s} unavailable: {exc}")

    # A small system through the LinearOperator adapter: (I + K^H K / ||K||^2) x = y is
    # symmetric positive definite, so CG converges.
    if xp is numpy:
        import scipy.sparse.linalg as spla
    else:
        import cupyx.scipy.sparse.linalg as spla
    square = kscupy.KSMatrix.random((4, 16, 16, 4), dtype=numpy.float64, xp=xp, seed=2)
    op = kscupy.aslinearoperator(square)
    n = square.shape[0]
    scale = 1.0 / float(numpy.linalg.norm(numpy.asarray(
        square.todense().get() if xp is not numpy else square.todense()), 2)) ** 2
    A = spla.LinearOperator((n, n), matvec=lambda v: v + scale * op.rmatvec(op.matvec(v)),
                            dtype=numpy.float64)
    y = xp.asarray(rng.standard_normal(n))
    x, status = spla.cg(A, y, maxiter=200)
    residual = float(xp.linalg.norm(A.matvec(x) - y) / xp.linalg.norm(y))
    print(f"\nCG on I + K^T K/||K||^2 via aslinearoperator ({n} unknowns, {xp.__name__}): "
          f"status {status}, relative residual {residual:.2e}")
    _fft_section(xp, args.repeat)
    if why:
        print(f"\n(GPU path not run: {why}.)")
    return 0


def _fft_section(xp, repeat):
    """The DFT as a KS chain against the FFT library of the array module."""
    n, batch = 1024, (4096 if xp is not numpy else 512)
    repeat = min(repeat, 5)
    F = kscupy.dft(n, dtype=numpy.complex64, xp=xp)
    rng = numpy.random.default_rng(3)
    X_host = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(numpy.complex64)
    X = xp.asarray(X_host)
    ref = numpy.fft.fft(X_host.astype(numpy.complex128), axis=-1)
    Y = _settled(lambda: X @ F.T)                        # batch-size-first rows
    err = _rel_err(Y, ref)
    t_chain = _median_time(lambda: X @ F.T, xp, repeat)
    t_fft = _median_time(lambda: xp.fft.fft(X, axis=-1), xp, repeat)
    print(f"\nFFT as KS: dft({n}) = {len(F)} factors {[tuple(p) for p in F.patterns[:2]]}..., "
          f"{batch} rows, complex64 on {xp.__name__}")
    if xp is numpy:
        how = "factor by factor: fused chains run on the GPU only"
    else:
        plan = F.plan("bsf", numpy.complex64, batch)
        how = (f"{plan.launches} launch(es): radix-2 pairs merged, fused in shared memory, "
               f"digit reversal folded into the reads")
    print(f"  rel. error vs float64 FFT {err:.2e}; chain {t_chain * 1e3:.3f} ms, "
          f"{xp.__name__}.fft {t_fft * 1e3:.3f} ms (ratio {t_chain / t_fft:.1f}x; {how})")


def bench(argv) -> int:
    from kscupy.bench import cli
    return cli.main(argv)


def warmup(args) -> int:
    if not args.pattern and not args.dft:
        raise UsageError("give at least one --pattern or --dft: there is nothing to compile")
    cupy, why = arrays.gpu_module()
    if cupy is None:
        print(f"python -m kscupy warmup compiles GPU kernels and needs a GPU: {why}",
              file=sys.stderr)
        return 2
    dfts = [kscupy.dft(n, dtype=numpy.complex64, xp=cupy) for n in args.dft]
    report = kscupy.warmup(args.pattern, operators=dfts, dtypes=args.dtypes,
                           layouts=args.layouts, batches=args.batches,
                           threads=args.threads)
    print(f"{report.products} products, {report.kernels_loaded} kernels compiled or loaded, "
          f"{report.seconds:.1f} s")
    return 0


def _parser():
    """The command line's parser, and its subcommands' parsers by name."""
    parser = argparse.ArgumentParser(prog="python -m kscupy", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"kscupy {kscupy.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="multiply a random KS factor with every backend",
                            description="Multiply a random KS factor with every backend and "
                                        "check each against a dense float64 oracle; refused "
                                        "up front where its buffers would not fit in the "
                                        "memory available now.")
    p_demo.add_argument("--pattern", type=positive_int, nargs=4, default=(4, 64, 64, 8),
                        metavar=("A", "B", "C", "D"))
    p_demo.add_argument("--batch", type=positive_int, default=1024)
    p_demo.add_argument("--dtype", default="float32",
                        choices=[str(t) for t in arrays.SUPPORTED_DTYPES])
    p_demo.add_argument("--repeat", type=positive_int, default=20,
                        help="timed calls per backend (the median is printed)")
    p_demo.add_argument("--cpu", action="store_true", help="use NumPy even if a GPU is there")
    p_demo.set_defaults(func=demo)
    p_info = sub.add_parser("info", help="versions, device and CUDA details")
    p_info.set_defaults(func=info)
    # (its own parser: python -m kscupy bench --help, kscupy.bench.cli)
    sub.add_parser("bench", help="run the GPU benchmark suites, write JSON and plots "
                                 "(bench --help for its options)")
    p_warm = sub.add_parser("warmup", help="compile ahead the kernels given products need",
                            description="Run one product per pattern (and DFT size), dtype, "
                                        "layout and batch size on the GPU, so that their "
                                        "kernels are compiled and kept in CuPy's disk cache. "
                                        "Give at least one --pattern or --dft.")
    p_warm.add_argument("--pattern", type=positive_int, nargs=4, action="append", default=[],
                        metavar=("A", "B", "C", "D"), help="a KS pattern (repeatable)")
    p_warm.add_argument("--dft", type=positive_int, action="append", default=[], metavar="N",
                        help="a complex64 DFT size (repeatable)")
    p_warm.add_argument("--dtypes", type=choice_list([str(t) for t in arrays.SUPPORTED_DTYPES]),
                        default="float32", help="comma-separated (default float32)")
    p_warm.add_argument("--layouts", type=choice_list(LAYOUTS), default=",".join(LAYOUTS))
    p_warm.add_argument("--batches", type=positive_int_list, default="1,64,4096",
                        help="comma-separated batch sizes (the tile choice follows them)")
    p_warm.add_argument("--threads", type=positive_int, default=None,
                        help="products run (and compiled) at once (default: CPU count, at most 8)")
    p_warm.set_defaults(func=warmup)
    return parser, sub.choices


def main(argv=None) -> int:
    parser, commands = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return bench(argv[1:])
    args, extra = parser.parse_known_args(argv)
    if extra:           # named by the subcommand's usage line, not the top level's
        command = commands.get(getattr(args, "command", None))
        (command or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except UsageError as exc:
        commands[args.command].error(str(exc))
    except MemoryError as exc:      # past the checks made up front: a run that failed
        return out_of_memory(commands[args.command].prog, exc)


if __name__ == "__main__":
    sys.exit(main())
