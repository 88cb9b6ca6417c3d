"""Iterative solvers with KS chains: a deconvolution through the DFT chain, and least squares
with a Monarch product. No dense matrix is formed; on the GPU each chain product follows its
plan (fused segments where they pay).

Runs on the GPU (cupyx solvers) when CuPy and a device are there, else on the CPU (SciPy).
    python3 docs/examples/solve_with_chain.py
"""
import inspect

import numpy

import kscupy as ks

cupy, _ = ks.gpu_module()          # (cupy, None) with a GPU, (None, reason) without
xp = cupy if cupy is not None else numpy
if xp is numpy:
    import scipy.sparse.linalg as spla
else:
    import cupyx.scipy.sparse.linalg as spla
rng = numpy.random.default_rng(1)

# Circular convolution A = F^H diag(h) F / n with an FFT-as-KS chain F: solve A x = b by GMRES.
n = 256
F = ks.dft(n, dtype=numpy.complex128, xp=xp)
kernel = numpy.zeros(n)
kernel[:3] = [2.0, -0.5, 0.25]                     # a well-conditioned filter
h = xp.asarray(numpy.fft.fft(kernel))
FH = F.H


def convolve(v):
    return (FH @ (h * (F @ v))) / n


A = spla.LinearOperator((n, n), matvec=convolve, dtype=numpy.complex128)
x_true = xp.asarray(rng.standard_normal(n) + 0j)
b = convolve(x_true)
# SciPy calls the relative tolerance `rtol`, cupyx `tol`
tol_name = "rtol" if "rtol" in inspect.signature(spla.gmres).parameters else "tol"
x, info = spla.gmres(A, b, restart=50, maxiter=200, **{tol_name: 1e-12})
err = float(xp.linalg.norm(x - x_true) / xp.linalg.norm(x_true))
print(f"gmres with {F!r}: info {info}, relative error {err:.1e}")
assert info == 0 and err < 1e-9

# Least squares min ||M x - y|| with a tall Monarch chain (two KS factors), through lsmr.
M = ks.monarch(512, 128, blocks=8, dtype=numpy.float64, xp=xp, seed=3)
x_true = xp.asarray(rng.standard_normal(M.shape[1]))
y = M @ x_true
x = spla.lsmr(ks.aslinearoperator(M), y, atol=1e-13, btol=1e-13, maxiter=5000)[0]
err = float(xp.linalg.norm(x - x_true) / xp.linalg.norm(x_true))
print(f"lsmr with {M!r}: relative error {err:.1e}")
assert err < 1e-7
