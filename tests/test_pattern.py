import numpy
import pytest
from hypothesis import given, strategies as st

from kscupy import KSPattern
from conftest import dense_oracle

small = st.integers(min_value=1, max_value=6)


@given(small, small, small, small)
def test_sizes(a, b, c, d):
    p = KSPattern(a, b, c, d)
    assert p.shape == (a * b * d, a * c * d)
    assert p.nnz == a * b * c * d
    assert p.density == pytest.approx(1 / (a * d))
    assert p.h == pytest.approx((b + c) / (b * c))
    assert p.groups == a * d
    assert p.transpose() == (a, c, b, d)
    assert (p.a, p.b, p.c, p.d) == (a, b, c, d)


@given(small, small, small, small)
def test_support_matches_definition(a, b, c, d):
    p = KSPattern(a, b, c, d)
    ones = numpy.ones((a, b, c, d))
    expected = numpy.kron(numpy.kron(numpy.eye(a), numpy.ones((b, c))), numpy.eye(d)) != 0
    numpy.testing.assert_array_equal(p.support(), expected)
    numpy.testing.assert_array_equal(dense_oracle(ones) != 0, expected)
    assert p.support().sum() == p.nnz


@given(small, small, small, small)
def test_tiles_partition_rows_and_cols_and_cover_support(a, b, c, d):
    p = KSPattern(a, b, c, d)
    S = p.support()
    seen_rows, seen_cols = [], []
    for (i, j), rows, cols in p.tiles():
        assert len(rows) == b and len(cols) == c
        # every row of the tile has exactly the tile's columns as support
        for r in rows:
            numpy.testing.assert_array_equal(numpy.flatnonzero(S[r]), numpy.sort(cols))
        seen_rows.extend(rows)
        seen_cols.extend(cols)
    assert sorted(seen_rows) == list(range(p.shape[0]))
    assert sorted(seen_cols) == list(range(p.shape[1]))


def test_tile_formula():
    p = KSPattern(2, 3, 2, 3)   # the paper's Figure 5 example
    rows, cols = p.tile(0, 1)
    assert list(rows) == [1, 4, 7] and list(cols) == [1, 4]
    rows, cols = p.tile(1, 1)
    assert list(rows) == [10, 13, 16] and list(cols) == [7, 10]
    with pytest.raises(IndexError):
        p.tile(2, 0)


def test_indices_gather_blocks():
    p = KSPattern(2, 3, 4, 2)
    rows, cols = p.indices()
    assert rows.shape == cols.shape == (2, 2, 3, 4)
    for (i, j), r, c in p.tiles():
        numpy.testing.assert_array_equal(rows[i, j], numpy.repeat(r[:, None], 4, axis=1))
        numpy.testing.assert_array_equal(cols[i, j], numpy.repeat(c[None, :], 3, axis=0))


def test_chaining():
    left, right = KSPattern(2, 4, 3, 2), KSPattern(3, 2, 5, 2)   # 2*3*2 == 3*2*2
    assert left.chains_with(right)
    assert not right.chains_with(left)


@pytest.mark.parametrize("bad", [(0, 1, 1, 1), (1, -2, 1, 1), (numpy.int64(0), 1, 1, 1)])
def test_invalid_entries(bad):
    with pytest.raises(ValueError, match="positive integer"):
        KSPattern(*bad)


@pytest.mark.parametrize("bad", [(1, 1.5, 1, 1), (1, True, 1, 1), (1, "2", 1, 1),
                                 (1, 1, 1, float("nan")), (1, None, 1, 1), (2.0, 1, 1, 1)])
def test_entries_of_another_type(bad):
    with pytest.raises(TypeError, match="positive integer"):
        KSPattern(*bad)


@pytest.mark.parametrize("bad", [(1, 2, 3), 5, (1, 2, 3, 4, 5)])
def test_invalid_of(bad):
    with pytest.raises(ValueError, match="4-tuple"):
        KSPattern.of(bad)


def test_numpy_integers_accepted_and_normalised():
    p = KSPattern(numpy.int64(2), numpy.int32(3), 4, 5)
    assert all(type(v) is int for v in p)
    assert KSPattern.of([2, 3, 4, 5]) == p
