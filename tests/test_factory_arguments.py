"""Every factory, thrown random arguments (sizes of every type and sign, dtypes, norms,
radices), either builds the right operator (against numpy.fft, scipy.fft and
scipy.linalg.hadamard) or raises a TypeError / ValueError before computing anything."""
import numpy
import pytest
import scipy.fft
import scipy.linalg
from hypothesis import given, settings, strategies as st

import kscupy as ks
from conftest import rel_err

SIZES = st.one_of(st.integers(-3, 40), st.sampled_from([True, 2.0, 8.5, "8", None,
                                                        numpy.int64(12), numpy.uint8(6)]))
DTYPES = st.sampled_from([numpy.float16, numpy.float32, numpy.float64, numpy.complex64,
                          numpy.complex128, numpy.int32, bool, object, "float32", "bogus"])
NORMS = st.sampled_from([None, "backward", "ortho", "forward", "unitary", 1])


def right_or_clear(build, oracle):
    """``build()`` matches the dense ``oracle()`` or raises TypeError / ValueError."""
    try:
        op = build()
    except (TypeError, ValueError) as exc:
        assert str(exc)
        return
    D = oracle(op)
    tol = 1e-2 if op.dtype in (numpy.float16,) else (
        1e-5 if op.dtype in (numpy.float32, numpy.complex64) else 1e-10)
    assert rel_err(op.todense(), D) < tol


def _size(n):
    return int(n)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(n=SIZES, dtype=DTYPES, norm=NORMS, inverse=st.booleans(),
       max_radix=st.sampled_from([64, 2, 3, 0, -1, 1.5, "64"]))
def test_dft(n, dtype, norm, inverse, max_radix):
    def oracle(op):
        m = _size(n)
        transform = numpy.fft.ifft if inverse else numpy.fft.fft
        return transform(numpy.eye(m), axis=0, norm=norm)
    right_or_clear(lambda: ks.dft(n, dtype=dtype, norm=norm, inverse=inverse,
                                  max_radix=max_radix), oracle)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(n=SIZES, dtype=DTYPES, norm=NORMS, kind=st.sampled_from([1, 2, 3, 4, 0, 5, "2", True]),
       sine=st.booleans())
def test_dct_and_dst(n, dtype, norm, kind, sine):
    transform = ks.dst if sine else ks.dct
    reference = scipy.fft.dst if sine else scipy.fft.dct
    right_or_clear(lambda: transform(n, type=kind, norm=norm, dtype=dtype),
                   lambda op: reference(numpy.eye(_size(n)), type=kind, norm=norm, axis=0))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(n=SIZES, dtype=DTYPES, normalized=st.booleans())
def test_hadamard(n, dtype, normalized):
    def oracle(op):
        H = scipy.linalg.hadamard(_size(n)).astype(numpy.float64)
        return H / numpy.sqrt(_size(n)) if normalized else H
    right_or_clear(lambda: ks.hadamard(n, normalized=normalized, dtype=dtype), oracle)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(M=SIZES, N=SIZES, r=SIZES, dtype=DTYPES, which=st.sampled_from(
    ["butterfly", "block_butterfly", "monarch", "low_rank"]))
def test_random_factories(M, N, r, dtype, which):
    # random values: right means the shape, dtype and chain the arguments ask for
    build = {"butterfly": lambda: ks.butterfly(M, dtype=dtype, seed=0),
             "block_butterfly": lambda: ks.block_butterfly(M, r, dtype=dtype, seed=0),
             "monarch": lambda: ks.monarch(M, N, dtype=dtype, seed=0),
             "low_rank": lambda: ks.low_rank(M, N, r, dtype=dtype, seed=0)}[which]
    try:
        op = build()
    except (TypeError, ValueError) as exc:
        assert str(exc)
        return
    assert op.dtype == numpy.dtype(dtype)
    assert numpy.isfinite(op.todense()).all()
    if which == "low_rank":
        assert op.shape == (M, N) and numpy.linalg.matrix_rank(op.todense()) <= r
    elif which == "monarch":
        assert op.shape == (M, N if N is not None else M)
    elif which == "butterfly":
        assert op.shape == (M, M)


# -- flags, argument types, sizes too large to search ---------------------------------------
@pytest.mark.parametrize("make", [lambda v: ks.hadamard(4, normalized=v),
                                  lambda v: ks.dft(12, inverse=v),
                                  lambda v: ks.DFTStage(twiddled=v)])
@pytest.mark.parametrize("value", ["no", 0, 1, None, numpy.array([True])])
def test_flags_take_bools_only(make, value):
    """A string such as "no" would read as true: flags take True or False only."""
    with pytest.raises(TypeError, match="must be True or False"):
        make(value)


def test_numpy_bools_are_flags():
    numpy.testing.assert_allclose(ks.hadamard(4, normalized=numpy.True_).todense(),
                                  ks.hadamard(4, normalized=True).todense())


@pytest.mark.parametrize("make", [ks.hadamard, ks.dft, ks.dct, lambda n: ks.monarch(n),
                                  lambda n: ks.low_rank(8, 4, n), lambda n: ks.butterfly(n)])
@pytest.mark.parametrize("bad", [8.0, "8", None, numpy.array([8]), True])
def test_sizes_of_another_type_are_type_errors(make, bad):
    with pytest.raises(TypeError, match="positive integer"):
        make(bad)


@pytest.mark.parametrize("make", [ks.dft, ks.dct, ks.monarch, lambda n: ks.dft(n, max_radix=2)])
@pytest.mark.parametrize("n", [2**61 - 1, 10**18])
def test_huge_sizes_fail_fast(make, n):
    """A size whose values cannot fit raises MemoryError from the lower bound checked before
    any factor search (which for these sizes would run for minutes)."""
    with pytest.raises(MemoryError, match="at least"):
        make(n)


def test_plan_tune_and_dottest_check_their_arguments():
    C = ks.dft(16)
    with pytest.raises(ValueError, match="layout must be one of"):
        C.plan("foo", numpy.complex64, 64)
    with pytest.raises(TypeError, match="unsupported dtype int32"):
        C.plan("bsl", numpy.int32, 64)
    for bad, error in ((-1, ValueError), (0, ValueError), (2.5, TypeError)):
        with pytest.raises(error, match="batch must be a positive integer"):
            C.plan("bsl", numpy.complex64, bad)
    K = ks.KSMatrix.random((1, 2, 2, 1))
    with pytest.raises(TypeError, match="backend must be a string"):
        K.matmul(numpy.ones((2, 1), numpy.float32), backend=1)
    with pytest.raises(TypeError, match="dottest needs an operator"):
        ks.testing.dottest(numpy.eye(3))
    if ks.core.arrays.cupy_or_none() is None:
        with pytest.raises(RuntimeError, match="tune times kernels on a GPU"):
            ks.tune(K, 64)
    else:
        with pytest.raises(TypeError, match="CuPy values"):
            ks.tune(K, 64)


def test_pattern_tiles_take_integer_indices():
    with pytest.raises(TypeError):
        ks.KSPattern(2, 3, 4, 5).tile(0.5, 0)
    rows, cols = ks.KSPattern(2, 3, 4, 5).tile(numpy.int64(1), 2)
    assert rows.tolist() == [17, 22, 27] and cols.tolist() == [22, 27, 32, 37]


def test_choose_pattern_of_a_large_shape_enumerates_divisors_once():
    """2^40 has 41 divisors: the search is over pairs of them, not over every integer."""
    assert ks.choose_pattern(2**40, 2**40) == ks.KSPattern(1, 2**36, 2**36, 16)


def test_second_review_errors_name_the_mistake():
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.float64)
    with pytest.raises(TypeError, match="of an integer dtype"):
        ks.inverse_permutation([2, 0, 1])
    with pytest.raises(TypeError, match="density must be a number"):
        ks.choose_pattern(64, 64, "0.1")
    with pytest.raises(TypeError, match="no float16 CSR"):
        K.astype(numpy.float16).tocsr()
    with pytest.raises(TypeError, match=r"KSChain\(\[K\]\)"):
        ks.KSChain(K)
    with pytest.raises(ValueError, match="rtol must be a positive number"):
        ks.testing.dottest(K, rtol=-1)
    with pytest.raises(TypeError, match="xp must be numpy or cupy"):
        ks.testing.dottest(K, xp="cupy")
    for make in (lambda: ks.perfect_shuffle(2**30, 2**30), lambda: ks.bit_reversal(2**40),
                 lambda: ks.perfect_shuffle_matrix(2**16, 2**16)):
        with pytest.raises(MemoryError, match="need"):
            make()


def test_fractions_and_decimals_scale():
    import decimal
    import fractions
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.float64, seed=1)
    X = numpy.random.default_rng(2).standard_normal((K.shape[1], 3))
    D = K.todense()
    assert rel_err((K * fractions.Fraction(1, 3)) @ X, D @ X / 3) < 1e-12
    assert rel_err((decimal.Decimal("0.5") * K) @ X, D @ X * 0.5) < 1e-12
    assert (K * fractions.Fraction(1, 3)).dtype == numpy.float64


@pytest.mark.parametrize("make", [
    lambda seed: ks.KSMatrix.random((1, 2, 2, 1), seed=seed),
    lambda seed: ks.butterfly(16, seed=seed),
    lambda seed: ks.monarch(16, blocks=4, seed=seed),
    lambda seed: ks.testing.dottest(ks.butterfly(8, seed=0), seed=seed)])
@pytest.mark.parametrize("seed", [-1, 1.5, True, "x"])
def test_a_bad_seed_is_named(make, seed):
    with pytest.raises(ValueError, match="seed must be None or a non-negative integer"):
        make(seed)


def test_shuffle_utilities_name_their_array_arguments():
    with pytest.raises(ValueError, match="must be a 1-D integer array, got shape"):
        ks.inverse_permutation(numpy.array([[1, 0], [2, 3]]))
    with pytest.raises(TypeError, match="pass numpy.asarray"):
        ks.block_diagonalize(numpy.eye(4).tolist(), (1, 2, 2, 2))
