"""Learn a KS chain from an operator you can only apply, then refine a factorization.

    python3 docs/examples/fit_operator.py

1. A planted Monarch matrix is observed only through a function ``P -> T @ P``. ``ks.fit``
   starts from random values and fits the chain's values with L-BFGS on probe batches,
   using the gradients of ``ks.vjp``; the held-out error says whether it was recovered.
2. A Gaussian kernel matrix is compressed into a butterfly with ``ks.factorize``
   (hierarchical SVDs), then ``ks.fit`` refines that chain: the Frobenius error drops below
   factorize's. (For two factors, as a Monarch matrix has, factorize is already optimal and
   there is nothing to refine.)

Runs on the GPU when CuPy and a device are there, else on the CPU with NumPy.
"""
import numpy

import kscupy as ks

cupy, why_not = ks.gpu_module()
xp = cupy if cupy is not None else numpy
print("device:", "GPU (CuPy)" if cupy is not None else f"CPU (NumPy): {why_not}")

# 1. a planted chain seen through a function
planted = ks.monarch(64, blocks=8, dtype=numpy.float64, xp=xp, seed=0)
result = ks.fit(lambda P: planted @ P, planted.patterns, shape=planted.shape, xp=xp,
                start="random", seed=1)
print(f"planted Monarch(64): held-out error {result.start_relerr:.2f} at the random start, "
      f"{result.heldout_relerr:.1e} after {result.steps} L-BFGS steps "
      f"({result.stopped}, {result.seconds:.1f} s)")
assert result.heldout_relerr < 1e-6

# 2. refine a factorization of a dense kernel matrix
n = 256
x = numpy.sort(numpy.random.default_rng(2).uniform(0, 1, n))
D = xp.asarray(numpy.exp(-(x[:, None] - x[None, :]) ** 2 / (2 * 0.05 ** 2)))
patterns = ks.butterfly(n).patterns


def frobenius_error(C):
    return float(xp.linalg.norm(C.todense() - D) / xp.linalg.norm(D))


factorized = frobenius_error(ks.factorize(D, patterns))
result = ks.fit(D, patterns, steps=100, seed=3)       # starts from factorize
print(f"Gaussian kernel ({n} points), butterfly: factorize "
      f"{factorized:.4f}, then fit {frobenius_error(result.chain):.4f} "
      f"({result.steps} steps, {result.seconds:.1f} s)")
assert frobenius_error(result.chain) < factorized
