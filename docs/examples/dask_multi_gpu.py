"""A KS chain applied to a large batch with Dask: one worker per GPU, throughput on 1 vs N GPUs.

    python3 docs/examples/dask_multi_gpu.py [--batch 2000000] [--n 1024]

The batch (``B x n`` complex64 rows, batch-size-first) is a dask array split along the
batch axis; ``X @ F.T`` with ``F = kscupy.dft(n)`` is lazy and each chunk is transformed by
the worker that holds it. With GPUs (CuPy, and ``dask.distributed``) the script starts a
cluster of one single-threaded worker per GPU (``dask_cuda.LocalCUDACluster`` when
dask-cuda is installed, else ``distributed`` workers each started with its own
``CUDA_VISIBLE_DEVICES``), generates the chunks as CuPy arrays on the workers, and reports
the throughput on 1 GPU and on all of them. Without a GPU it says so, runs the same graph
with NumPy chunks on the local threaded scheduler (checking a chunk against numpy.fft), and
exits with status 0.
"""
import argparse
import importlib
import os
import sys
import time

import numpy

import kscupy as ks
from kscupy.dask import gpu_cluster


def random_rows(module, n, block_id=None, block_info=None):
    """One chunk of complex64 rows, drawn where the chunk lives (NumPy or CuPy ``module``).

    Real and imaginary parts come from one task, so the chunk never has to travel between
    workers to be assembled."""
    xp = importlib.import_module(module)
    rows = block_info[None]["chunk-shape"][0]
    rng = xp.random.default_rng(block_id[0])
    part = lambda: rng.standard_normal((rows, n), dtype=numpy.float32)  # noqa: E731
    return (part() + 1j * part()).astype(numpy.complex64, copy=False)


def transform_throughput(F, batch, chunk, repeat=3):
    """Rows per second of ``(X @ F.T)`` summed, X drawn chunk by chunk in F's array module."""
    import dask.array as da
    n = F.shape[1]
    rows = (chunk,) * (batch // chunk) + ((batch % chunk,) if batch % chunk else ())
    X = da.map_blocks(random_rows, F.xp.__name__, n, chunks=(rows, (n,)),
                      dtype=numpy.complex64, meta=F.xp.empty((0, 0), dtype=numpy.complex64))
    Y = X @ F.T
    total = abs(Y).sum()            # one number back: the work stays where the chunks are
    total.compute()                 # warm-up: compiles kernels, moves F to the workers
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        total.compute()
        times.append(time.perf_counter() - t0)
    return batch / float(numpy.median(times))


def cpu_path(args, why):
    print(f"No GPU here ({why}): running the NumPy-chunk path on the local threaded scheduler.")
    import dask.array as da
    F = ks.dft(args.n, dtype=numpy.complex64)
    rows = min(args.batch, 2048)
    rng = numpy.random.default_rng(0)
    X_host = (rng.standard_normal((rows, args.n))
              + 1j * rng.standard_normal((rows, args.n))).astype(numpy.complex64)
    X = da.from_array(X_host, chunks=(rows // 4, args.n))
    Y = X @ F.T
    first = Y.blocks[0].compute()
    ref = numpy.fft.fft(X_host[: rows // 4].astype(numpy.complex128), axis=-1)
    err = numpy.linalg.norm(first - ref) / numpy.linalg.norm(ref)
    print(f"{type(Y).__name__} of {Y.numblocks[0]} chunks, {type(first).__name__} chunks; "
          f"first chunk vs numpy.fft: relative error {err:.1e}")
    rate = transform_throughput(F, rows, rows // 4)
    print(f"CPU: {rate:,.0f} rows of {args.n} per second")
    return 0 if err < 1e-5 else 1


def gpu_path(args, cupy):
    try:
        from distributed import Client
    except ImportError:
        print("dask.distributed is not installed (pip install distributed): one worker per GPU "
              "needs it; nothing run.")
        return 0
    gpus = cupy.cuda.runtime.getDeviceCount()
    F = ks.dft(args.n, dtype=numpy.complex64, xp=cupy)
    print(f"{gpus} GPU(s); DFT({args.n}) as a KS chain over {args.batch:,} complex64 rows, "
          f"chunks of {args.chunk:,} rows")
    rates = {}
    for count in sorted({1, gpus}):
        with gpu_cluster(count) as cluster, Client(cluster):
            rates[count] = transform_throughput(F, args.batch, args.chunk)
        print(f"{count} GPU(s): {rates[count]:,.0f} rows/s "
              f"({rates[count] * args.n * 8 * 2 / 1e9:.1f} GB/s read + written)")
    if gpus > 1:
        print(f"speed-up on {gpus} GPUs: {rates[gpus] / rates[1]:.2f}x")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024, help="transform size")
    parser.add_argument("--batch", type=int, default=2_000_000, help="rows")
    parser.add_argument("--chunk", type=int, default=125_000, help="rows per chunk")
    args = parser.parse_args(argv)
    cupy, why = ks.gpu_module()
    if cupy is None:
        return cpu_path(args, why)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return gpu_path(args, cupy)


if __name__ == "__main__":
    status = main()
    if status:
        sys.exit(status)
