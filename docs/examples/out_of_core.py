"""A batch in host memory larger than one wants on the GPU, streamed through a KS operator.

    python3 docs/examples/out_of_core.py [--gb 4] [--n 4096] [--streams 3]

``kscupy.stream_matmul(op, X_host)`` computes ``X_host @ op.T`` for a NumPy batch ``X_host``
(rows of ``n`` float32 features, batch-size-first) chunk by chunk through the GPU: each
chunk is copied in, multiplied and copied back on one of several CUDA streams, so that the
copies of one chunk overlap the product of another. With a GPU the script fills a pinned
host batch of ``--gb`` GB (``cupyx.empty_pinned``: the copies then run at the link's full
rate), streams it through a random ``butterfly(n)``, reports the rate against a plain
host-to-device copy, and checks a few rows against the operator applied on the GPU.
Without a GPU it says so, applies the same operator to a small batch with NumPy, checks it
against the dense matrix, and exits with status 0.
"""
import argparse
import sys
import time

import numpy

import kscupy as ks


def cpu_path(args, why):
    print(f"No GPU here ({why}): the same product on a small batch with NumPy.")
    op = ks.butterfly(args.n, dtype=numpy.float32, seed=0)
    X = numpy.random.default_rng(0).standard_normal((256, args.n), dtype=numpy.float32)
    Y = X @ op.T
    ref = X.astype(numpy.float64) @ op.todense().astype(numpy.float64).T
    err = numpy.linalg.norm(Y - ref) / numpy.linalg.norm(ref)
    print(f"X @ op.T for X of shape {X.shape}: relative error {err:.1e} against the dense product")
    return 0 if err < 1e-5 else 1


def gpu_path(args, cupy):
    import cupyx
    op = ks.butterfly(args.n, dtype=numpy.float32, xp=cupy, seed=0)
    rows = int(args.gb * 1e9) // (4 * args.n)
    X = cupyx.empty_pinned((rows, args.n), numpy.float32)
    Y = cupyx.empty_pinned((rows, args.n), numpy.float32)
    X[...] = numpy.random.default_rng(0).standard_normal((1, args.n), dtype=numpy.float32)
    X[:, 0] = numpy.arange(rows, dtype=numpy.float32) / rows      # rows differ
    ks.stream_matmul(op, X[:1000], out=Y[:1000], streams=args.streams)   # compiles, warms up
    t0 = time.perf_counter()
    ks.stream_matmul(op, X, out=Y, streams=args.streams)
    seconds = time.perf_counter() - t0
    # a plain pinned host-to-device copy of 1 GiB, for the link's rate
    chunk = X.reshape(-1)[: 2**28]
    device = cupy.empty(chunk.shape, chunk.dtype)
    device.set(chunk)
    cupy.cuda.Device().synchronize()
    t1 = time.perf_counter()
    device.set(chunk)
    cupy.cuda.Device().synchronize()
    h2d = chunk.nbytes / (time.perf_counter() - t1)
    rate = X.nbytes / seconds
    print(f"{X.nbytes / 1e9:.1f} GB of float32 rows through butterfly({args.n}) in "
          f"{seconds:.2f} s: {rate / 1e9:.1f} GB/s, {rate / h2d:.2f} of a host-to-device "
          f"copy ({h2d / 1e9:.1f} GB/s) on {args.streams} streams")
    picks = numpy.array([0, rows // 2, rows - 1])
    ref = (cupy.asarray(X[picks]) @ op.T).get()
    err = numpy.linalg.norm(Y[picks] - ref) / numpy.linalg.norm(ref)
    print(f"rows {picks.tolist()} against the product on the GPU: relative error {err:.1e}")
    return 0 if err < 1e-5 else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=4.0, help="GB of the host batch")
    parser.add_argument("--n", type=int, default=4096, help="butterfly size (a power of two)")
    parser.add_argument("--streams", type=int, default=3, help="CUDA streams")
    args = parser.parse_args(argv)
    cupy, why = ks.gpu_module()
    if cupy is None:
        return cpu_path(args, why)
    return gpu_path(args, cupy)


if __name__ == "__main__":
    status = main()
    if status:
        sys.exit(status)
