"""Scalar multiples and sums of KS operators against float64 oracles (NumPy; CuPy as `gpu`)."""
import numpy
import pytest

import kscupy as ks
from conftest import RTOL, random_array, rel_err, to_numpy
from operator_kinds import KIND_NAMES, operator_kinds, operator_oracle


def check_applies(op, D, xp, rng):
    X = random_array(rng, (op.shape[1], 3), op.dtype)
    assert rel_err(op @ xp.asarray(X), D @ X) < RTOL[numpy.dtype(op.dtype)] * 10
    assert rel_err(op.todense(), D) < RTOL[numpy.dtype(op.dtype)] * 10


@pytest.mark.parametrize("kind", KIND_NAMES)
@pytest.mark.parametrize("dtype", [numpy.float64, numpy.complex64])
def test_scalar_multiples(xp, rng, kind, dtype):
    op = operator_kinds(xp, rng, dtype)[kind]
    D = operator_oracle(op)
    alpha = float(rng.uniform(0.5, 2.0))
    for result, expected in ((alpha * op, alpha * D), (op * alpha, alpha * D),
                             (op / alpha, D / alpha), (-op, -D)):
        assert type(result) is type(op) and result.dtype == op.dtype and result.xp is xp
        check_applies(result, D=expected, xp=xp, rng=rng)
    if isinstance(op, ks.KSRealPart):   # alpha Re(W) is complex: no longer a real part
        with pytest.raises(TypeError, match="real numbers"):
            op * 1.5j
    else:
        check_applies(op * 1.5j, 1.5j * D, xp, rng)
    check_applies(op, D, xp, rng)      # the operator itself is unchanged


def test_chain_scaling_scales_one_factor(rng):
    C = operator_kinds(numpy, rng, numpy.float64)["chain"]
    S = 3.0 * C
    numpy.testing.assert_array_equal(S.factors[0].values, 3.0 * C.factors[0].values)
    for scaled_factor, factor in zip(S.factors[1:], C.factors[1:]):
        assert scaled_factor is factor
    T = ks.dft(12) / 4
    numpy.testing.assert_array_equal(T.input_permutation, ks.dft(12).input_permutation)


@pytest.mark.parametrize("dtype, alpha, expected", [
    (numpy.float32, 2.5, numpy.float32),
    (numpy.float32, 3, numpy.float32),
    (numpy.float32, 1j, numpy.complex64),
    (numpy.float64, 1j, numpy.complex128),
    (numpy.complex64, 2.0, numpy.complex64),
])
def test_python_scalars_keep_the_operator_precision(rng, dtype, alpha, expected):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 1), dtype))
    assert (alpha * K).dtype == expected and (K / alpha).dtype == expected
    assert (alpha * ks.KSChain([K, K.T])).dtype == expected


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64, numpy.complex64])
@pytest.mark.parametrize("alpha", [numpy.float64(2.0), numpy.float32(2.0), numpy.complex128(1j),
                                   numpy.int64(3)])
def test_numpy_scalars_follow_numpy_promotion(rng, dtype, alpha):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 1), dtype))
    expected = (numpy.ones(3, dtype=dtype) * alpha).dtype     # what a NumPy array does
    assert (alpha * K).dtype == expected
    assert rel_err((alpha * K).todense(), complex(alpha) * operator_oracle(K)) < RTOL[expected]


@pytest.mark.parametrize("dtype1, dtype2", [(numpy.float32, numpy.float32),
                                            (numpy.float32, numpy.complex128),
                                            (numpy.complex64, numpy.float64)])
def test_sums_and_differences(xp, rng, dtype1, dtype2):
    K1 = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), dtype1)))
    K2 = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), dtype2)))
    D1, D2 = operator_oracle(K1), operator_oracle(K2)
    expected_dtype = numpy.result_type(dtype1, dtype2)
    for result, expected in ((K1 + K2, D1 + D2), (K1 - K2, D1 - D2), (K2 - K1, D2 - D1),
                             (K1.T + K2.T, (D1 + D2).T), (K1.H - K2.H, (D1 - D2).conj().T)):
        assert isinstance(result, ks.KSMatrix) and result.dtype == expected_dtype
        check_applies(result, expected, xp, rng)


def test_bad_arithmetic_raises(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float32))
    C = operator_kinds(numpy, rng, numpy.float32)["chain"]
    with pytest.raises(ValueError, match=r"different patterns \(2, 3, 4, 5\) and \(2, 4, 3, 5\)"):
        K + K.T
    with pytest.raises(TypeError, match="sum of chains"):
        C + C
    with pytest.raises(TypeError, match="sum of chains"):
        K - ks.KSChain([K])
    with pytest.raises(TypeError, match="only two KSMatrix"):
        K + numpy.ones(K.shape, dtype=numpy.float32)
    with pytest.raises(TypeError, match="only two KSMatrix"):
        numpy.ones(K.shape, dtype=numpy.float32) + K
    with pytest.raises(TypeError, match="only two KSMatrix"):
        1 + K
    with pytest.raises(TypeError):
        K * numpy.ones(3)
    with pytest.raises(TypeError):
        K * "2"
    with pytest.raises(TypeError):
        True * K
    with pytest.raises(ZeroDivisionError):
        C / 0


@pytest.mark.gpu
def test_adding_numpy_and_cupy_raises(rng):
    import cupy
    Kn = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float32))
    Kc = ks.KSMatrix(cupy.asarray(random_array(rng, (2, 3, 4, 5), numpy.float32)))
    with pytest.raises(TypeError, match="numpy values and one holding cupy"):
        Kn + Kc
    assert to_numpy((Kc - Kc).values).max() == 0


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_trace_of_square_operators(xp, rng, kind):
    op = operator_kinds(xp, rng, numpy.complex128)[kind]
    if op.shape[0] != op.shape[1]:
        with pytest.raises(ValueError, match="square"):
            op.trace()
        return
    assert abs(op.trace() - numpy.trace(operator_oracle(op))) < 1e-10 * op.shape[0]


def test_trace_of_a_large_square_chain_goes_in_column_blocks(rng):
    C = ks.KSChain([ks.KSMatrix(random_array(rng, p, numpy.float64))
                    for p in [(1, 40, 30, 50), (5, 6, 8, 50)]])          # 2000 x 2000
    assert C.shape == (2000, 2000) and ks.operators.base.TRACE_COLUMNS < 2000
    assert abs(C.trace() - numpy.trace(operator_oracle(C))) < 1e-9 * abs(numpy.trace(operator_oracle(C))) + 1e-9


def test_scipy_matrix_functions_are_pointed_to_the_linear_operator(rng):
    import scipy.linalg
    import scipy.sparse.linalg as spla
    K = ks.KSMatrix(random_array(rng, (2, 4, 4, 3), numpy.float64))
    b = random_array(rng, (K.shape[1],), numpy.float64)
    with pytest.raises(TypeError, match="aslinearoperator"):
        spla.expm_multiply(K, b)
    y = spla.expm_multiply(ks.aslinearoperator(K), b, traceA=K.trace())
    assert rel_err(y, scipy.linalg.expm(operator_oracle(K).real) @ b) < 1e-10
