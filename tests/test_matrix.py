"""KSMatrix against the float64 dense oracle: construction, views, every reference backend,
both layouts, vectors, strided operands, promotion, and bad input.

Tests taking the ``xp`` fixture run on NumPy and, marked ``gpu``, on CuPy.
"""
import numpy
import pytest
from hypothesis import given, settings, strategies as st

import kscupy as ks
from conftest import DTYPES, RTOL, dense_oracle, random_array, rel_err, to_numpy

REFERENCE_BACKENDS = ["bmm", "einsum", "dense", "sparse"]
PATTERNS = [(1, 1, 1, 1), (2, 3, 4, 5), (3, 4, 2, 1), (1, 5, 3, 2), (4, 2, 2, 4),
            (2, 1, 3, 2), (2, 3, 1, 2), (1, 8, 8, 1)]


def oracle_of(K):
    return dense_oracle(to_numpy(K.values))


# -- construction ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_values_round_trip_and_dense(xp, rng, dtype):
    w = xp.asarray(random_array(rng, (2, 3, 4, 5), dtype))
    K = ks.KSMatrix(w)
    assert K.pattern == (2, 3, 4, 5) and K.shape == (30, 40) and K.nnz == 120
    assert K.dtype == dtype and K.xp is xp
    numpy.testing.assert_array_equal(to_numpy(K.values), to_numpy(w))
    numpy.testing.assert_array_equal(to_numpy(K.todense()), dense_oracle(to_numpy(w)))


def test_values_are_copied_into_pretiled_storage(rng):
    w = random_array(rng, (2, 3, 4, 5), numpy.float64)
    K = ks.KSMatrix(w)
    w[...] = 7.0
    assert not numpy.any(K.values == 7.0)
    # pre-tiled: each group's b x c block is contiguous
    assert K.factor.tiles.shape == (2, 5, 3, 4) and K.factor.tiles.flags.c_contiguous


@pytest.mark.parametrize("dtype", DTYPES)
def test_random(xp, dtype):
    K = ks.KSMatrix.random((3, 4, 9, 2), dtype=dtype, xp=xp, seed=5)
    assert K.dtype == dtype and K.xp is xp
    v = to_numpy(K.values)
    bound = 1 / 3 + 1e-7
    parts = [v.real, v.imag] if numpy.dtype(dtype).kind == "c" else [v]
    for part in parts:
        assert numpy.all(numpy.abs(part) <= bound)
        assert part.std() > 0.1   # spread over the interval, not constant
    again = ks.KSMatrix.random((3, 4, 9, 2), dtype=dtype, xp=xp, seed=5)
    numpy.testing.assert_array_equal(to_numpy(again.values), v)


def test_random_is_the_same_on_either_module(xp):
    # drawn by NumPy's generator on the host for either module
    K = ks.KSMatrix.random((2, 3, 4, 5), dtype=numpy.complex64, xp=xp, seed=11)
    ref = ks.KSMatrix.random((2, 3, 4, 5), dtype=numpy.complex64, seed=11)
    numpy.testing.assert_array_equal(to_numpy(K.values), ref.values)


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_stored_in_the_module_asked_for(xp, rng, dtype):
    w = random_array(rng, (2, 3, 4, 5), dtype)           # NumPy values, stored with xp
    K = ks.KSMatrix(w, xp=xp)
    assert K.xp is xp and K.dtype == dtype
    numpy.testing.assert_array_equal(to_numpy(K.values), w)
    numpy.testing.assert_array_equal(to_numpy(K.todense()).astype(numpy.complex128), dense_oracle(w))
    back = ks.KSMatrix(K.values, xp=numpy)                # and back to the host
    assert back.xp is numpy
    numpy.testing.assert_array_equal(back.values, w)


def test_bad_module_raises(rng):
    import math
    with pytest.raises(TypeError, match="xp must be numpy or cupy"):
        ks.KSMatrix(random_array(rng, (1, 2, 2, 1), numpy.float32), xp=math)


@pytest.mark.parametrize("dtype", DTYPES)
def test_from_dense_projects_onto_support(xp, rng, dtype):
    pattern = ks.KSPattern(2, 3, 2, 3)
    D = random_array(rng, pattern.shape, dtype)
    K = ks.KSMatrix.from_dense(xp.asarray(D), pattern)
    expected = numpy.where(pattern.support(), D, 0)
    numpy.testing.assert_array_equal(to_numpy(K.todense()), expected)
    numpy.testing.assert_array_equal(oracle_of(K), expected)


def test_from_dense_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"does not match pattern \(2, 3, 2, 3\)"):
        ks.KSMatrix.from_dense(numpy.ones((18, 11)), (2, 3, 2, 3))


@pytest.mark.parametrize("dtype", [numpy.int8, numpy.int64, numpy.bool_, numpy.longdouble, object])
def test_unsupported_dtypes_raise(dtype):
    with pytest.raises(TypeError, match="unsupported dtype"):
        ks.KSMatrix(numpy.ones((1, 2, 2, 1), dtype=dtype))
    with pytest.raises(TypeError, match="unsupported dtype"):
        ks.KSMatrix.random((1, 2, 2, 1), dtype=dtype)
    with pytest.raises(TypeError, match="unsupported dtype"):
        ks.KSMatrix.from_dense(numpy.ones((2, 2), dtype=dtype), (1, 2, 2, 1))


def test_bad_values_raise():
    with pytest.raises(ValueError, match=r"shape \(a, b, c, d\)"):
        ks.KSMatrix(numpy.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="positive integer"):
        ks.KSMatrix(numpy.ones((2, 0, 2, 2)))
    with pytest.raises(TypeError, match=r"a list as values: pass numpy.asarray"):
        ks.KSMatrix([[[[1.0]]]])
    w = numpy.random.default_rng(0).standard_normal((2, 3, 4, 2))
    for bad in (numpy.ma.masked_array(w, w > 0), numpy.ma.masked_array(w)):
        with pytest.raises(TypeError, match="masked array as values"):
            ks.KSMatrix(bad)
    with pytest.raises(TypeError, match="masked array as dense matrix"):
        ks.KSMatrix.from_dense(numpy.ma.masked_array(numpy.ones((6, 8))), (2, 3, 4, 1))
    with pytest.raises(TypeError, match="non-native byte order"):
        ks.KSMatrix(w.astype(">f8"))
    K = ks.KSMatrix(w)
    with pytest.raises(TypeError, match="masked array as values"):
        K.values = numpy.ma.masked_array(w)
    with pytest.raises(TypeError, match="xp must be numpy or cupy"):
        ks.KSMatrix.random((1, 2, 2, 1), xp=list)
    for structure in ("dft", 1, ks.KSPattern.of((1, 2, 2, 1))):
        with pytest.raises(TypeError, match="structure must be None or a kscupy.DFTStage"):
            ks.KSMatrix(numpy.ones((1, 2, 2, 1)), structure=structure)


def test_repr_and_astype(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.complex64))
    assert repr(K) == ("KSMatrix(pattern=(2, 3, 4, 5), shape=(30, 40), dtype=complex64, "
                       "device=cpu)")
    assert "adjoint view" in repr(K.H) and "(2, 4, 3, 5)" in repr(K.H)
    K64 = K.H.astype(numpy.complex128)
    assert K64.dtype == numpy.complex128
    numpy.testing.assert_allclose(K64.todense(), oracle_of(K).conj().T, rtol=1e-6)
    with pytest.raises(TypeError, match="todense"):
        numpy.asarray(K)


# -- views ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_views_share_values(xp, rng, dtype):
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), dtype)))
    D = oracle_of(K)
    for view, expected, pattern in ((K.T, D.T, (2, 4, 3, 5)), (K.H, D.conj().T, (2, 4, 3, 5)),
                                    (K.conj(), D.conj(), (2, 3, 4, 5)), (K.T.T, D, (2, 3, 4, 5)),
                                    (K.H.H, D, (2, 3, 4, 5)), (K.H.T, D.conj(), (2, 3, 4, 5))):
        assert view.factor.tiles is K.factor.tiles   # no copy of the values
        assert view.pattern == pattern and view.shape == expected.shape
        numpy.testing.assert_array_equal(to_numpy(view.todense()), expected)
        numpy.testing.assert_array_equal(dense_oracle(to_numpy(view.values)), expected)


# -- multiplication -------------------------------------------------------------------------
@pytest.mark.parametrize("backend", REFERENCE_BACKENDS + ["auto"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_matmul_both_layouts(xp, rng, backend, dtype, pattern):
    K = ks.KSMatrix(xp.asarray(random_array(rng, pattern, dtype)))
    D = oracle_of(K)
    M, N = K.shape
    B = 7
    X = random_array(rng, (N, B), dtype)
    Y = K.matmul(xp.asarray(X), backend=backend)
    assert Y.shape == (M, B) and Y.dtype == dtype
    assert rel_err(Y, D @ X) < RTOL[numpy.dtype(dtype)]
    Xf = random_array(rng, (B, N), dtype)
    Y = K.matmul(xp.asarray(Xf), layout="bsf", backend=backend)
    assert Y.shape == (B, M) and Y.dtype == dtype
    assert rel_err(Y, Xf @ D.T) < RTOL[numpy.dtype(dtype)]
    x = random_array(rng, (N,), dtype)
    for layout in ("bsl", "bsf"):
        y = K.matmul(xp.asarray(x), layout=layout, backend=backend)
        assert y.shape == (M,)
        assert rel_err(y, D @ x) < RTOL[numpy.dtype(dtype)]


@pytest.mark.parametrize("dtype", [numpy.float64, numpy.complex64])
def test_operators(xp, rng, dtype):
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), dtype)))
    D = oracle_of(K)
    M, N = K.shape
    tol = RTOL[numpy.dtype(dtype)]
    x, X = random_array(rng, (N,), dtype), random_array(rng, (N, 6), dtype)
    z, Z = random_array(rng, (M,), dtype), random_array(rng, (6, M), dtype)
    assert rel_err(K @ xp.asarray(x), D @ x) < tol
    assert rel_err(K @ xp.asarray(X), D @ X) < tol
    assert rel_err(xp.asarray(X.T) @ K.T, X.T @ D.T) < tol
    assert rel_err(xp.asarray(Z) @ K, Z @ D) < tol
    assert rel_err(xp.asarray(z) @ K, z @ D) < tol
    assert rel_err(K.H @ xp.asarray(Z.T), D.conj().T @ Z.T) < tol
    assert rel_err(xp.asarray(X.T) @ K.H, X.T @ D.conj().T) < tol


def _strided_views(xp, rng, dtype, N, B):
    """Operands of logical shape (N, B) laid out in awkward ways."""
    big = xp.asarray(random_array(rng, (N + 1, 2 * B + 1), dtype))
    return {
        "column-step": big[:N, : 2 * B : 2],
        "offset": big[1:, 1: B + 1],
        "fortran": xp.asfortranarray(big[:N, :B]),
        "reversed": big[N - 1:: -1, B - 1:: -1] if N > 1 else big[:1, B - 1:: -1],
        "transposed-view": xp.asarray(random_array(rng, (B, N), dtype)).T,
    }


@pytest.mark.parametrize("backend", REFERENCE_BACKENDS)
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_strided_operands(xp, rng, backend, dtype):
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), dtype)))
    D = oracle_of(K)
    M, N = K.shape
    tol = RTOL[numpy.dtype(dtype)]
    for name, X in _strided_views(xp, rng, dtype, N, 5).items():
        Xh = to_numpy(X)
        assert rel_err(K.matmul(X, backend=backend), D @ Xh) < tol, name
        assert rel_err(K.matmul(X.T, layout="bsf", backend=backend), Xh.T @ D.T) < tol, name
    x = xp.asarray(random_array(rng, (2 * N,), dtype))[::2]
    assert rel_err(K.matmul(x, backend=backend), D @ to_numpy(x)) < tol


@pytest.mark.parametrize("k_dtype, x_dtype, expected", [
    (numpy.float32, numpy.float64, numpy.float64),
    (numpy.float64, numpy.float32, numpy.float64),
    (numpy.float32, numpy.complex64, numpy.complex64),
    (numpy.float64, numpy.complex64, numpy.complex128),
    (numpy.complex64, numpy.float64, numpy.complex128),
    (numpy.float32, numpy.float16, numpy.float32),
])
def test_result_dtype_follows_numpy_promotion(xp, rng, k_dtype, x_dtype, expected):
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 1), k_dtype)))
    X = (rng.standard_normal((K.shape[1], 3)) * 10).astype(x_dtype)
    assert numpy.result_type(k_dtype, x_dtype) == expected
    for backend in REFERENCE_BACKENDS:
        Y = K.matmul(xp.asarray(X), backend=backend)
        assert Y.dtype == expected
        assert rel_err(Y, oracle_of(K) @ X.astype(numpy.complex128)) < RTOL[numpy.dtype(expected)] * 10


@pytest.mark.parametrize("x_dtype", [object, bool, numpy.int8, numpy.int64, numpy.uint16, str])
def test_operands_of_other_dtypes_raise(xp, rng, x_dtype):
    # integers are not converted behind the caller's back: the caller picks the precision
    if xp is not numpy and x_dtype in (object, str):
        pytest.skip("CuPy has no object or string arrays")
    K = ks.KSMatrix(xp.asarray(random_array(rng, (1, 2, 2, 1), numpy.float32)))
    X = xp.asarray(numpy.ones((2, 3)).astype(x_dtype))
    for product in (lambda: K @ X, lambda: X.T @ K.T, lambda: K.matmul(X, layout="bsl")):
        with pytest.raises(TypeError, match=r"operand of dtype .*convert it first"):
            product()


@pytest.mark.parametrize("backend", REFERENCE_BACKENDS + ["auto"])
def test_empty_batch(xp, rng, backend):
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), numpy.float32)))
    M, N = K.shape
    Y = K.matmul(xp.zeros((N, 0), dtype=numpy.float32), backend=backend)
    assert Y.shape == (M, 0) and Y.dtype == numpy.float32 and K.xp is xp
    Y = K.matmul(xp.zeros((0, N), dtype=numpy.float64), layout="bsf", backend=backend)
    assert Y.shape == (0, M) and Y.dtype == numpy.float64


def test_shape_errors(xp):
    K = ks.KSMatrix.random((2, 3, 4, 5), xp=xp)
    M, N = K.shape
    with pytest.raises(ValueError, match=r"shape mismatch.*\(30, 40\).*\(39, 2\)"):
        K @ xp.ones((N - 1, 2), dtype=numpy.float32)
    with pytest.raises(ValueError, match="shape mismatch"):
        xp.ones((2, N), dtype=numpy.float32) @ K.T.T    # (2, 40) @ (30, 40)
    with pytest.raises(ValueError, match="shape mismatch"):
        K @ xp.ones(N + 1, dtype=numpy.float32)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        K @ xp.ones((N, 2, 2), dtype=numpy.float32)
    with pytest.raises(ValueError, match="layout"):
        K.matmul(xp.ones(N, dtype=numpy.float32), layout="rows")
    with pytest.raises(ValueError, match="backend"):
        K.matmul(xp.ones(N, dtype=numpy.float32), backend="magic")


def test_non_array_operands_raise():
    K = ks.KSMatrix.random((1, 2, 2, 1))
    with pytest.raises(TypeError):
        K @ [1.0, 2.0]
    with pytest.raises(TypeError):
        [1.0, 2.0] @ K
    with pytest.raises(TypeError, match=r"a list as operand: pass numpy.asarray\(X\)"):
        K.matmul([1.0, 2.0])
    with pytest.raises(TypeError, match="needs CuPy"):
        K.matmul(numpy.ones(2), backend="kernel")


@pytest.mark.gpu
def test_mixing_numpy_and_cupy_raises():
    import cupy
    Kc = ks.KSMatrix.random((2, 3, 4, 5), xp=cupy)
    Kn = ks.KSMatrix.random((2, 3, 4, 5))
    with pytest.raises(TypeError, match="cupy values with a numpy array"):
        Kc @ numpy.ones(40, dtype=numpy.float32)
    with pytest.raises(TypeError, match="numpy values with a cupy array"):
        Kn @ cupy.ones(40, dtype=numpy.float32)
    with pytest.raises(TypeError, match="numpy values with a cupy array"):
        cupy.ones((3, 30), dtype=numpy.float32) @ Kn


# -- properties -----------------------------------------------------------------------------
patterns = st.tuples(*[st.integers(1, 5)] * 4)


@settings(max_examples=60, deadline=None)
@given(pattern=patterns, B=st.integers(1, 9), backend=st.sampled_from(REFERENCE_BACKENDS),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**32 - 1))
def test_random_patterns_match_oracle(pattern, B, backend, dtype, seed):
    rng = numpy.random.default_rng(seed)
    K = ks.KSMatrix(random_array(rng, pattern, dtype))
    D = oracle_of(K)
    X = random_array(rng, (K.shape[1], B), dtype)
    assert rel_err(K.matmul(X, backend=backend), D @ X) < RTOL[numpy.dtype(dtype)]
    assert rel_err(K.matmul(X.T, layout="bsf", backend=backend), X.T @ D.T) \
        < RTOL[numpy.dtype(dtype)]


@settings(max_examples=40, deadline=None)
@given(pattern=patterns, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**32 - 1))
def test_adjoint_dot_test(pattern, dtype, seed):
    """<K x, y> == <x, K^H y> with both sides computed by kscupy."""
    rng = numpy.random.default_rng(seed)
    K = ks.KSMatrix(random_array(rng, pattern, dtype))
    M, N = K.shape
    x, y = random_array(rng, (N,), dtype), random_array(rng, (M,), dtype)
    lhs = numpy.vdot(y, K @ x)
    rhs = numpy.vdot(K.H @ y, x)
    scale = numpy.linalg.norm(K @ x) * numpy.linalg.norm(y)
    assert abs(lhs - rhs) <= RTOL[numpy.dtype(dtype)] * 10 * scale


def test_dense_cache_is_shared_by_views_and_released(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.complex128))
    D = oracle_of(K)
    KH = K.H
    numpy.testing.assert_array_equal(K.dense_cached(), D)
    numpy.testing.assert_array_equal(KH.dense_cached(), D.conj().T)
    assert K.dense_cached() is K.dense_cached()           # formed once
    assert len(K.T.factor.cache) == 2                       # the views share the cache
    assert K.astype(numpy.complex64).factor.cache == {}     # a copy starts empty
    KH.clear_cache()
    assert K.factor.cache == {}


def test_mixed_dtype_products_convert_the_matrix_once(xp, rng):
    """A float32 matrix applied to float64 operands converts its values once and keeps the
    converted copy (with its dense matrix), instead of rebuilding both on every call."""
    K = ks.KSMatrix(xp.asarray(random_array(rng, (1, 6, 5, 1), numpy.float32)))
    D = oracle_of(K)
    X = random_array(rng, (5, 3), numpy.float64)
    for backend in ("dense", "auto", "bmm"):
        for _ in range(2):
            Y = K.matmul(xp.asarray(X), backend=backend)
            assert Y.dtype == numpy.float64
            assert rel_err(Y, D @ X) < 1e-6
    converted = [v for key, v in K.factor.cache.items() if key[0] == "converted"]
    assert len(converted) == 1 and converted[0].dtype == numpy.float64
    dense = converted[0].cache[("dense", False, False)]
    K.matmul(xp.asarray(X), backend="dense")
    assert converted[0].cache[("dense", False, False)] is dense     # not rebuilt
    K.clear_cache()
    assert K.factor.cache == {}


# -- writing values: through assignment only, never stale ----------------------------------
def test_handed_out_arrays_cannot_be_made_writable_again(rng):
    """NumPy lets ``setflags(write=True)`` turn writing back on for a view of a writable
    array: the arrays operators hand out are views of read-only storage, so it refuses, and
    the products (from the values and from the caches) stay consistent."""
    K = ks.KSMatrix(random_array(rng, (1, 2, 2, 1), numpy.float64))
    X = numpy.eye(2)
    K.matmul(X, backend="dense")                      # a dense matrix cached
    C = ks.dft(8)
    for handed_out in (K.values, K.blocks, K.stored_values(), K.T.values, K.dense_cached(),
                       C.input_permutation, C.factors[0].values):
        with pytest.raises(ValueError, match="WRITEABLE"):
            handed_out.setflags(write=True)
    D = oracle_of(K)
    for backend in ("dense", "bmm", "sparse"):
        assert rel_err(K.matmul(X, backend=backend), D) < 1e-12


def test_new_values_follow_the_constructors_dtype_rules(rng):
    K = ks.KSMatrix(random_array(rng, (1, 2, 2, 1), numpy.float64))
    for w in (numpy.ones((1, 2, 2, 1), numpy.int64), numpy.ones((1, 2, 2, 1), bool),
              numpy.ones((1, 2, 2, 1), ">f8")):
        with pytest.raises(TypeError, match="dtype"):
            K.values = w


def test_values_handed_out_cannot_write_around_the_caches(xp, rng):
    """``values``, ``blocks``, ``stored_values()`` and ``dense_cached()`` refuse writes on
    both devices: item assignment, in-place operators, ``fill``, and the same through a view
    of them; their copies and what is computed from them are writable."""
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), numpy.float64)))
    D = oracle_of(K)
    writes = {"item": lambda v: v.__setitem__(Ellipsis, 1.0),
              "view item": lambda v: v[0].__setitem__(0, 1.0),
              "transposed view": lambda v: v.T.__setitem__(0, 1.0),
              "+=": lambda v: v.__iadd__(1.0), "*=": lambda v: v.__imul__(2.0),
              "fill": lambda v: v.fill(1.0)}
    for handed_out in (K.values, K.blocks, K.stored_values(), K.T.values, K.dense_cached()):
        for name, write in writes.items():
            with pytest.raises(ValueError, match="read-only"):
                write(handed_out)
                pytest.fail(f"{name} was accepted")
        copy = handed_out.copy()
        copy[...] = 1.0
        derived = handed_out * 2.0
        derived[...] = 1.0
        assert float(copy.sum()) == float(derived.sum()) == copy.size
    numpy.testing.assert_array_equal(oracle_of(K), D)
    X = random_array(rng, (K.shape[1], 3), numpy.float64)
    assert rel_err(K @ xp.asarray(X), D @ X) < 1e-12
    assert rel_err(K.T @ K.dense_cached(), D.T @ D) < 1e-12     # a frozen array as operand
    K.values = K.values * 3.0                    # computed from a handed-out array: accepted
    assert rel_err(K @ xp.asarray(X), 3.0 * (D @ X)) < 1e-12


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_assigned_values_reach_every_view_cache_and_chain(xp, rng, dtype):
    """After ``K.values = w`` nothing derived from the old values is used: the kept dense
    matrix, the converted copy of a mixed-dtype product, the views, and the plans of a chain
    holding K (merged small-block factors on the GPU)."""
    K = ks.KSMatrix(xp.asarray(random_array(rng, (1, 4, 4, 1), dtype)))
    C = ks.hadamard(16, dtype=dtype, xp=xp)            # 2x2 blocks: merged by the GPU planner
    KT, KH = K.T, K.H
    wide = numpy.complex128 if numpy.dtype(dtype).kind == "c" else numpy.float64
    X = random_array(rng, (4, 3), dtype)
    Xc = random_array(rng, (16, 3), dtype)
    Xwide = random_array(rng, (4, 3), wide)

    def check_all():
        D = oracle_of(K)
        tol = 10 * RTOL[numpy.dtype(dtype)]
        assert rel_err(K.matmul(xp.asarray(X), backend="dense"), D @ X) < tol
        assert rel_err(K @ xp.asarray(Xwide), D @ Xwide) < tol          # converted copy
        assert rel_err(KT @ xp.asarray(X), D.T @ X) < tol
        assert rel_err(KH @ xp.asarray(X), D.conj().T @ X) < tol
        DC = numpy.eye(16)
        for f in C.factors:
            DC = DC @ oracle_of(f)
        assert rel_err(C @ xp.asarray(Xc), DC @ Xc) < tol
        assert rel_err(xp.asarray(Xc.T) @ C.T, (DC @ Xc).T) < tol

    check_all()                                       # fills the caches and plans
    K.values = xp.asarray(random_array(rng, (1, 4, 4, 1), dtype))
    C.factors[1].values = xp.asarray(random_array(rng, tuple(C.factors[1].pattern), dtype))
    check_all()
    # through a view: K.T.values = w stores w transposed
    wT = random_array(rng, (1, 4, 4, 1), dtype)
    KT.values = xp.asarray(wT)
    numpy.testing.assert_array_equal(to_numpy(K.values), wT.transpose(0, 2, 1, 3))
    if numpy.dtype(dtype).kind == "c":
        KH.values = xp.asarray(wT)
        numpy.testing.assert_array_equal(to_numpy(K.values), wT.transpose(0, 2, 1, 3).conj())
    check_all()


def test_assigning_bad_values_raises(xp, rng):
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), numpy.float32)))
    before = to_numpy(K.values)
    with pytest.raises(ValueError, match="shape"):
        K.values = xp.asarray(random_array(rng, (2, 4, 3, 5), numpy.float32))
    with pytest.raises(TypeError, match="cast safely"):
        K.values = xp.asarray(random_array(rng, (2, 3, 4, 5), numpy.float64))
    w = random_array(rng, (2, 3, 4, 5), numpy.float32)
    foreign = w.tolist() if xp is numpy else w        # a list; NumPy values for a GPU matrix
    with pytest.raises(TypeError, match="array"):
        K.values = foreign
    numpy.testing.assert_array_equal(to_numpy(K.values), before)
    K.values = xp.asarray(random_array(rng, (2, 3, 4, 5), numpy.float16))   # safe: widened
    assert K.dtype == numpy.float32


# -- repeated products on the GPU: prepared once, right every time -----------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["auto", "kernel", "kernel_fma", "bmm", "dense"])
def test_repeated_products_stay_right(rng, backend):
    """The prepared run of a repeated product (kept per operand shape, strides, dtype and
    alignment) gives the oracle's answer for fresh data, for operands that differ only in
    alignment, for vectors and promoted dtypes, and after the values are reassigned."""
    cupy = pytest.importorskip("cupy")
    K = ks.KSMatrix(cupy.asarray(random_array(rng, (2, 8, 6, 3), numpy.float32)))
    M, N = K.shape
    tol = 10 * RTOL[numpy.dtype(numpy.float32)]
    for round in range(3):        # rounds 1 and 2 reuse the runs; round 2 has new values
        if round == 2:
            K.values = cupy.asarray(random_array(rng, (2, 8, 6, 3), numpy.float32))
        D = oracle_of(K)
        for B in (1, 5):
            base = cupy.asarray(random_array(rng, (N + 1, B), numpy.float32))
            for X in (base[:N], base[1:]):                 # same shape and strides, shifted
                X_host = to_numpy(X)
                assert rel_err(K.matmul(X, backend=backend), D @ X_host) < tol
                assert rel_err(K.matmul(cupy.ascontiguousarray(X.T), layout="bsf",
                                        backend=backend), X_host.T @ D.T) < tol
        x = random_array(rng, (N,), numpy.float64)          # vector, promoted to float64
        assert rel_err(K.matmul(cupy.asarray(x), backend=backend), D @ x) < tol
    runs = K._runs()
    assert 0 < len(runs) <= ks.engine.runs.MAX_PREPARED_RUNS


@pytest.mark.gpu
def test_tuning_decisions_forgotten_reach_prepared_runs(rng):
    cupy = pytest.importorskip("cupy")
    from kscupy.engine import decide
    K = ks.KSMatrix(cupy.asarray(random_array(rng, (1, 16, 16, 2), numpy.float32)))
    X = cupy.asarray(random_array(rng, (32, 4), numpy.float32))
    K @ X
    (key, (stamp, run)), = K._runs().items()
    before = decide.epoch
    ks.engine.clear_tuning_cache()
    assert decide.epoch == before + 1
    assert rel_err(K @ X, oracle_of(K) @ to_numpy(X)) < 1e-4
    # the run is prepared again under the new epoch and replaces the stale one in place
    # (kscupy.engine.runs: stale runs are not kept)
    (key2, (stamp2, run2)), = K._runs().items()
    assert key2 == key and stamp2 != stamp and run2 is not run


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.complex128])
@pytest.mark.parametrize("pattern", [(3, 2, 2, 5), (2, 4, 4, 3), (1, 4, 2, 1)])
def test_interleaved_words_hold_each_block_word_by_word(pattern, dtype):
    """Word m of group g's block is at [m, g], and a write drops the kept copy."""
    K = ks.KSMatrix.random(pattern, dtype=dtype)
    f = K.factor
    a, b, c, d = pattern
    isz = numpy.dtype(dtype).itemsize
    if b * c * isz % 16:
        with pytest.raises(ValueError, match="16-byte"):
            f.interleaved_words()
        return
    words = f.interleaved_words()
    per_word = 16 // isz
    assert words.shape == (b * c * isz // 16, a * d, per_word)
    blocks = f.tiles.reshape(a * d, b * c)
    for g in range(a * d):
        assert (words[:, g].reshape(-1) == blocks[g]).all()
    assert f.interleaved_words() is words                    # kept
    # the copy of the conjugated values (kept beside it; real values have only the one)
    conj = f.interleaved_words(conjugated=True)
    assert (conj is words) == (numpy.dtype(dtype).kind != "c")
    assert (conj == numpy.conj(words)).all() and f.interleaved_words(conjugated=True) is conj
    f.write(2 * f.blocks)
    assert f.interleaved_words() is not words
    assert (f.interleaved_words()[:, 0].reshape(-1) == f.tiles.reshape(a * d, b * c)[0]).all()
    assert (f.interleaved_words(conjugated=True)[:, 0].reshape(-1) ==
            f.tiles.reshape(a * d, b * c)[0].conj()).all()
