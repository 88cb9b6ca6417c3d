"""aslinearoperator inside real SciPy (CPU) and cupyx (GPU) solvers."""
import numpy
import pytest

import kscupy as ks
from conftest import DTYPES, RTOL, dense_oracle, random_array, rel_err, to_numpy
from operator_kinds import operator_kinds, operator_oracle


def _rtol(solver, value):
    """SciPy >= 1.12 calls the relative tolerance ``rtol``; cupyx calls it ``tol``."""
    import inspect
    name = "rtol" if "rtol" in inspect.signature(solver).parameters else "tol"
    return {name: value}


def _solvers(xp):
    if xp is numpy:
        import scipy.sparse.linalg as spla
    else:
        import cupyx.scipy.sparse.linalg as spla
    return spla


@pytest.mark.parametrize("dtype", DTYPES)
def test_operator_methods(xp, rng, dtype):
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), dtype)))
    D = dense_oracle(to_numpy(K.values))
    op = ks.aslinearoperator(K)
    assert isinstance(op, _solvers(xp).LinearOperator)
    assert op.shape == (30, 40) and op.dtype == dtype
    tol = RTOL[numpy.dtype(dtype)]
    x, y = random_array(rng, (40,), dtype), random_array(rng, (30,), dtype)
    X, Y = random_array(rng, (40, 3), dtype), random_array(rng, (30, 3), dtype)
    assert rel_err(op.matvec(xp.asarray(x)), D @ x) < tol
    assert rel_err(op.matmat(xp.asarray(x[:, None])), (D @ x)[:, None]) < tol   # a column
    assert rel_err(op.rmatvec(xp.asarray(y)), D.conj().T @ y) < tol
    assert rel_err(op.matmat(xp.asarray(X)), D @ X) < tol
    assert rel_err(op.rmatmat(xp.asarray(Y)), D.conj().T @ Y) < tol
    assert rel_err(op.H.matvec(xp.asarray(y)), D.conj().T @ y) < tol
    assert rel_err(op.T.matvec(xp.asarray(y)), D.T @ y) < tol
    assert rel_err(op @ xp.asarray(X), D @ X) < tol


def test_rejects_non_operators():
    with pytest.raises(TypeError, match="kscupy operator"):
        ks.aslinearoperator(numpy.eye(3))


def test_cg_spd(xp, rng):
    """CG on A = I + K^T K / ||K||^2 built from KS operators, against numpy.linalg.solve."""
    spla = _solvers(xp)
    K = ks.KSMatrix(xp.asarray(random_array(rng, (4, 8, 8, 4), numpy.float64)))
    D = dense_oracle(to_numpy(K.values)).real
    s = 1.0 / numpy.linalg.norm(D, 2) ** 2
    op = ks.aslinearoperator(K)
    n = K.shape[0]
    A = spla.LinearOperator((n, n), dtype=numpy.float64,
                            matvec=lambda v: v + s * op.rmatvec(op.matvec(v)))
    b = random_array(rng, (n,), numpy.float64)
    x, info = spla.cg(A, xp.asarray(b), maxiter=500, **_rtol(spla.cg, 1e-10))
    assert info == 0
    expected = numpy.linalg.solve(numpy.eye(n) + s * D.T @ D, b)
    assert rel_err(x, expected) < 1e-8


def test_gmres(xp, rng):
    """GMRES on K + 3 I (K square KS, complex) against numpy.linalg.solve."""
    spla = _solvers(xp)
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 6, 6, 3), numpy.complex128)))
    D = dense_oracle(to_numpy(K.values))
    op = ks.aslinearoperator(K)
    n = K.shape[0]
    A = spla.LinearOperator((n, n), dtype=numpy.complex128, matvec=lambda v: op.matvec(v) + 3 * v)
    b = random_array(rng, (n,), numpy.complex128)
    x, info = spla.gmres(A, xp.asarray(b), restart=n, maxiter=50, **_rtol(spla.gmres, 1e-12))
    assert info == 0
    assert rel_err(x, numpy.linalg.solve(D + 3 * numpy.eye(n), b)) < 1e-9


def test_lsmr_against_lstsq(xp, rng):
    """Least squares with a tall KS matrix (M > N)."""
    spla = _solvers(xp)
    K = ks.KSMatrix(xp.asarray(random_array(rng, (3, 8, 4, 2), numpy.float64)))   # 48 x 24
    D = dense_oracle(to_numpy(K.values)).real
    b = random_array(rng, (K.shape[0],), numpy.float64)
    x = spla.lsmr(ks.aslinearoperator(K), xp.asarray(b), atol=1e-14, btol=1e-14,
                  maxiter=1000)[0]
    expected = numpy.linalg.lstsq(D, b, rcond=None)[0]
    assert rel_err(x, expected) < 1e-8


def test_svds_top_singular_values(xp, rng):
    spla = _solvers(xp)
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 10, 8, 3), numpy.float64)))  # 60 x 48
    D = dense_oracle(to_numpy(K.values)).real
    k = 4
    s = to_numpy(spla.svds(ks.aslinearoperator(K), k=k, return_singular_vectors=False))
    expected = numpy.linalg.svd(D, compute_uv=False)[:k]
    numpy.testing.assert_allclose(numpy.sort(s)[::-1], expected, rtol=1e-8)


# -- operators handed to solvers directly (duck typing: shape, dtype, matvec, rmatvec, ...) --
def spd_ks_matrix(xp, rng, pattern=(2, 6, 6, 3)):
    """A symmetric positive definite KS matrix: with b == c the row and column shuffles of
    the block-diagonalisation are equal, so SPD blocks W W^T + b I give an SPD matrix."""
    a, b, _, d = pattern
    W = rng.standard_normal((a, d, b, b))
    blocks = W @ W.swapaxes(-1, -2) + b * numpy.eye(b)
    return ks.KSMatrix(xp.asarray(blocks.transpose(0, 2, 3, 1)))   # canonical (a, b, b, d)


def test_duck_typed_protocol(xp, rng):
    spla = _solvers(xp)
    C = operator_kinds(xp, rng, numpy.complex128)["chain"]
    D = operator_oracle(C)
    M, N = C.shape
    x, y = random_array(rng, (N,), C.dtype), random_array(rng, (M,), C.dtype)
    X, Y = random_array(rng, (N, 3), C.dtype), random_array(rng, (M, 3), C.dtype)
    assert rel_err(C.matvec(xp.asarray(x)), D @ x) < 1e-12
    assert rel_err(C.matvec(xp.asarray(x[:, None])), (D @ x)[:, None]) < 1e-12
    assert rel_err(C.rmatvec(xp.asarray(y)), D.conj().T @ y) < 1e-12
    assert rel_err(C.matmat(xp.asarray(X)), D @ X) < 1e-12
    assert rel_err(C.rmatmat(xp.asarray(Y)), D.conj().T @ Y) < 1e-12
    A = spla.aslinearoperator(C)      # the library's own adapter takes the operator as is
    assert A.shape == (M, N) and A.dtype == C.dtype
    assert rel_err(A.matvec(xp.asarray(x)), D @ x) < 1e-12
    assert rel_err(A.rmatvec(xp.asarray(y)), D.conj().T @ y) < 1e-12


def test_cg_takes_the_operator_itself(xp, rng):
    spla = _solvers(xp)
    K = spd_ks_matrix(xp, rng)
    D = operator_oracle(K).real
    assert numpy.linalg.eigvalsh(D).min() > 0
    b = random_array(rng, (K.shape[0],), numpy.float64)
    x, info = spla.cg(K, xp.asarray(b), maxiter=500, **_rtol(spla.cg, 1e-11))
    assert info == 0
    assert rel_err(x, numpy.linalg.solve(D, b)) < 1e-8


def test_gmres_takes_the_operator_itself(xp, rng):
    """GMRES on a complex chain of two well-conditioned factors (3 I + small blocks)."""
    spla = _solvers(xp)
    factors = []
    for pattern in [(2, 6, 6, 3), (3, 4, 4, 3)]:
        a, b, _, d = pattern
        blocks = 3 * numpy.eye(b) + 0.3 * (rng.standard_normal((a, d, b, b))
                                           + 1j * rng.standard_normal((a, d, b, b)))
        factors.append(ks.KSMatrix(xp.asarray(blocks.transpose(0, 2, 3, 1))))
    C = ks.KSChain(factors)
    D = operator_oracle(C)
    n = C.shape[0]
    b = random_array(rng, (n,), numpy.complex128)
    x, info = spla.gmres(C, xp.asarray(b), restart=n, maxiter=50, **_rtol(spla.gmres, 1e-12))
    assert info == 0
    assert rel_err(x, numpy.linalg.solve(D, b)) < 1e-9
