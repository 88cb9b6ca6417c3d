"""DFTs of every size (Bluestein for large prime factors) against numpy.fft (CPU; CuPy as `gpu`).

The oracle is numpy.fft in complex128; the data are fresh random complex batches.
"""
import numpy
import pytest

import kscupy as ks
from conftest import random_array, rel_err, to_numpy
from kscupy.transforms.fourier import bluestein_length

# primes above max_radix = 64, a product with one, 3 * 67, and primes near 1e4
BLUESTEIN_SIZES = [67, 97, 1009, 2 * 1009, 4099, 3 * 67, 9973]
TOL = {numpy.complex128: 1e-10, numpy.complex64: 1e-4}


@pytest.mark.parametrize("n", BLUESTEIN_SIZES)
@pytest.mark.parametrize("dtype", [numpy.complex128, numpy.complex64])
def test_bluestein_dft_matches_numpy_fft(xp, rng, n, dtype):
    F = ks.dft(n, dtype=dtype, xp=xp)
    assert isinstance(F, ks.KSSubmatrix) and F.shape == (n, n) and F.dtype == dtype
    X = random_array(rng, (n, 3), numpy.complex128)
    Xd = xp.asarray(X.astype(dtype))
    tol = TOL[dtype]
    assert rel_err(F @ Xd, numpy.fft.fft(X, axis=0)) < tol
    assert rel_err(xp.asarray(X.T.astype(dtype)) @ F.T, numpy.fft.fft(X.T, axis=-1)) < tol
    assert rel_err(F.matmul(xp.asarray(X.T.astype(dtype)), layout="bsf"),
                   numpy.fft.fft(X.T, axis=-1)) < tol
    assert rel_err(F @ Xd[:, 0], numpy.fft.fft(X[:, 0])) < tol
    for norm in (None, "ortho", "forward"):
        assert rel_err(ks.idft(n, dtype=dtype, norm=norm, xp=xp) @ Xd,
                       numpy.fft.ifft(X, axis=0, norm=norm)) < tol
    assert rel_err(ks.dft(n, dtype=dtype, norm="ortho", xp=xp) @ Xd,
                   numpy.fft.fft(X, axis=0, norm="ortho")) < tol


@pytest.mark.parametrize("n", [97, 3 * 67])
def test_bluestein_views_dense_and_adjoint(xp, rng, n):
    F = ks.dft(n, xp=xp)
    dense = numpy.fft.fft(numpy.eye(n), axis=0)          # the DFT matrix, column by column
    assert rel_err(F.todense(), dense) < 1e-12
    assert rel_err(F.T.todense(), dense.T) < 1e-12
    assert rel_err(F.H.todense(), dense.conj().T) < 1e-12
    assert F.T.T is F and F.H.H is F
    Z = random_array(rng, (4, n), numpy.complex128)
    assert rel_err(xp.asarray(Z) @ F, Z @ dense) < 1e-12          # row batch: Z @ F
    x, y = random_array(rng, (n,), numpy.complex128), random_array(rng, (n,), numpy.complex128)
    # dot test <F x, y> == <x, F^H y>
    lhs = numpy.vdot(y, to_numpy(F @ xp.asarray(x)))
    rhs = numpy.vdot(to_numpy(F.H @ xp.asarray(y)), x)
    assert abs(lhs - rhs) < 1e-10 * abs(lhs)


def test_bluestein_linear_operator_in_gmres(rng):
    import scipy.sparse.linalg as spla
    n = 97
    op = ks.aslinearoperator(ks.dft(n, norm="ortho"))
    assert op.shape == (n, n) and op.dtype == numpy.complex128
    A = spla.LinearOperator((n, n), dtype=numpy.complex128, matvec=lambda v: op.matvec(v) + 2 * v,
                            rmatvec=lambda v: op.rmatvec(v) + 2 * v)
    b = random_array(rng, (n,), numpy.complex128)
    import inspect
    tol = {"rtol" if "rtol" in inspect.signature(spla.gmres).parameters else "tol": 1e-12}
    x, info = spla.gmres(A, b, restart=n, maxiter=20, **tol)
    Fd = numpy.fft.fft(numpy.eye(n), axis=0, norm="ortho")
    assert info == 0 and rel_err(x, numpy.linalg.solve(Fd + 2 * numpy.eye(n), b)) < 1e-9
    assert rel_err(op.rmatvec(b), Fd.conj().T @ b) < 1e-12


def test_bluestein_chain_structure():
    """The convolution is one m x m chain of radix-2 factors, m the power of two >= 2n - 1."""
    F = ks.dft(1009)
    assert F.chain.shape == (2048, 2048) and len(F.chain) == 22
    assert all(tuple(p)[1:3] == (2, 2) for p in F.chain.patterns)
    assert bluestein_length(1009) == 2048 and bluestein_length(1024) == 2048
    assert isinstance(ks.dft(2 * 3 * 5 * 61), ks.KSChain)       # smooth sizes keep their chain
    assert isinstance(ks.dft(67, max_radix=67), ks.KSChain)


def test_submatrix_and_realpart_errors():
    C = ks.dft(8)
    with pytest.raises(ValueError, match="leading block"):
        ks.KSSubmatrix(C, (9, 8))
    with pytest.raises(TypeError, match="tuple of two integers"):
        ks.KSSubmatrix(C, [8, 8])
    with pytest.raises(TypeError, match="needs a KSChain"):
        ks.KSSubmatrix(numpy.eye(8), (8, 8))
    S = ks.dft(97)
    with pytest.raises(ValueError, match="shape mismatch"):
        S @ numpy.ones(96)
    with pytest.raises(TypeError, match="does not compose"):
        S @ ks.dft(97)
    with pytest.raises(TypeError, match="complex operator"):
        ks.KSRealPart(ks.hadamard(8))
    with pytest.raises(TypeError, match="not converted to an array"):
        numpy.asarray(S)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["auto", "kernel"])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("n", [97, 4099])
def test_bluestein_gpu_backends_poisoned(poisoned, rng, backend, layout, n):
    import cupy
    X = random_array(rng, (n, 37), numpy.complex128)
    for dtype in (numpy.complex64, numpy.complex128):
        F = ks.dft(n, dtype=dtype, xp=cupy)
        Xd = cupy.asarray(X.astype(dtype) if layout == "bsl" else X.T.astype(dtype))
        ref = numpy.fft.fft(X, axis=0) if layout == "bsl" else numpy.fft.fft(X.T, axis=-1)
        assert rel_err(F.matmul(Xd, layout=layout, backend=backend), ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [numpy.complex128, numpy.complex64])
def test_bluestein_accuracy_at_a_prime_near_1e5(rng, dtype):
    """The chirp phase (t^2 mod 2n) is exact, so the error does not grow with n."""
    n = 99991
    x = random_array(rng, (n,), numpy.complex128)
    F = ks.dft(n, dtype=dtype)
    assert rel_err(F @ x.astype(dtype), numpy.fft.fft(x)) < TOL[dtype] / 10
