"""Least squares and eigenvalues with a KS operator: no dense matrix is formed.

Runs on the GPU (cupyx solvers) when CuPy and a device are there, else on the CPU (SciPy).
    python3 docs/examples/solve_with_ks.py
"""
import numpy

import kscupy as ks

cupy, _ = ks.gpu_module()          # (cupy, None) with a GPU, (None, reason) without
xp = cupy if cupy is not None else numpy
if xp is numpy:
    import scipy.sparse.linalg as spla
else:
    import cupyx.scipy.sparse.linalg as spla

# A tall KS factor: 3 diagonal blocks, each of 8 x 4 blocks of size 16 -> 384 x 192.
K = ks.KSMatrix.random((3, 8, 4, 16), dtype=numpy.float64, xp=xp, seed=0)
op = ks.aslinearoperator(K)
x_true = xp.asarray(numpy.random.default_rng(0).standard_normal(K.shape[1]))
b = K @ x_true
x = spla.lsmr(op, b, atol=1e-12, btol=1e-12, maxiter=2000)[0]
print(f"lsmr on {K!r}: relative error {float(xp.linalg.norm(x - x_true) / xp.linalg.norm(x_true)):.1e}")
assert xp.linalg.norm(x - x_true) <= 1e-8 * xp.linalg.norm(x_true)

# Largest eigenvalues of the Gram operator K^T K through the adjoint.
gram = spla.LinearOperator((K.shape[1],) * 2, dtype=numpy.float64,
                           matvec=lambda v: op.rmatvec(op.matvec(v)))
top = spla.eigsh(gram, k=3, return_eigenvectors=False)
to_host = cupy.asnumpy if xp is not numpy else numpy.asarray
sv = numpy.linalg.svd(to_host(K.todense()), compute_uv=False)[:3]
top = numpy.sort(to_host(top))[::-1]
print("top eigenvalues of K^T K:", top)
print("squared top singular values of K (dense SVD):", sv**2)
assert numpy.allclose(top, sv**2, rtol=1e-8)
