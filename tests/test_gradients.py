"""Gradients of KS products (kscupy.vjp, kscupy.values_grad) against an oracle from the
definition, and kscupy.testing.gradcheck.

The values' oracle gathers, for every canonical index ``(i, k, l, j)``, row
``i*b*d + k*d + j`` of ``G`` and row ``i*c*d + l*d + j`` of ``X`` by index arithmetic and
sums their product over the batch in complex128 on the host; a chain's oracle takes the
dense gradient ``L^H G (R X)^H`` of each factor (``L``, ``R``: the dense products left and
right of it, from conftest's oracles) at the factor's support.
"""
import numpy
import pytest

import kscupy as ks
from conftest import DTYPES, RTOL, dense_oracle, random_array, rel_err, to_numpy

BATCHES = [1, 3, 127]
PATTERNS = [(1, 1, 1, 1), (2, 3, 4, 2), (1, 8, 8, 1), (4, 2, 2, 8), (3, 5, 1, 2), (1, 1, 7, 3)]


def values_oracle(pattern, X, G, layout):
    """``dw[i,k,l,j] = sum_n G[row, n] conj(X[col, n])`` in complex128, from the index
    definition (bsf operands are transposed first)."""
    a, b, c, d = pattern
    X = to_numpy(X).astype(numpy.complex128)
    G = to_numpy(G).astype(numpy.complex128)
    if layout == "bsf":
        X, G = X.T, G.T
    i, k, l, j = numpy.meshgrid(numpy.arange(a), numpy.arange(b), numpy.arange(c),
                                numpy.arange(d), indexing="ij")
    rows, cols = i * b * d + k * d + j, i * c * d + l * d + j
    return numpy.einsum("...n,...n->...", G[rows], numpy.conj(X[cols]))


def operands(rng, K, B, layout, dtype, xp):
    M, N = K.shape
    X = random_array(rng, (N, B) if layout == "bsl" else (B, N), dtype)
    G = random_array(rng, (M, B) if layout == "bsl" else (B, M), dtype)
    return xp.asarray(X), xp.asarray(G)


def tolerance(dtype):
    # float16: every operand rounded to float16, sums in float32
    return 5 * RTOL[numpy.dtype(dtype)] if numpy.dtype(dtype) == numpy.float16 \
        else 20 * RTOL[numpy.dtype(dtype)]


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_values_gradient_against_the_definition(xp, rng, pattern, dtype, layout):
    K = ks.KSMatrix.random(pattern, dtype=dtype, xp=xp, seed=int(rng.integers(2**31)))
    for B in BATCHES:
        X, G = operands(rng, K, B, layout, dtype, xp)
        dX, dw = ks.vjp(K, X, G, layout=layout)
        assert dw.shape == tuple(pattern) and dw.dtype == K.dtype
        assert rel_err(dw, values_oracle(pattern, X, G, layout)) < tolerance(dtype), B
        D = dense_oracle(to_numpy(K.values))
        ref_dX = D.conj().T @ to_numpy(G) if layout == "bsl" else to_numpy(G) @ D.conj()
        assert rel_err(dX, ref_dX) < tolerance(dtype), B
        assert rel_err(ks.values_grad(K, X, G, layout=layout), values_oracle(
            pattern, X, G, layout)) < tolerance(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_values_gradient_poisoned(poisoned, rng, dtype, layout):
    """cuBLAS's values' gradient writes every value: every new allocation is NaN (the
    result's too), batches 1, 3, 127 and, for the smaller patterns, 65537."""
    import cupy
    for pattern in PATTERNS:
        K = ks.KSMatrix.random(pattern, dtype=dtype, xp=cupy, seed=int(rng.integers(2**31)))
        for B in BATCHES + ([65537] if K.pattern.nnz <= 64 else []):
            X, G = operands(rng, K, B, layout, dtype, cupy)
            dw = ks.values_grad(K, X, G, layout=layout)
            assert dw.shape == tuple(pattern) and dw.dtype == K.dtype
            assert rel_err(dw, values_oracle(pattern, X, G, layout)) < tolerance(dtype), \
                (pattern, B)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_a_long_batch_and_strided_operands(xp, rng, layout):
    """B = 65537 (the issue's long batch) with operands that are strided views."""
    pattern = (2, 4, 3, 2)
    K = ks.KSMatrix.random(pattern, dtype=numpy.float64, xp=xp, seed=1)
    X, G = operands(rng, K, 2 * 65537, layout, numpy.float64, xp)
    X, G = (X[:, ::2], G[:, ::2]) if layout == "bsl" else (X[::2], G[::2])
    dw = ks.values_grad(K, X, G, layout=layout)
    assert rel_err(dw, values_oracle(pattern, X, G, layout)) < 1e-12


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_real_values_with_complex_operands_get_the_real_part(xp, rng, dtype):
    K = ks.KSMatrix.random((2, 3, 2, 2), dtype=dtype, xp=xp, seed=2)
    X, G = operands(rng, K, 5, "bsl", numpy.complex128, xp)
    dw = ks.values_grad(K, X, G)
    assert dw.dtype == numpy.float64
    assert rel_err(dw, values_oracle(K.pattern, X, G, "bsl").real) < 1e-12


def test_a_vector_operand(xp, rng):
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.float64, xp=xp, seed=3)
    X, G = operands(rng, K, 1, "bsl", numpy.float64, xp)
    dX, dw = ks.vjp(K, X[:, 0], G[:, 0])
    assert dX.shape == (K.shape[1],)
    assert rel_err(dw, values_oracle(K.pattern, X, G, "bsl")) < 1e-12


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_repeated_gradients_skip_the_checks_they_passed_and_no_others(xp, rng, layout):
    """A second gradient with operands like the first (a vector too) is right on new data;
    operands of another shape, a masked array and a wrong G are still checked."""
    from kscupy import gradients
    gradients._CHECKED.clear()
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.float64, xp=xp, seed=4)
    for _ in range(2):                                   # checked, then remembered
        X, G = operands(rng, K, 5, layout, numpy.float64, xp)
        assert rel_err(ks.values_grad(K, X, G, layout=layout),
                       values_oracle(K.pattern, X, G, layout)) < 1e-12
        x, g = X[:, 0] if layout == "bsl" else X[0], G[:, 0] if layout == "bsl" else G[0]
        dX, dw = ks.vjp(K, x, g, layout=layout)
        assert dX.shape == x.shape
        assert rel_err(dw, values_oracle(K.pattern, x[:, None], g[:, None], "bsl")) < 1e-12
    assert len(gradients._CHECKED) == 2                  # the batch and the vector
    X, G = operands(rng, K, 5, layout, numpy.float64, xp)
    with pytest.raises(ValueError, match="G must have the product's shape"):
        ks.values_grad(K, X, G[:-1] if layout == "bsf" else G[:, :-1], layout=layout)
    if xp is numpy:
        with pytest.raises(TypeError, match="masked"):
            ks.values_grad(K, numpy.ma.masked_array(X), G, layout=layout)


def chain_gradients_oracle(C, X, G, layout):
    """Each factor's gradient from dense products: for ``Y = Lf K_l Rf X``, ``dK_l =
    Lf^H G (Rf X)^H`` read at the factor's support; and ``dX = D^H G``."""
    X = to_numpy(X).astype(numpy.complex128)
    G = to_numpy(G).astype(numpy.complex128)
    if layout == "bsf":
        X, G = X.T, G.T
    dense = [dense_oracle(to_numpy(f.values)) for f in C.factors]
    P_out = numpy.eye(C.shape[0])
    if C.output_permutation is not None:
        P_out = P_out[to_numpy(C.output_permutation)]
    P_in = numpy.eye(C.shape[1])
    if C.input_permutation is not None:
        P_in = P_in[to_numpy(C.input_permutation)]
    out = []
    for idx, f in enumerate(C.factors):
        left = P_out
        for D in dense[:idx]:
            left = left @ D
        right = P_in
        for D in reversed(dense[idx + 1:]):
            right = D @ right
        full = left.conj().T @ G @ (right @ X).conj().T
        a, b, c, d = f.pattern
        i, k, l, j = numpy.meshgrid(numpy.arange(a), numpy.arange(b), numpy.arange(c),
                                    numpy.arange(d), indexing="ij")
        out.append(full[i * b * d + k * d + j, i * c * d + l * d + j])
    D = P_out
    for Dl in dense:
        D = D @ Dl
    dX = D @ P_in
    dX = dX.conj().T @ G
    return (dX if layout == "bsl" else dX.T), out


@pytest.mark.parametrize("intermediates", ["keep", "recompute"])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_chain_gradients_with_permutations(xp, rng, dtype, layout, intermediates):
    factors = [ks.KSMatrix.random(p, dtype=dtype, xp=xp, seed=s) for s, p in
               enumerate([(1, 2, 3, 4), (2, 3, 2, 2), (4, 2, 2, 1)])]
    M, N = factors[0].shape[0], factors[-1].shape[1]
    C = ks.KSChain(factors, input_permutation=xp.asarray(rng.permutation(N)),
                   output_permutation=xp.asarray(rng.permutation(M)))
    X, G = operands(rng, C, 7, layout, dtype, xp)
    dX, dws = ks.vjp(C, X, G, layout=layout, intermediates=intermediates)
    ref_dX, ref_dws = chain_gradients_oracle(C, X, G, layout)
    tol = 20 * RTOL[numpy.dtype(dtype)]
    assert rel_err(dX, ref_dX) < tol
    for dw, ref in zip(dws, ref_dws):
        assert rel_err(dw, ref) < tol


def test_structured_factors_have_no_gradient_and_the_input_still_does(xp, rng):
    C = ks.dft(16, dtype=numpy.complex128, xp=xp)
    X, G = operands(rng, C, 3, "bsl", numpy.complex128, xp)
    dX, dws = ks.vjp(C, X, G)
    assert all(dw is None for dw in dws)
    D = to_numpy(C.todense())
    assert rel_err(dX, D.conj().T @ to_numpy(G)) < 1e-12


@pytest.mark.parametrize("wrt", ["values", "input"])
def test_one_side_only(xp, rng, wrt):
    C = ks.butterfly(16, dtype=numpy.float64, xp=xp, seed=4)
    X, G = operands(rng, C, 3, "bsl", numpy.float64, xp)
    dX, dws = ks.vjp(C, X, G, wrt=wrt)
    full_dX, full_dws = ks.vjp(C, X, G)
    if wrt == "values":
        assert dX is None
        for a, b in zip(dws, full_dws):
            numpy.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    else:
        assert dws is None
        numpy.testing.assert_array_equal(to_numpy(dX), to_numpy(full_dX))


@pytest.mark.parametrize("op", ["matrix", "butterfly", "chain_perm", "complex"])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_gradcheck_passes_for_correct_gradients(op, layout):
    rng = numpy.random.default_rng(5)
    make = {"matrix": lambda: ks.KSMatrix.random((2, 3, 4, 2), seed=1),
            "butterfly": lambda: ks.butterfly(16, seed=2),
            "chain_perm": lambda: ks.KSChain([ks.KSMatrix.random((1, 4, 2, 2), seed=3),
                                              ks.KSMatrix.random((2, 2, 4, 1), seed=4)],
                                             input_permutation=rng.permutation(8)),
            "complex": lambda: ks.monarch(16, blocks=4, dtype=numpy.complex64, seed=5)}[op]
    assert ks.testing.gradcheck(make(), layout=layout, seed=6)


def test_gradcheck_catches_a_wrong_gradient(monkeypatch):
    """A gradient that forgets the conjugate fails the check (so the check can fail)."""
    from kscupy.core import reference
    right = reference.blocks_gradient
    monkeypatch.setattr(reference, "blocks_gradient",
                        lambda G, X, p, layout, xp: right(G, X.conj(), p, layout, xp))
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.complex128, seed=1)
    with pytest.raises(AssertionError, match="factor 0's values"):
        ks.testing.gradcheck(K, seed=2)


@pytest.mark.parametrize("call, error, match", [
    (lambda K, X, G: ks.vjp(ks.dft(1009), X, G), TypeError, "KSMatrix or a KSChain"),
    (lambda K, X, G: ks.vjp(K, X, G[:-1]), ValueError, "G must have the product's shape"),
    (lambda K, X, G: ks.vjp(K, X[:-1], G), ValueError, "shape mismatch"),
    (lambda K, X, G: ks.vjp(K, X, G, layout="col"), ValueError, "layout"),
    (lambda K, X, G: ks.vjp(K, X, G, wrt="w"), ValueError, "wrt"),
    (lambda K, X, G: ks.vjp(K, X, G, intermediates="some"), ValueError, "intermediates"),
    (lambda K, X, G: ks.vjp(K, X, G.tolist()), TypeError, "a list as G"),
    (lambda K, X, G: ks.vjp(K, X, G.astype(numpy.int64)), TypeError, "G of dtype int64"),
])
def test_bad_arguments_are_named(call, error, match):
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.float64, seed=1)
    rng = numpy.random.default_rng(0)
    X, G = rng.standard_normal((16, 3)), rng.standard_normal((12, 3))
    with pytest.raises(error, match=match):
        call(K, X, G)


def test_a_vector_in_batch_size_first_is_a_batch_of_one(xp, rng):
    """As for products, a vector is one column whatever the layout says (with permutations
    too)."""
    C = ks.KSChain([ks.KSMatrix.random((1, 4, 2, 2), dtype=numpy.float64, xp=xp, seed=1),
                    ks.KSMatrix.random((2, 2, 4, 1), dtype=numpy.float64, xp=xp, seed=2)],
                   input_permutation=xp.asarray(rng.permutation(8)))
    x, g = (xp.asarray(random_array(rng, (8,), numpy.float64)) for _ in range(2))
    dX, dws = ks.vjp(C, x, g, layout="bsf")
    ref_dX, ref_dws = chain_gradients_oracle(C, x[:, None], g[:, None], "bsl")
    assert dX.shape == (8,) and rel_err(dX, ref_dX[:, 0]) < 1e-12
    assert all(rel_err(a, b) < 1e-12 for a, b in zip(dws, ref_dws))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(eps=0), ValueError, "eps"), (dict(eps=float("nan")), ValueError, "eps"),
    (dict(rtol=0), ValueError, "rtol"), (dict(rtol=-1.0), ValueError, "rtol"),
    (dict(batch=0), ValueError, "batch"), (dict(batch=1.5), TypeError, "batch"),
])
def test_gradcheck_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        ks.testing.gradcheck(ks.butterfly(8, seed=0), **kwargs)


# --- found by a bad-input audit -----------------------------------------------------------

def test_the_input_gradient_of_a_real_operand_is_real():
    """A real K and real X with a complex G (a complex-valued intermediate of a real loss):
    both gradients are real, the real parts of the complex ones."""
    rng = numpy.random.default_rng(3)
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.float64, seed=1)
    X = rng.standard_normal((16, 5))
    G = rng.standard_normal((12, 5)) + 1j * rng.standard_normal((12, 5))
    dX, dw = ks.vjp(K, X, G)
    assert dX.dtype == numpy.float64 and dw.dtype == numpy.float64
    numpy.testing.assert_allclose(dX, (K.todense().T @ G).real, rtol=1e-12)


@pytest.mark.parametrize("call, error, match", [
    (lambda C, X: ks.gradients.by_factor(C, numpy.ones((20, 3))), ValueError,
     "shape mismatch"),
    (lambda C, X: ks.gradients.by_factor(ks.KSMatrix.random((1, 2, 2, 8)), X), TypeError,
     "by_factor applies a KSChain"),
    (lambda C, X: ks.gradients.by_factor(C, X, layout="xyz"), ValueError, "layout"),
    (lambda C, X: ks.gradients.by_factor(C, X.reshape(16, 3, 1)), ValueError, "1-D or 2-D"),
    (lambda C, X: ks.gradients.by_factor(C, X[:, 0]), ValueError, "2-D batch"),
])
def test_by_factor_checks_its_operand(call, error, match):
    C, X = ks.dft(16), numpy.ones((16, 3), numpy.complex128)
    with pytest.raises(error, match=match):
        call(C, X)


def test_chain_gradients_where_the_free_memory_is_not_known(monkeypatch):
    """Where the host's free memory cannot be read (memory.available_bytes gives None) the
    intermediates are kept."""
    from kscupy.core import memory
    monkeypatch.setattr(memory, "available_bytes", lambda xp: None)
    C = ks.butterfly(16, dtype=numpy.float64, seed=0)
    X = numpy.random.default_rng(4).standard_normal((16, 3))
    dX, dws = ks.vjp(C, X, numpy.ones((16, 3)))
    numpy.testing.assert_allclose(dX, C.todense().T @ numpy.ones((16, 3)), rtol=1e-12)


def test_gradcheck_steps_in_units_of_the_values_scale():
    """Values of any scale pass (the step is eps times their root mean square); NumPy
    scalars are numbers; a bad seed is named."""
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.float64, seed=0)
    for scale in (1e-8, 1e8, 1e12):
        assert ks.testing.gradcheck(K * scale, seed=0)
    assert ks.testing.gradcheck(K, eps=numpy.float32(1e-6), rtol=numpy.float32(1e-6), seed=0)
    with pytest.raises(ValueError, match="seed must be None or a non-negative integer"):
        ks.testing.gradcheck(K, seed=-1)
