"""KSChain and the transform factories against dense float64 oracles (CPU; CuPy as `gpu`)."""
import numpy
import pytest
import scipy.linalg
from hypothesis import given, settings, strategies as st

import kscupy as ks
from operator_kinds import operator_oracle
from conftest import DTYPES, RTOL, dense_oracle, random_array, rel_err, to_numpy


def compatible_patterns(rng, count):
    """Random chainable patterns: factor l+1 has as many rows as factor l has columns."""
    patterns = []
    a, b, c, d = (int(v) for v in rng.integers(1, 4, size=4))
    patterns.append((a, b, c, d))
    for _ in range(count - 1):
        n_cols = a * c * d
        divisors = [q for q in range(1, n_cols + 1) if n_cols % q == 0]
        a2 = int(rng.choice([q for q in divisors if q <= 4]))
        rest = n_cols // a2
        d2 = int(rng.choice([q for q in range(1, rest + 1) if rest % q == 0 and q <= 4]))
        b2 = rest // d2
        c2 = int(rng.integers(1, 4))
        a, b, c, d = a2, b2, c2, d2
        patterns.append((a, b, c, d))
    return patterns


chain_oracle = operator_oracle   # the dense product from the definition


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [2, 3, 4, 6])
def test_chain_against_dense_product(xp, rng, dtype, length):
    patterns = compatible_patterns(rng, length)
    C = ks.KSChain([ks.KSMatrix(xp.asarray(random_array(rng, p, dtype))) for p in patterns])
    D = chain_oracle(C)
    M, N = C.shape
    assert C.shape == D.shape and C.dtype == dtype and len(C) == length
    assert C.nnz == sum(ks.KSPattern(*p).nnz for p in patterns)
    tol = RTOL[numpy.dtype(dtype)] * 10
    X = random_array(rng, (N, 5), dtype)
    assert rel_err(C @ xp.asarray(X), D @ X) < tol
    assert rel_err(xp.asarray(X.T) @ C.T, X.T @ D.T) < tol
    assert rel_err(C @ xp.asarray(X[:, 0]), D @ X[:, 0]) < tol
    Z = random_array(rng, (4, M), dtype)
    assert rel_err(xp.asarray(Z) @ C, Z @ D) < tol
    assert rel_err(C.H @ xp.asarray(Z.T), D.conj().T @ Z.T) < tol
    numpy.testing.assert_allclose(to_numpy(C.todense()), D, rtol=tol, atol=tol * numpy.abs(D).max())


def test_chain_views_share_values(rng):
    C = ks.dft(12, dtype=numpy.complex128)
    for view in (C.T, C.H, C.conj()):
        assert all(any(v.factor.tiles is f.factor.tiles for f in C.factors) for v in view.factors)
    D = chain_oracle(C)
    numpy.testing.assert_allclose(C.T.todense(), D.T, atol=1e-12)
    numpy.testing.assert_allclose(C.H.todense(), D.conj().T, atol=1e-12)


def test_products_give_chains(rng):
    K1 = ks.KSMatrix(random_array(rng, (1, 4, 2, 2), numpy.float64))
    K2 = ks.KSMatrix(random_array(rng, (2, 2, 4, 1), numpy.float64))
    K3 = ks.KSMatrix(random_array(rng, (1, 8, 8, 1), numpy.float64))
    P = K1 @ K2
    assert isinstance(P, ks.KSChain) and P.patterns == ((1, 4, 2, 2), (2, 2, 4, 1))
    Q = P @ K3
    R = K3 @ P
    assert isinstance(Q, ks.KSChain) and len(Q) == 3 and len(R) == 3 and len(P @ P) == 4
    D1, D2, D3 = (dense_oracle(K.values).real for K in (K1, K2, K3))
    numpy.testing.assert_allclose(Q.todense(), D1 @ D2 @ D3, atol=1e-12)
    numpy.testing.assert_allclose(R.todense(), D3 @ D1 @ D2, atol=1e-12)
    F = ks.dft(8)    # F = K1 K2 K3 Q with the digit reversal Q on the right
    G = ks.KSMatrix.random((1, 8, 8, 1), dtype=numpy.complex128) @ F
    assert len(G) == 4 and numpy.array_equal(G.input_permutation, F.input_permutation)
    with pytest.raises(ValueError, match="permutation between them"):
        F @ ks.KSMatrix.random((1, 8, 8, 1), dtype=numpy.complex128)


def test_incompatible_chains_refused():
    K1 = ks.KSMatrix.random((2, 3, 4, 1))
    K2 = ks.KSMatrix.random((1, 5, 2, 1))
    with pytest.raises(ValueError, match=r"factors 0 and 1 cannot be chained.*8 columns.*5 rows"):
        ks.KSChain([K1, K2])
    with pytest.raises(ValueError, match="cannot be chained"):
        K1 @ K2
    with pytest.raises(ValueError, match="at least one factor"):
        ks.KSChain([])
    with pytest.raises(TypeError, match="KSMatrix or KSChain"):
        ks.KSChain([numpy.eye(3)])
    with pytest.raises(ValueError, match="not a permutation"):
        ks.KSChain([K1], input_permutation=numpy.zeros(8, dtype=numpy.int64))
    with pytest.raises(ValueError, match=r"shape \(8,\)"):
        ks.KSChain([K1], input_permutation=numpy.arange(7))
    C = ks.KSChain([K1])
    with pytest.raises(ValueError, match="shape mismatch"):
        C @ numpy.ones(7)
    with pytest.raises(ValueError, match="layout"):
        C.matmul(numpy.ones(8), layout="x")
    with pytest.raises(TypeError, match="todense"):
        numpy.asarray(C)


def test_chain_dtype_promotes_across_factors(rng):
    C = ks.KSChain([ks.KSMatrix(random_array(rng, (1, 3, 2, 1), numpy.float32)),
                    ks.KSMatrix(random_array(rng, (1, 2, 4, 1), numpy.complex64))])
    assert C.dtype == numpy.complex64
    assert (C @ numpy.ones(4, dtype=numpy.float32)).dtype == numpy.complex64
    assert (C @ numpy.ones(4, dtype=numpy.float64)).dtype == numpy.complex128
    assert C.nbytes == 3 * 2 * 4 + 2 * 4 * 8


# -- transforms -----------------------------------------------------------------------------
DFT_SIZES = [1, 2, 4, 8, 64, 1024, 4096, 6, 12, 60, 360, 1000, 7, 49]


@pytest.mark.parametrize("n", DFT_SIZES)
@pytest.mark.parametrize("dtype", [numpy.complex128, numpy.complex64])
def test_dft_matches_numpy_fft(xp, rng, n, dtype):
    F = ks.dft(n, dtype=dtype, xp=xp)
    X = random_array(rng, (n, 3), numpy.complex128)
    tol = 1e-12 if dtype == numpy.complex128 else 1e-5
    Xc = xp.asarray(X.astype(dtype))
    assert rel_err(F @ Xc, numpy.fft.fft(X, axis=0)) < tol
    assert rel_err(xp.asarray(X.T.astype(dtype)) @ F.T, numpy.fft.fft(X.T, axis=-1)) < tol
    for norm in ("ortho", "forward"):
        assert rel_err(ks.dft(n, dtype=dtype, norm=norm, xp=xp) @ Xc,
                       numpy.fft.fft(X, axis=0, norm=norm)) < tol
    for norm in (None, "ortho", "forward"):
        assert rel_err(ks.idft(n, dtype=dtype, norm=norm, xp=xp) @ Xc,
                       numpy.fft.ifft(X, axis=0, norm=norm)) < tol


def test_dft_patterns_and_errors():
    assert ks.dft(8).patterns == ((1, 2, 2, 4), (2, 2, 2, 2), (4, 2, 2, 1))
    assert [tuple(p) for p in ks.dft(60).patterns] == [(1, 2, 2, 30), (2, 2, 2, 15),
                                                     (4, 3, 3, 5), (12, 5, 5, 1)]
    with pytest.raises(TypeError, match="complex dtype"):
        ks.dft(8, dtype=numpy.float64)
    with pytest.raises(ValueError, match="prime factor 67"):
        ks.transforms.radix_factors(67)
    assert isinstance(ks.dft(67), ks.KSSubmatrix)      # a prime above max_radix: Bluestein
    assert len(ks.dft(67, max_radix=67)) == 1
    with pytest.raises(ValueError, match="positive integer"):
        ks.dft(0)
    with pytest.raises(ValueError, match="norm"):
        ks.dft(8, norm="unitary")
    for bad in (0, 1, -3):
        with pytest.raises(ValueError, match="max_radix"):
            ks.dft(12, max_radix=bad)
        with pytest.raises(ValueError, match="max_radix"):
            ks.transforms.radix_factors(12, max_radix=bad)
    for bad in (2.5, "64", None, True):
        with pytest.raises(TypeError, match="max_radix must be a positive integer"):
            ks.idft(12, max_radix=bad)


@pytest.mark.parametrize("n", [1, 2, 16, 256])
def test_hadamard(xp, n):
    H = ks.hadamard(n, xp=xp)
    numpy.testing.assert_array_equal(to_numpy(H.todense()), scipy.linalg.hadamard(n))
    Hn = ks.hadamard(n, normalized=True, xp=xp)
    numpy.testing.assert_allclose(to_numpy(Hn.todense()), scipy.linalg.hadamard(n) / numpy.sqrt(n),
                                  atol=1e-14)
    with pytest.raises(ValueError, match="power of two"):
        ks.hadamard(12)


def test_structured_factories_shapes_and_patterns():
    B = ks.butterfly(16, seed=0)
    assert B.shape == (16, 16) and B.patterns == ((1, 2, 2, 8), (2, 2, 2, 4), (4, 2, 2, 2), (8, 2, 2, 1))
    BB = ks.block_butterfly(24, 3, seed=0)
    assert BB.shape == (24, 24) and BB.patterns == ((1, 6, 6, 4), (2, 6, 6, 2), (4, 6, 6, 1))
    Mo = ks.monarch(64, 256, blocks=8, seed=0)
    assert Mo.shape == (64, 256) and Mo.patterns == ((1, 8, 8, 8), (8, 8, 32, 1))
    assert ks.monarch(256, blocks=16).patterns == ((1, 16, 16, 16), (16, 16, 16, 1))
    LR = ks.low_rank(30, 20, 4, seed=0)
    assert LR.shape == (30, 20) and numpy.linalg.matrix_rank(LR.todense()) == 4
    with pytest.raises(ValueError, match="divide"):
        ks.monarch(64, 64, blocks=6)
    with pytest.raises(ValueError, match="t to divide n"):
        ks.block_butterfly(20, 3)


@settings(max_examples=30, deadline=None)
@given(M=st.integers(1, 64), N=st.integers(1, 64), density=st.floats(0.01, 1.0))
def test_choose_pattern_rule(M, N, density):
    import math
    try:
        p = ks.choose_pattern(M, N, density)
    except ValueError:
        assert all(q * density < 1 - 1e-12 for q in range(1, math.gcd(M, N) + 1)
                   if math.gcd(M, N) % q == 0)
        return
    assert p.shape == (M, N) and p.density <= density + 1e-12
    # no admissible pattern has a larger density (the most expressive one is chosen)
    g = math.gcd(M, N)
    assert all(1 / q <= p.density + 1e-12 for q in range(1, g + 1)
               if g % q == 0 and q * density >= 1 - 1e-12)


def test_gmres_with_dft_chain(xp, rng):
    """Solve (F/sqrt(n) + 2 I) x = b with GMRES through aslinearoperator."""
    if xp is numpy:
        import scipy.sparse.linalg as spla
    else:
        import cupyx.scipy.sparse.linalg as spla
    import inspect
    n = 64
    op = ks.aslinearoperator(ks.dft(n, norm="ortho", xp=xp))
    A = spla.LinearOperator((n, n), dtype=numpy.complex128, matvec=lambda v: op.matvec(v) + 2 * v)
    b = random_array(rng, (n,), numpy.complex128)
    tol = {"rtol" if "rtol" in inspect.signature(spla.gmres).parameters else "tol": 1e-12}
    x, info = spla.gmres(A, xp.asarray(b), restart=n, maxiter=20, **tol)
    assert info == 0
    Fd = numpy.fft.fft(numpy.eye(n), axis=0, norm="ortho")
    assert rel_err(x, numpy.linalg.solve(Fd + 2 * numpy.eye(n), b)) < 1e-9


def test_transpose_and_adjoint_round_trip_to_the_same_chain():
    """``X @ C.T`` applies ``C.T.T``: it must be C itself, whose plans are cached."""
    C = ks.dft(16)
    assert C.T.T is C and C.H.H is C and C.T is C.T
    X = numpy.random.default_rng(0).standard_normal((3, 16))
    numpy.testing.assert_allclose(X @ C.T, numpy.fft.fft(X, axis=-1), atol=1e-12)


def test_monarch_block_count_is_unambiguous(rng):
    """monarch(64, 8) is how the Monarch paper names a 64 x 64 matrix of 8 blocks: it must
    not silently build a 64 x 8 matrix."""
    with pytest.raises(TypeError, match=r"monarch\(64, blocks=8\)"):
        ks.monarch(64, 8)
    square = ks.monarch(64, blocks=8, dtype=numpy.float64, seed=int(rng.integers(2**31)))
    assert square.shape == (64, 64) and square.patterns == ((1, 8, 8, 8), (8, 8, 8, 1))
    assert ks.monarch(64).patterns == square.patterns          # sqrt(n) blocks by default
    assert ks.monarch(48).patterns == ((1, 8, 8, 6), (6, 8, 8, 1))
    # M = P^T L P R with L, R block diagonal (8 blocks of 8 x 8), from the factors' blocks
    Lf, Rf = square.factors
    D = chain_oracle(square)
    P = numpy.eye(64)[numpy.arange(64).reshape(8, 8).T.ravel()]       # perfect shuffle P_{8,8}
    L = scipy.linalg.block_diag(*[Lf.values[0, :, :, j] for j in range(8)])
    R = scipy.linalg.block_diag(*[Rf.values[i, :, :, 0] for i in range(8)])
    numpy.testing.assert_allclose(D, P.T @ L @ P @ R, atol=1e-12)
    with pytest.raises(ValueError, match="blocks to divide"):
        ks.monarch(64, 256, blocks=3)
    with pytest.raises(ValueError, match="positive integer"):
        ks.monarch(64, blocks=0)


def test_low_rank_validates_rank(rng):
    LR = ks.low_rank(30, 20, 20, dtype=numpy.float64, seed=int(rng.integers(2**31)))
    assert numpy.linalg.matrix_rank(chain_oracle(LR)) == 20
    with pytest.raises(ValueError, match=r"r <= min\(M, N\) = 20, got r=21"):
        ks.low_rank(30, 20, 21)


@pytest.mark.parametrize("build", [lambda: ks.hadamard(2**30), lambda: ks.butterfly(2**34),
                                   lambda: ks.monarch(2**40, blocks=2**20),
                                   lambda: ks.low_rank(2**40, 2**40, 2**10),
                                   lambda: ks.dft(2**30), lambda: ks.dft(67 * 2**27)],
                         ids=["hadamard", "butterfly", "monarch", "low_rank", "dft",
                              "dft_bluestein"])
def test_factories_refuse_what_cannot_fit(build):
    with pytest.raises(MemoryError, match=r"need [\d,.]+ GiB but only [\d,.]+ GiB of host memory"):
        build()


def test_random_and_todense_refuse_what_cannot_fit():
    with pytest.raises(MemoryError, match="GiB of host memory"):
        ks.KSMatrix.random((2**20, 2**10, 2**10, 1))
    K = ks.KSMatrix(numpy.ones((2**16, 1, 1, 2**4), dtype=numpy.float32))   # 2^20 x 2^20
    with pytest.raises(MemoryError, match="GiB of host memory"):
        K.todense()


def test_chain_todense_refuses_what_cannot_fit():
    C = ks.KSChain([ks.KSMatrix(numpy.ones((2**16, 1, 1, 2**4), dtype=numpy.float32))] * 2)
    with pytest.raises(MemoryError, match="GiB of host memory"):
        C.todense()


@pytest.mark.parametrize("host_elements", [0, 1 << 16], ids=["on_device", "on_host"])
def test_permutations_checked_on_either_side(xp, rng, monkeypatch, host_elements):
    # small CuPy permutations are checked on the host, larger ones with CuPy: both refuse
    # what is no permutation and keep what is one
    from kscupy.core import arrays
    monkeypatch.setattr(arrays, "HOST_ELEMENTS", host_elements)
    K = ks.KSMatrix.random((2, 4, 4, 8), xp=xp, seed=0)
    perm = rng.permutation(64)
    C = ks.KSChain([K], input_permutation=xp.asarray(perm))
    numpy.testing.assert_array_equal(to_numpy(C.input_permutation), perm)
    bad = perm.copy()
    bad[3] = bad[4]
    with pytest.raises(ValueError, match="not a permutation"):
        ks.KSChain([K], input_permutation=xp.asarray(bad))
