"""Kronecker-sparse patterns.

A KS pattern ``(a, b, c, d)`` describes the support ``I_a ⊗ 1_{b×c} ⊗ I_d`` of a matrix of
shape ``(M, N) = (a*b*d, a*c*d)``. Its non-zeros split into ``a*d`` independent dense
``b × c`` blocks, one per *group* ``(i, j)`` (``i < a``, ``j < d``):

    rows(i, j) = { i*b*d + k*d + j : k < b }
    cols(i, j) = { i*c*d + l*d + j : l < c }

and ``Y[rows(i, j)] = K[rows(i, j), cols(i, j)] @ X[cols(i, j)]`` (the output-stationary tiling
of Gonon et al., ICML 2025, Algorithm 2).
"""
from __future__ import annotations

import math
import operator

import numpy

from .argument_checks import positive_int

__all__ = ["KSPattern", "super_pattern", "super_group_lengths"]


class KSPattern(tuple):
    """A Kronecker-sparse pattern ``(a, b, c, d)`` with support ``I_a ⊗ 1_{b×c} ⊗ I_d``.

    Build it with ``KSPattern(a, b, c, d)`` or ``KSPattern.of(obj)`` (which also accepts a
    4-tuple). All four entries are validated positive Python integers.

    Examples
    --------
    >>> p = KSPattern(2, 3, 4, 5)
    >>> p.shape, p.nnz
    ((30, 40), 120)
    >>> p.transpose()
    KSPattern(a=2, b=4, c=3, d=5)
    """

    __slots__ = ()

    def __new__(cls, a, b, c, d):
        if type(a) is type(b) is type(c) is type(d) is int and min(a, b, c, d) >= 1:
            return super().__new__(cls, (a, b, c, d))   # the common case, on hot paths
        values = [positive_int(f"KS pattern entry {name}", v)
                  for name, v in zip("abcd", (a, b, c, d))]
        return super().__new__(cls, values)

    a = property(lambda self: self[0], doc="number of diagonal blocks (``I_a``)")
    b = property(lambda self: self[1], doc="rows of each dense block (``1_{b×c}``)")
    c = property(lambda self: self[2], doc="columns of each dense block (``1_{b×c}``)")
    d = property(lambda self: self[3], doc="size of the inner identity (``I_d``)")

    def __getnewargs__(self):
        return tuple(self)

    @classmethod
    def of(cls, pattern) -> "KSPattern":
        """Return ``pattern`` as a :class:`KSPattern` (accepts a KSPattern or a 4-sequence)."""
        if isinstance(pattern, KSPattern):
            return pattern
        try:
            entries = tuple(pattern)
        except TypeError:
            raise ValueError(f"a KS pattern is a 4-tuple (a, b, c, d), got {pattern!r}") from None
        if len(entries) != 4:
            raise ValueError(f"a KS pattern is a 4-tuple (a, b, c, d), got {pattern!r}")
        return cls(*entries)

    @classmethod
    def list_of(cls, patterns, what="patterns") -> list:
        """``patterns`` (a sequence of patterns, one per factor) as a list of
        :class:`KSPattern`: TypeError for None or a non-sequence, and for one bare pattern
        (four integers) with the fix; ValueError for an empty sequence."""
        if isinstance(patterns, (str, bytes)) or not hasattr(patterns, "__iter__"):
            raise TypeError(f"{what} must be a sequence of patterns (a, b, c, d), got "
                            f"{type(patterns).__name__} {patterns!r}")
        patterns = list(patterns)
        if len(patterns) == 4 and all(isinstance(v, (int, numpy.integer)) for v in patterns):
            raise TypeError(f"{what} is a sequence of patterns, one a factor: wrap the single "
                            f"pattern {tuple(patterns)} as [{tuple(patterns)}]")
        if not patterns:
            raise ValueError(f"{what} is empty: a chain has one pattern a factor at least")
        return [cls.of(p) for p in patterns]

    # -- sizes ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """``(M, N) = (a*b*d, a*c*d)``."""
        a, b, c, d = self           # (unpacked: the properties cost hot paths a call each)
        return (a * b * d, a * c * d)

    @property
    def nnz(self) -> int:
        """Number of entries in the support, ``a*b*c*d``."""
        a, b, c, d = self
        return a * b * c * d

    @property
    def density(self) -> float:
        """Fraction of the ``M × N`` entries in the support, ``1 / (a*d)``."""
        return 1.0 / (self.a * self.d)

    @property
    def h(self) -> float:
        """The paper's memory-overhead heuristic ``h(b, c) = (b + c) / (b*c)``."""
        return (self.b + self.c) / (self.b * self.c)

    @property
    def groups(self) -> int:
        """Number of dense ``b × c`` blocks (output-stationary tiles), ``a*d``."""
        return self.a * self.d

    # -- structure -----------------------------------------------------------------------
    def transpose(self) -> "KSPattern":
        """Pattern of the transpose: ``(a, c, b, d)``."""
        return KSPattern(self.a, self.c, self.b, self.d)

    def tile(self, i: int, j: int) -> tuple[numpy.ndarray, numpy.ndarray]:
        """Row and column indices of group ``(i, j)`` as two int64 NumPy arrays.

        ``rows[k] = i*b*d + k*d + j`` (length ``b``), ``cols[l] = i*c*d + l*d + j`` (length
        ``c``); ``K[rows][:, cols]`` is the group's dense block.
        """
        i, j = operator.index(i), operator.index(j)     # TypeError for non-integers
        if not (0 <= i < self.a and 0 <= j < self.d):
            raise IndexError(f"group (i, j) = ({i}, {j}) is outside a={self.a}, d={self.d}")
        a, b, c, d = self
        rows = i * b * d + numpy.arange(b, dtype=numpy.int64) * d + j
        cols = i * c * d + numpy.arange(c, dtype=numpy.int64) * d + j
        return rows, cols

    def tiles(self):
        """Iterate over ``((i, j), rows, cols)`` for every group, ``i`` outer, ``j`` inner."""
        for i in range(self.a):
            for j in range(self.d):
                yield (i, j), *self.tile(i, j)

    def indices(self, xp=numpy):
        """Row and column index of every support entry, in pre-tiled order.

        Returns two int64 arrays ``rows, cols`` of shape ``(a, d, b, c)`` with
        ``rows[i, j, k, l] = i*b*d + k*d + j`` and ``cols[i, j, k, l] = i*c*d + l*d + j``,
        so that ``D[rows, cols]`` gathers the dense ``b × c`` block of every group ``(i, j)``
        of a dense ``D`` and ``D[rows, cols] = tiles`` scatters them back.
        """
        a, b, c, d = self
        i = xp.arange(a, dtype=xp.int64).reshape(a, 1, 1, 1)
        j = xp.arange(d, dtype=xp.int64).reshape(1, d, 1, 1)
        k = xp.arange(b, dtype=xp.int64).reshape(1, 1, b, 1)
        l = xp.arange(c, dtype=xp.int64).reshape(1, 1, 1, c)
        shape = (a, d, b, c)
        rows = xp.broadcast_to(i * (b * d) + k * d + j, shape)
        cols = xp.broadcast_to(i * (c * d) + l * d + j, shape)
        return rows, cols

    def support(self, xp=numpy) -> "numpy.ndarray":
        """The 0/1 mask ``I_a ⊗ 1_{b×c} ⊗ I_d`` as a dense boolean array of shape ``(M, N)``."""
        a, b, c, d = self
        mask = numpy.kron(numpy.kron(numpy.eye(a), numpy.ones((b, c))), numpy.eye(d)) != 0
        return xp.asarray(mask)

    def chains_with(self, right) -> bool:
        """True when ``K_self @ K_right`` is defined: ``a*c*d`` of self equals ``a*b*d`` of right."""
        right = KSPattern.of(right)
        return self.shape[1] == right.shape[0]

    def __repr__(self) -> str:
        return f"KSPattern(a={self.a}, b={self.b}, c={self.c}, d={self.d})"


def super_pattern(patterns) -> tuple:
    """``(AS, DS)`` for a run of chained patterns: every factor is ``I_AS ⊗ (dense) ⊗ I_DS``
    with ``AS = gcd(a)`` and ``DS = gcd(d)``, so the run acts independently on ``AS*DS``
    *super-groups*, super-group ``(i', j')`` holding the elements ``i'*n*DS + t*DS + j'``
    (``t < n``) of a vector of length ``AS*n*DS``."""
    return (math.gcd(*[p.a for p in patterns]), math.gcd(*[p.d for p in patterns]))


def super_group_lengths(pattern, AS: int, DS: int) -> tuple:
    """``(n_in, n_out)``: the lengths of one super-group of ``(AS, DS)`` at the input and
    the output of a factor of ``pattern`` (``AS`` divides ``a``, ``DS`` divides ``d``)."""
    a, b, c, d = pattern
    return (a // AS) * c * (d // DS), (a // AS) * b * (d // DS)
