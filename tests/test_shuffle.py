import numpy
import pytest
from hypothesis import given, strategies as st

import kscupy as ks
from conftest import dense_oracle, random_array, to_numpy

small = st.integers(1, 6)


@given(small, small)
def test_perfect_shuffle_definition(p, q):
    x = numpy.arange(p * q) * 3 + 1
    numpy.testing.assert_array_equal(x[ks.perfect_shuffle(p, q)], x.reshape(p, q).T.ravel())
    # inverse undoes it, and P_{p,q}^{-1} = P_{q,p}
    numpy.testing.assert_array_equal(x[ks.perfect_shuffle(p, q)][ks.inverse_perfect_shuffle(p, q)], x)
    numpy.testing.assert_array_equal(ks.inverse_perfect_shuffle(p, q), ks.perfect_shuffle(q, p))


@given(small, small)
def test_perfect_shuffle_matrix(p, q):
    P = ks.perfect_shuffle_matrix(p, q)
    x = numpy.random.default_rng(p * 7 + q).standard_normal(p * q)
    numpy.testing.assert_array_equal(P @ x, x.reshape(p, q).T.ravel())
    numpy.testing.assert_array_equal(P.T, ks.perfect_shuffle_matrix(q, p))
    numpy.testing.assert_array_equal(P @ P.T, numpy.eye(p * q))


@given(small, small, small)
def test_van_loan_identity(b, c, d):
    """P_{b,d} (1_{b×c} ⊗ I_d) P_{c,d}^T = I_d ⊗ 1_{b×c} in kscupy's convention."""
    lhs = ks.perfect_shuffle_matrix(b, d) @ numpy.kron(numpy.ones((b, c)), numpy.eye(d)) \
        @ ks.perfect_shuffle_matrix(c, d).T
    numpy.testing.assert_array_equal(lhs, numpy.kron(numpy.eye(d), numpy.ones((b, c))))


def test_bit_reversal():
    numpy.testing.assert_array_equal(ks.bit_reversal(8), [0, 4, 2, 6, 1, 5, 3, 7])
    numpy.testing.assert_array_equal(ks.bit_reversal(1), [0])
    for n in (2, 16, 1024):
        r = ks.bit_reversal(n)
        numpy.testing.assert_array_equal(r[r], numpy.arange(n))   # an involution
        bits = n.bit_length() - 1
        for i in (0, 1, n // 3, n - 1):
            assert r[i] == int(format(i, f"0{bits}b")[::-1], 2)
    with pytest.raises(ValueError, match="power of two"):
        ks.bit_reversal(12)


def test_shuffle_bad_sizes():
    for bad, error in ((0, ValueError), (-1, ValueError), (2.0, TypeError), (True, TypeError),
                       ("2", TypeError), (None, TypeError), (numpy.array([2]), TypeError)):
        with pytest.raises(error, match="positive integer"):
            ks.perfect_shuffle(bad, 2)


def test_numpy_integer_sizes_are_sizes():
    """NumPy integer scalars and 0-d arrays are converted at once: no int8 arithmetic wraps."""
    expected = ks.perfect_shuffle(3, 100)
    numpy.testing.assert_array_equal(ks.perfect_shuffle(numpy.int8(3), numpy.int8(100)),
                                     expected)
    numpy.testing.assert_array_equal(ks.perfect_shuffle(numpy.array(3), numpy.uint8(100)),
                                     expected)
    numpy.testing.assert_array_equal(ks.bit_reversal(numpy.int64(8)), ks.bit_reversal(8))
    assert ks.perfect_shuffle_matrix(numpy.int8(16), numpy.int8(16)).shape == (256, 256)


@pytest.mark.parametrize("bad, error, message", [
    (numpy.array([2, 2, 2, 2]), ValueError, "not a permutation"),
    (numpy.array([0, 0, 1]), ValueError, "not a permutation"),
    (numpy.array([0, 1, 5]), ValueError, "not a permutation"),
    (numpy.array([0, -1, 1]), ValueError, "not a permutation"),
    (numpy.array([0.0, 1.0]), TypeError, "integer array"),
    (numpy.array([[0, 1]]), ValueError, "shape"),
    ([1, 0], TypeError, "is a list: pass numpy.asarray"),
    (numpy.ma.masked_array([1, 0]), TypeError, "masked array as the permutation")])
def test_inverse_permutation_checks_its_argument(bad, error, message):
    with pytest.raises(error, match=message):
        ks.inverse_permutation(bad)


def test_inverse_permutation_inverts():
    perm = numpy.random.default_rng(4).permutation(37)
    x = numpy.arange(37) * 3
    numpy.testing.assert_array_equal(x[perm][ks.inverse_permutation(perm)], x)


@given(small, small, small, small, st.integers(0, 2**31))
def test_block_diagonalize_identity(a, b, c, d, seed):
    """(I_a ⊗ P_{b,d}) K (I_a ⊗ P_{c,d})^T is block diagonal with the group blocks."""
    rng = numpy.random.default_rng(seed)
    w = random_array(rng, (a, b, c, d), numpy.float64)
    D = dense_oracle(w).real
    R = numpy.kron(numpy.eye(a), ks.perfect_shuffle_matrix(b, d))
    C = numpy.kron(numpy.eye(a), ks.perfect_shuffle_matrix(c, d))
    permuted = R @ D @ C.T
    blocks, row_perm, col_perm = ks.block_diagonalize(D, (a, b, c, d))
    assert blocks.shape == (a * d, b, c)
    expected = numpy.zeros_like(permuted)
    for g in range(a * d):
        expected[g * b:(g + 1) * b, g * c:(g + 1) * c] = blocks[g]
        numpy.testing.assert_array_equal(blocks[g], w[g // d, :, :, g % d])
    numpy.testing.assert_array_equal(permuted, expected)
    numpy.testing.assert_array_equal(D[row_perm][:, col_perm], expected)
    # and back: K = R^T blockdiag C
    numpy.testing.assert_array_equal(R.T @ expected @ C, D)


def test_block_diagonalize_cupy_and_errors(xp):
    rng = numpy.random.default_rng(3)
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 2), numpy.float32)))
    blocks, _, _ = ks.block_diagonalize(K.todense(), K.pattern)
    numpy.testing.assert_array_equal(to_numpy(blocks),
                                     to_numpy(K.values).transpose(0, 3, 1, 2).reshape(4, 3, 4))
    with pytest.raises(ValueError, match="does not match pattern"):
        ks.block_diagonalize(K.todense()[1:], K.pattern)


@pytest.mark.parametrize("host_elements", [0, 1 << 16], ids=["on_device", "on_host"])
def test_inverse_permutation(xp, rng, monkeypatch, host_elements):
    # small CuPy permutations are inverted on the host, larger ones with CuPy: both paths
    from kscupy.core import arrays
    monkeypatch.setattr(arrays, "HOST_ELEMENTS", host_elements)
    for dtype in (numpy.int32, numpy.int64):
        perm = rng.permutation(1000).astype(dtype)
        inv = ks.inverse_permutation(xp.asarray(perm), xp)
        assert type(inv) is type(xp.asarray(perm)) and inv.dtype == dtype
        expected = numpy.argsort(perm)                # an independent inverse
        numpy.testing.assert_array_equal(to_numpy(inv), expected)
