"""The operand gate: every product of every operator kind, on NumPy (CPU) and CuPy (`gpu`),
either returns the right answer (against the float64 oracle of the definition) or raises a
TypeError / ValueError that names the operand and the fix; scalars in every NumPy form scale.

The property test throws random operands at ``op @ X``, ``X @ op.T`` and ``op.matmul``:
good arrays of random dtype, shape, strides, layout and backend, and bad ones (masked arrays,
``numpy.matrix``, sparse matrices, sequences, 0-d and 3-d arrays, integer, bool and object
dtypes, wrong lengths).
"""
import numpy
import pytest
import scipy.sparse
from hypothesis import HealthCheck, given, settings, strategies as st

import kscupy as ks
from conftest import RTOL, rel_err, to_numpy
from operator_kinds import KIND_NAMES, operator_kinds, operator_oracle

OPERATOR_DTYPES = [numpy.float32, numpy.float64, numpy.complex64, numpy.complex128]
OPERAND_DTYPES = [numpy.float16, numpy.float32, numpy.float64, numpy.complex64,
                  numpy.complex128]
#: backends that compute in the operator's precision on both modules (tf32 is a choice the
#: caller makes; the GPU-only ones raise TypeError on NumPy, which the test accepts)
BACKENDS = ["auto", "kernel", "direct", "bmm", "dense", "einsum", "sparse"]
#: words a clear error names: what is wrong with the operand and what to pass instead
CLEAR = ("operand", "shape mismatch", "needs CuPy", "move one of them", "1-D or 2-D",
         "X.toarray()")

# one operator per (module, kind, dtype), built once: hypothesis draws many operands for it
_OPERATORS = {}


def operator(xp, kind, dtype):
    key = (xp.__name__, kind, numpy.dtype(dtype).name)
    if key not in _OPERATORS:
        rng = numpy.random.default_rng(len(_OPERATORS))
        op = operator_kinds(xp, rng, dtype)[kind]
        _OPERATORS[key] = op, operator_oracle(op)
    return _OPERATORS[key]


@st.composite
def good_operands(draw, xp, n_in):
    """``(X, layout)``: a float or complex array of ``n_in`` features, contiguous or strided."""
    dtype = draw(st.sampled_from(OPERAND_DTYPES))
    layout = draw(st.sampled_from(["bsl", "bsf", "vector"]))
    batch = draw(st.integers(0, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = numpy.random.default_rng(seed)
    data = rng.standard_normal((2 * n_in + 1, 2 * batch + 1))
    if numpy.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(data.shape)
    data = data.astype(dtype)
    if layout == "vector":
        X = data[::draw(st.sampled_from([1, 2])), 0][:n_in]
    else:
        strides = draw(st.sampled_from(["contiguous", "fortran", "stepped"]))
        X = data[:n_in, :batch] if strides != "stepped" else data[::2, ::2][:n_in, :batch]
        if strides == "fortran":
            X = numpy.asfortranarray(X)
        elif strides == "contiguous":
            X = numpy.ascontiguousarray(X)
        if layout == "bsf":
            X = X.T
    return xp.asarray(X) if xp is not numpy else X, layout


def bad_operands(n_in):
    """``{name: operand}`` of every kind the gate refuses (NumPy and SciPy objects)."""
    X = numpy.random.default_rng(n_in).standard_normal((n_in, 3))
    return {"masked array": numpy.ma.masked_array(X, mask=X > 0),
            "numpy.matrix": numpy.matrix(X),
            "csr_matrix": scipy.sparse.csr_matrix(X), "csr_array": scipy.sparse.csr_array(X),
            "list": X.tolist(), "tuple": tuple(X[:, 0]),
            "0-d": numpy.array(2.0), "3-d": numpy.ones((n_in, 2, 2)),
            "object": X.astype(object), "bool": X > 0, "int64": X.astype(numpy.int64),
            "uint8": X.astype(numpy.uint8), "short": X[:-1], "long": numpy.ones(n_in + 1)}


def assert_right_or_clear(product, oracle, dtype):
    try:
        Y = product()
    except (TypeError, ValueError) as exc:
        assert any(word in str(exc) for word in CLEAR), f"unclear error: {exc!r}"
        return
    assert Y.dtype == dtype
    tol = RTOL[numpy.dtype(dtype)] * 10
    assert rel_err(Y, oracle) < tol


def check_good_operand(xp, kind, op_dtype, backend, drawn):
    op, D = operator(xp, kind, op_dtype)
    (X, layout) = drawn
    Xn = to_numpy(X).astype(numpy.complex128)
    dtype = numpy.result_type(op.dtype, X.dtype)
    if layout == "bsf":
        assert_right_or_clear(lambda: op.matmul(X, layout="bsf", backend=backend), Xn @ D.T,
                              dtype)
        assert_right_or_clear(lambda: X @ op.T, Xn @ D.T, dtype)
    else:
        assert_right_or_clear(lambda: op.matmul(X, backend=backend), D @ Xn, dtype)
        assert_right_or_clear(lambda: op @ X, D @ Xn, dtype)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(kind=st.sampled_from(KIND_NAMES), op_dtype=st.sampled_from(OPERATOR_DTYPES),
       backend=st.sampled_from(BACKENDS), data=st.data())
def test_good_operands_give_the_oracle_answer_on_numpy(kind, op_dtype, backend, data):
    op, _ = operator(numpy, kind, op_dtype)
    check_good_operand(numpy, kind, op_dtype, backend,
                       data.draw(good_operands(numpy, op.shape[1])))


@pytest.mark.gpu
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KIND_NAMES), op_dtype=st.sampled_from(OPERATOR_DTYPES),
       backend=st.sampled_from(BACKENDS), data=st.data())
def test_good_operands_give_the_oracle_answer_on_cupy(gpu_xp, kind, op_dtype, backend, data):
    op, _ = operator(gpu_xp, kind, op_dtype)
    check_good_operand(gpu_xp, kind, op_dtype, backend,
                       data.draw(good_operands(gpu_xp, op.shape[1])))


@pytest.fixture
def gpu_xp():
    from conftest import GPU_REASON, gpu_available
    if not gpu_available():
        pytest.skip(GPU_REASON)
    import cupy
    return cupy


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")     # numpy.matrix
@pytest.mark.parametrize("kind", KIND_NAMES)
def test_bad_operands_raise_errors_that_name_the_fix(kind):
    op, _ = operator(numpy, kind, numpy.complex64)
    for name, X in bad_operands(op.shape[1]).items():
        Xt = X.T if hasattr(X, "T") else X
        for product in (lambda: op @ X, lambda: op.matmul(X), lambda: Xt @ op.T,
                        lambda: op.matmul(Xt, layout="bsf")):
            with pytest.raises((TypeError, ValueError)) as info:
                product()
            message = str(info.value)
            assert any(word in message for word in CLEAR), (name, message)


def test_masked_arrays_are_never_multiplied_with_their_hidden_values():
    K = ks.KSMatrix.random((2, 3, 4, 5), seed=1)
    X = numpy.ma.masked_array(numpy.ones((40, 2)), mask=numpy.eye(40, 2, dtype=bool))
    with pytest.raises(TypeError, match=r"masked.*X\.filled"):
        K @ X
    with pytest.raises(TypeError, match="masked"):
        X.T @ K.T


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_scalars_in_every_numpy_form_scale(kind):
    op, D = operator(numpy, kind, numpy.float64)
    X = numpy.random.default_rng(3).standard_normal((op.shape[1], 2))
    for alpha in (3, 2.5, numpy.float32(2.5), numpy.float64(2.5), numpy.int16(3),
                  numpy.array(2.5), numpy.array(3, dtype=numpy.int32),
                  numpy.array(2.5, dtype=numpy.float32)):
        expected = numpy.result_type(op.dtype, alpha)      # NumPy's rule, 0-d arrays strong
        value = complex(alpha)
        for scaled, factor in ((alpha * op, value), (op * alpha, value), (op / alpha, 1 / value)):
            assert scaled.dtype == expected, (alpha, scaled.dtype)
            assert rel_err(scaled @ X, factor * (D @ X)) < 1e-12


def test_non_scalars_do_not_scale():
    K = ks.KSMatrix.random((2, 3, 4, 5), seed=2)
    for alpha, message in ((numpy.ones(3), "not by an array of shape"),
                           (True, "not by a bool"), (numpy.bool_(False), "not by a bool"),
                           (numpy.array(True), "dtype bool"), (numpy.array("x"), "dtype <U1")):
        for scale in (lambda: K * alpha, lambda: alpha * K, lambda: K / alpha):
            with pytest.raises(TypeError, match=message):
                scale()
    with pytest.raises(ZeroDivisionError):
        K / numpy.array(0.0)


def test_sparse_left_operand_names_the_fix():
    K = ks.KSMatrix.random((2, 3, 4, 5), seed=4)
    with pytest.raises(TypeError, match=r"X\.toarray\(\) @ op"):
        scipy.sparse.csr_matrix(numpy.ones((3, 30))) @ K


@pytest.mark.gpu
def test_the_gate_on_cupy(gpu_xp):
    cupy = gpu_xp
    import cupyx.scipy.sparse
    for kind in KIND_NAMES:
        op, D = operator(cupy, kind, numpy.complex64)
        N = op.shape[1]
        X = cupy.asarray(numpy.random.default_rng(5).standard_normal((N, 3)))
        for bad in (cupy.ones((N, 2, 2)), cupy.array(1.0), X.astype(cupy.int32), X > 0,
                    cupyx.scipy.sparse.csr_matrix(X), numpy.ones((N, 3)), cupy.ones(N + 1)):
            with pytest.raises((TypeError, ValueError)) as info:
                op @ bad
            assert any(word in str(info.value) for word in CLEAR)
        # a 0-d CuPy array scales like the NumPy scalar it holds
        for alpha in (cupy.array(2.5), cupy.array(2.5, dtype=cupy.float32)):
            scaled = op * alpha
            assert scaled.dtype == numpy.result_type(op.dtype, alpha.dtype)
            assert rel_err(scaled @ X, 2.5 * (D @ to_numpy(X))) < 1e-5


def connected_outputs(K, column_nan_rows):
    """Rows of K's dense support (from the definition) that meet the NaN rows of X."""
    support = numpy.abs(operator_oracle(ks.KSMatrix(numpy.ones(K.pattern)))) > 0
    return support[:, column_nan_rows].any(axis=1)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # 0 * inf in D @ X
@pytest.mark.parametrize("backend", ["bmm", "einsum", "sparse", "kernel", "kernel_fma",
                                     "dense", "auto"])
def test_nan_reaches_the_connected_outputs(xp, backend):
    if xp is numpy and backend.startswith("kernel"):
        pytest.skip("the kernels run on CuPy")
    K = ks.KSMatrix.random((3, 4, 5, 2), dtype=numpy.float32, xp=xp, seed=6)
    X = numpy.random.default_rng(7).standard_normal((K.shape[1], 4)).astype(numpy.float32)
    X[[3, 17], 1] = numpy.nan
    X[8, 2] = numpy.inf
    Y = to_numpy(K.matmul(xp.asarray(X), backend=backend))
    for column, rows in ((1, [3, 17]), (2, [8])):
        reached = connected_outputs(K, rows)
        non_finite = ~numpy.isfinite(Y[:, column])
        if backend == "dense":           # D @ X: every output of the column
            assert non_finite.all()
        elif backend == "auto":          # whichever backend auto runs
            assert non_finite[reached].all()
        else:
            numpy.testing.assert_array_equal(non_finite, reached)
    assert numpy.isfinite(Y[:, [0, 3]]).all()


def test_a_row_batch_of_the_wrong_width_is_named_in_the_users_terms():
    K = ks.KSMatrix.random((2, 3, 4, 5), dtype=numpy.float64, seed=0)       # 30 x 40
    with pytest.raises(ValueError, match=r"Z @ op: op of shape \(30, 40\) takes Z of shape "
                                         r"\(B, 30\) or \(30,\), got \(3, 40\)"):
        numpy.ones((3, 40)) @ K


def test_every_operator_kind_has_a_conjugate():
    """KSSubmatrix (a Bluestein DFT) and KSRealPart (a DCT) conjugate as KSMatrix and
    KSChain do, against the dense oracle."""
    for op in (ks.dft(97), ks.dct(16), ks.dft(16), ks.KSMatrix.random((1, 2, 2, 1))):
        numpy.testing.assert_allclose(op.conj().todense(), op.todense().conj(), atol=1e-12)
        assert op.conj().shape == op.shape
