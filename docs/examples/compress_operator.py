"""Compress a dense kernel matrix into a KS chain with factorize, then apply it fast.

    python3 docs/examples/compress_operator.py

The operator is a Gaussian kernel ``D[i, j] = exp(-(x_i - y_j)^2 / (2 s^2))`` between two
sets of ``n`` points of ``[0, 1]``, sorted (the order matters: a Monarch sub-block couples
every ``p``-th target point with a contiguous cluster of ``n/p`` source points, and a smooth
kernel restricted to a cluster of nearby sources has low numerical rank). ``ks.factorize``
projects ``D`` on several chains of patterns; for each we print the number of stored values
(the compression) and the relative error. Then the best-compressing accurate chain is timed
against the dense product, on the GPU when CuPy and a device are there (``cupyx.profiler``),
on the CPU with NumPy otherwise.
"""
import time

import numpy

import kscupy as ks

cupy, why_not = ks.gpu_module()
xp = cupy if cupy is not None else numpy
print("device:", "GPU (CuPy)" if cupy is not None else f"CPU (NumPy): {why_not}")

n, s = 1024, 0.1
rng = numpy.random.default_rng(0)
x, y = numpy.sort(rng.uniform(0, 1, n)), numpy.sort(rng.uniform(0, 1, n))
D = xp.asarray(numpy.exp(-(x[:, None] - y[None, :]) ** 2 / (2 * s * s)))


def monarch_patterns(n, p):
    return [(1, n // p, n // p, p), (p, n // p, n // p, 1)]


def block_butterfly_patterns(n, t):
    L = (n // t).bit_length() - 1
    return [(2 ** (l - 1), 2 * t, 2 * t, 2 ** (L - l)) for l in range(1, L + 1)]


choices = {"Monarch, p = 8 (rank 16 blocks)": monarch_patterns(n, 8),
           "Monarch, p = 16 (rank 4 blocks)": monarch_patterns(n, 16),
           "Monarch, p = 32 (rank 1 blocks)": monarch_patterns(n, 32),
           "block butterfly, t = 16": block_butterfly_patterns(n, 16),
           "butterfly (rank 1 blocks)": "butterfly"}
print(f"\nGaussian kernel, n = {n}, s = {s}: dense {n * n} values")
print(f"{'chain':34s} {'factors':>7s} {'values':>8s} {'smaller':>8s} {'rel. error':>11s}")
chains = {}
for label, patterns in choices.items():
    C = ks.factorize(D, patterns)
    err = float(xp.linalg.norm(C.todense() - D) / xp.linalg.norm(D))
    chains[label] = (C, err)
    print(f"{label:34s} {len(C):7d} {C.nnz:8d} {n * n / C.nnz:7.1f}x {err:11.1e}")

label = "Monarch, p = 16 (rank 4 blocks)"
C, err = chains[label]
assert err < 1e-4, err                   # smooth kernel: 8x fewer values at 3e-5 error

B = 4096 if cupy is not None else 256
X = xp.asarray(rng.standard_normal((n, B)))
assert float(xp.linalg.norm(C @ X - D @ X) / xp.linalg.norm(D @ X)) < 1e-4
if cupy is not None:
    from cupyx.profiler import benchmark
    t_chain = float(numpy.median(benchmark(C.__matmul__, (X,), n_repeat=50).gpu_times))
    t_dense = float(numpy.median(benchmark(D.__matmul__, (X,), n_repeat=50).gpu_times))
else:
    def median_time(f, repeat=7):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            f()
            times.append(time.perf_counter() - start)
        return float(numpy.median(times))
    t_chain, t_dense = median_time(lambda: C @ X), median_time(lambda: D @ X)
print(f"\n{label}: C @ X with X of shape ({n}, {B}), float64: "
      f"{t_chain * 1e3:.3f} ms against {t_dense * 1e3:.3f} ms for the dense D @ X "
      f"({t_dense / t_chain:.2f}x)")
