"""DCT and DST of types 1 to 4 against scipy.fft (CPU; CuPy as `gpu`)."""
import numpy
import pytest
import scipy.fft

import kscupy as ks
from conftest import random_array, rel_err

TRANSFORMS = [(ks.dct, scipy.fft.dct), (ks.dst, scipy.fft.dst)]
TOL = {numpy.float64: 1e-12, numpy.float32: 1e-5}


@pytest.mark.parametrize("n", [8, 64, 97, 1000])
@pytest.mark.parametrize("kind", [1, 2, 3, 4])
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("transform,oracle", TRANSFORMS, ids=["dct", "dst"])
def test_matches_scipy_fft(xp, rng, transform, oracle, n, kind, norm):
    for dtype in (numpy.float64, numpy.float32):
        op = transform(n, type=kind, norm=norm, dtype=dtype, xp=xp)
        assert op.shape == (n, n) and op.dtype == dtype
        X = random_array(rng, (n, 3), numpy.float64)
        tol = TOL[dtype]
        Y = op @ xp.asarray(X.astype(dtype))
        assert Y.dtype == dtype
        assert rel_err(Y, oracle(X, type=kind, norm=norm, axis=0)) < tol
        assert rel_err(xp.asarray(X.T.astype(dtype)) @ op.T,
                       oracle(X.T, type=kind, norm=norm, axis=-1)) < tol
        assert rel_err(op @ xp.asarray(X[:, 0].astype(dtype)), oracle(X[:, 0], type=kind, norm=norm)) < tol
    # complex input: the real matrix applied linearly (scipy transforms both parts)
    Z = random_array(rng, (n, 2), numpy.complex128)
    assert rel_err(op.T.T @ xp.asarray(Z.astype(numpy.complex64)),
                   oracle(Z, type=kind, norm=norm, axis=0)) < 1e-5


@pytest.mark.parametrize("n", [8, 97])
@pytest.mark.parametrize("transform,oracle", TRANSFORMS, ids=["dct", "dst"])
def test_transpose_consistent_with_dense(transform, oracle, n):
    for kind in (1, 2, 3, 4):
        for norm in (None, "ortho", "forward"):
            op = transform(n, type=kind, norm=norm)
            dense = oracle(numpy.eye(n), type=kind, norm=norm, axis=0)
            assert rel_err(op.todense(), dense) < 1e-12
            assert rel_err(op.T.todense(), dense.T) < 1e-12
            assert rel_err(op.H.todense(), dense.T) < 1e-12
    # the transpose of DCT-II is DCT-III up to the scaling of the edge column; ortho: the inverse
    c2, c3 = transform(n, 2, "ortho").todense(), transform(n, 3, "ortho").todense()
    assert rel_err(c2.T, c3) < 1e-12 and rel_err(c3 @ c2, numpy.eye(n)) < 1e-12


def test_dct_in_a_solver(rng):
    """aslinearoperator of the orthogonal DCT-II in lsqr recovers x from C x."""
    import scipy.sparse.linalg as spla
    n = 97
    op = ks.aslinearoperator(ks.dct(n, norm="ortho"))
    x = random_array(rng, (n,), numpy.float64)
    sol = spla.lsqr(op, scipy.fft.dct(x, norm="ortho"), atol=1e-14, btol=1e-14)[0]
    assert rel_err(sol, x) < 1e-10


def test_dct_errors():
    with pytest.raises(ValueError, match="type must be 1, 2, 3 or 4"):
        ks.dct(8, type=5)
    with pytest.raises(ValueError, match="DCT-I needs n >= 2"):
        ks.dct(1, type=1)
    with pytest.raises(ValueError, match="norm"):
        ks.dst(8, norm="inverse")
    with pytest.raises(ValueError, match="max_radix must be at least 2"):
        ks.dct(8, max_radix=1)
    with pytest.raises(TypeError, match="real matrices"):
        ks.dct(8, dtype=numpy.complex128)
    with pytest.raises(ValueError, match="positive integer"):
        ks.dst(0)
    with pytest.raises(ValueError, match="shape mismatch"):
        ks.dct(8) @ numpy.ones(9)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["auto", "kernel"])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("n", [64, 97, 1000])
@pytest.mark.parametrize("transform,oracle", TRANSFORMS, ids=["dct", "dst"])
def test_gpu_backends_poisoned(poisoned, rng, transform, oracle, n, layout, backend):
    import cupy
    X = random_array(rng, (n, 37), numpy.float64)
    for kind in (1, 2, 3, 4):
        for dtype in (numpy.float32, numpy.float64):
            op = transform(n, type=kind, norm="ortho", dtype=dtype, xp=cupy)
            Xd = cupy.asarray(X.astype(dtype) if layout == "bsl" else X.T.astype(dtype))
            ref = (oracle(X, type=kind, norm="ortho", axis=0) if layout == "bsl"
                   else oracle(X.T, type=kind, norm="ortho", axis=-1))
            assert rel_err(op.matmul(Xd, layout=layout, backend=backend), ref) < TOL[dtype]
