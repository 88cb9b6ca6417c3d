"""factorize: dense matrix -> KS chain, against products built from canonical values and an
independent per-block SVD oracle for the best two-factor error (CPU; CuPy as `gpu`)."""
import math

import numpy
import pytest
import scipy.linalg

import kscupy as ks
from conftest import dense_oracle, random_array, rel_err, to_numpy


def product_oracle(patterns, rng, dtype):
    """A random product of KS factors, multiplied densely in complex128 from the definition."""
    D = None
    for p in patterns:
        K = dense_oracle(random_array(rng, p, dtype))
        D = K if D is None else D @ K
    return D if numpy.dtype(dtype).kind == "c" else D.real


def best_two_factor_error(D, left, right):
    """min ||D - K1 K2||_F over K1, K2 of the two patterns: D's energy minus the top r singular
    values of each b1 x c2 sub-block, sub-blocks listed with explicit row/column formulas."""
    a1, b1, c1, d1 = left
    a2, b2, c2, d2 = right
    alpha, delta = a2 // a1, d1 // d2
    r = c1 // alpha
    captured = 0.0
    for i1 in range(a1):
        for j2 in range(d2):
            for v in range(delta):
                for u in range(alpha):
                    rows = [i1 * b1 * d1 + k1 * d1 + v * d2 + j2 for k1 in range(b1)]
                    cols = [(i1 * alpha + u) * c2 * d2 + l2 * d2 + j2 for l2 in range(c2)]
                    s = numpy.linalg.svd(D[numpy.ix_(rows, cols)], compute_uv=False)
                    captured += float(numpy.sum(s[:r] ** 2))
    return math.sqrt(max(numpy.linalg.norm(D) ** 2 - captured, 0.0))


def butterfly_patterns(n):
    L = n.bit_length() - 1
    return [(2 ** (l - 1), 2, 2, 2 ** (L - l)) for l in range(1, L + 1)]


CHAINS = {
    "butterfly32": butterfly_patterns(32),
    "butterfly256": butterfly_patterns(256),
    "monarch64_8x8": [(1, 8, 8, 8), (8, 8, 8, 1)],
    "monarch_rect": [(1, 16, 16, 4), (4, 16, 8, 1)],      # 64 x 32, rank-4 sub-blocks
    "radix4_64": [(1, 4, 4, 16), (4, 4, 4, 4), (16, 4, 4, 1)],
    "rectangular": [(1, 3, 4, 2), (2, 2, 2, 2), (4, 2, 5, 1)],   # 6 x 20, ranks 2 then 1
    "block_butterfly": [(1, 6, 6, 4), (2, 6, 6, 2), (4, 6, 6, 1)],
    "low_rank_full": [(1, 3, 4, 1), (1, 4, 5, 1)],        # r = 4 > min(3, 5)
}


@pytest.mark.parametrize("name", list(CHAINS))
@pytest.mark.parametrize("dtype", [numpy.float64, numpy.complex128, numpy.float32])
def test_recovers_products_exactly(xp, rng, name, dtype):
    patterns = CHAINS[name]
    D = product_oracle(patterns, rng, dtype)
    C = ks.factorize(xp.asarray(D.astype(dtype)), patterns)
    assert isinstance(C, ks.KSChain) and C.dtype == dtype and C.xp is xp
    assert [tuple(p) for p in C.patterns] == [tuple(p) for p in patterns]
    # on the GPU cuSOLVER's batched Jacobi SVD converges to a slightly looser tolerance
    tol = 1e-5 if dtype == numpy.float32 else (1e-12 if xp is numpy else 1e-11)
    assert rel_err(C.todense(), D) < tol


def test_recovers_hadamard_and_bit_reversed_dft(xp):
    H = scipy.linalg.hadamard(64).astype(numpy.float64)
    assert rel_err(ks.factorize(xp.asarray(H), "butterfly").todense(), H) < 1e-12
    n = 256
    F = numpy.fft.fft(numpy.eye(n), axis=0)                 # F = K_1 ... K_L Q, Q x = x[bitrev]
    Q = numpy.eye(n)[ks.bit_reversal(n)]
    B = F @ Q.T
    C = ks.factorize(xp.asarray(B), ks.dft(n).patterns)
    assert rel_err(C.todense(), B) < 1e-12


TWO_FACTORS = {"monarch64_8x8": CHAINS["monarch64_8x8"], "monarch_rect": CHAINS["monarch_rect"],
               "rectangular_rank2": [(1, 3, 4, 2), (2, 4, 10, 1)], "low_rank2": [(1, 6, 2, 1), (1, 2, 5, 1)],
               "butterfly_top": [(1, 2, 2, 16), (2, 16, 16, 1)]}


@pytest.mark.parametrize("name", list(TWO_FACTORS))
def test_two_factors_are_optimal(rng, name):
    left, right = TWO_FACTORS[name]
    D = random_array(rng, (ks.KSPattern(*left).shape[0], ks.KSPattern(*right).shape[1]),
                     numpy.float64)
    err = numpy.linalg.norm(ks.factorize(D, [left, right]).todense() - D)
    best = best_two_factor_error(D, left, right)
    assert best > 0.1 * numpy.linalg.norm(D)                # a real approximation problem
    assert abs(err - best) < 1e-10 * numpy.linalg.norm(D)


@pytest.mark.parametrize("name", ["butterfly32", "radix4_64", "rectangular", "block_butterfly"])
def test_error_within_sqrt_L_minus_1_of_the_best(rng, name):
    """||D - C|| <= sqrt(L-1) * best, checked through the two-factor relaxations: every chain
    is a product (beta_1..beta_k)(beta_k+1..beta_L), so each relaxation's optimum e*_k is a
    lower bound of the best error; the algorithm's error satisfies err^2 <= sum_k e*_k^2."""
    patterns = CHAINS[name]
    pats = [ks.KSPattern(*p) for p in patterns]
    M, N = pats[0].shape[0], pats[-1].shape[1]
    # rows and columns of very different scales: an algorithm that does not keep its left
    # factors orthonormal amplifies later errors and breaks the bound on such matrices
    D = (random_array(rng, (M, N), numpy.float64) * numpy.exp(rng.uniform(-5, 5, (M, 1)))
         * numpy.exp(rng.uniform(-5, 5, (1, N))))
    err = numpy.linalg.norm(ks.factorize(D, patterns).todense() - D)
    relaxed = []
    for k in range(1, len(pats)):
        prefix, suffix = pats[0], pats[-1]
        for p in pats[1:k]:
            prefix = ks.transforms.factorization.product_pattern(prefix, p)
        for p in reversed(pats[k:-1]):
            suffix = ks.transforms.factorization.product_pattern(p, suffix)
        relaxed.append(best_two_factor_error(D, prefix, suffix))
    assert err >= max(relaxed) * (1 - 1e-10)                # no chain beats a relaxation
    assert err ** 2 <= sum(e ** 2 for e in relaxed) * (1 + 1e-10)
    assert err <= math.sqrt(len(pats) - 1) * max(relaxed) * (1 + 1e-10)


@pytest.mark.parametrize("name", ["butterfly256", "monarch64_8x8", "radix4_64"])
def test_perturbed_product_error_of_the_order_of_the_perturbation(xp, rng, name):
    patterns = CHAINS[name]
    P = product_oracle(patterns, rng, numpy.complex128)
    noise = random_array(rng, P.shape, numpy.complex128)
    eps = 1e-6
    D = P + eps * numpy.linalg.norm(P) / numpy.linalg.norm(noise) * noise
    C = ks.factorize(xp.asarray(D), patterns)
    # best <= ||D - P|| = eps ||P||, and the algorithm is within sqrt(L-1) of the best
    assert rel_err(C.todense(), D) <= math.sqrt(len(patterns) - 1) * eps * 1.0001
    assert rel_err(C.todense(), P) <= 2 * math.sqrt(len(patterns)) * eps


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_clear_errors():
    D = numpy.random.default_rng(0).standard_normal((18, 18))
    with pytest.raises(ValueError, match=r"do not chain.*a2/a1 divides c1"):
        ks.factorize(D, [(1, 6, 2, 3), (3, 2, 6, 1)])
    with pytest.raises(ValueError, match=r"pattern 0 \(1, 2, 2, 4\) does not chain"):
        ks.factorize(numpy.ones((8, 8)), [(1, 2, 2, 4), (4, 2, 2, 1)])
    with pytest.raises(ValueError, match=r"patterns 0 and 1 cannot be multiplied.*8 columns.*4 rows"):
        ks.factorize(numpy.ones((8, 4)), [(1, 2, 2, 4), (1, 4, 4, 1)])
    with pytest.raises(ValueError, match=r"D has shape \(18, 18\) but the chain of patterns has "
                                         r"shape \(16, 16\)"):
        ks.factorize(D, butterfly_patterns(16))
    with pytest.raises(ValueError, match="power of two"):
        ks.factorize(D, "butterfly")
    with pytest.raises(ValueError, match="power of two"):
        ks.factorize(numpy.ones((8, 16)), "butterfly")
    with pytest.raises(ValueError, match="monarch"):
        ks.factorize(D, "monarch")
    with pytest.raises(ValueError, match="patterns is empty"):
        ks.factorize(D, [])
    with pytest.raises(TypeError, match=r"wrap the single pattern \(1, 2, 2, 1\)"):
        ks.factorize(numpy.ones((2, 2)), (1, 2, 2, 1))
    with pytest.raises(TypeError, match="patterns must be a sequence of patterns"):
        ks.factorize(D, None)
    with pytest.raises(ValueError, match="non-empty matrix"):
        ks.factorize(numpy.ones((0, 0)), "butterfly")
    with pytest.raises(ValueError, match="2-D"):
        ks.factorize(numpy.ones((2, 2, 2)), [(1, 2, 2, 1)])
    with pytest.raises(TypeError, match="unsupported dtype"):
        ks.factorize(numpy.ones((4, 4), dtype=numpy.int64), "butterfly")
    with pytest.raises(TypeError, match="a list as matrix to factorize"):
        ks.factorize([[1.0, 2.0], [3.0, 4.0]], "butterfly")
    H = ks.hadamard(4).todense()
    with pytest.raises(TypeError, match="masked array as matrix to factorize"):
        ks.factorize(numpy.ma.masked_array(H, H > 0), "butterfly")
    with pytest.raises(TypeError, match=r"numpy.matrix as matrix to factorize: pass numpy.asarray"):
        ks.factorize(numpy.matrix(H), "butterfly")
    for bad in (numpy.nan, numpy.inf, -numpy.inf):
        H = ks.hadamard(8).todense()
        H[3, 5] = bad
        with pytest.raises(ValueError, match="NaN or infinity"):
            ks.factorize(H, "butterfly")


def test_float16_matrices_factorize_in_float32(rng):
    # a float16 product of butterflies comes back exact to float16 rounding, as float16
    C = ks.butterfly(16, dtype=numpy.float16, seed=int(rng.integers(2**31)))
    D = C.todense()
    got = ks.factorize(D, "butterfly")
    assert got.dtype == numpy.float16 and all(f.dtype == numpy.float16 for f in got.factors)
    assert rel_err(got.todense(), D.astype(numpy.float64)) < 1e-2


def test_single_pattern_is_the_projection(rng):
    D = random_array(rng, (12, 12), numpy.float64)
    C = ks.factorize(D, [(2, 3, 3, 2)])
    support = to_numpy(ks.KSPattern(2, 3, 3, 2).support()).astype(bool)
    numpy.testing.assert_allclose(C.todense(), numpy.where(support, D, 0), atol=1e-15)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["auto", "kernel"])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("name", ["butterfly256", "monarch64_8x8", "radix4_64"])
def test_factorized_chains_on_gpu_backends_poisoned(poisoned, rng, name, layout, backend):
    import cupy
    patterns = CHAINS[name]
    for dtype in (numpy.float32, numpy.complex128):
        D = product_oracle(patterns, rng, dtype)
        C = ks.factorize(cupy.asarray(D.astype(dtype)), patterns)
        X = random_array(rng, (D.shape[1], 37), dtype)
        Xd = cupy.asarray(X if layout == "bsl" else X.T)
        ref = D @ X if layout == "bsl" else (D @ X).T
        tol = 1e-4 if dtype == numpy.float32 else 1e-11
        assert rel_err(C.matmul(Xd, layout=layout, backend=backend), ref) < tol
