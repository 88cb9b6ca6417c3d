"""Perfect shuffles, bit reversal, and the block-diagonalisation of a KS matrix.

Convention (used everywhere in kscupy): the perfect shuffle ``P_{p,q}`` is the ``pq × pq``
permutation matrix with

    ``P_{p,q} @ x == x.reshape(p, q).T.ravel()``

(write ``x`` row by row into a ``p × q`` array, read it column by column). As a gather it is
``x[perfect_shuffle(p, q)]``. Its inverse is its transpose, ``P_{p,q}.T == P_{q,p}``.

Block-diagonalisation (paper Appendix C, in this convention). For a KS matrix ``K`` of
pattern ``(a, b, c, d)``, with ``R = I_a ⊗ P_{b,d}`` and ``C = I_a ⊗ P_{c,d}``,

    ``R @ K @ C.T == block_diag(K_0, ..., K_{ad-1})``

with ``a*d`` dense ``b × c`` blocks; block ``g = i*d + j`` is the block of group ``(i, j)``.
Equivalently ``K == R.T @ block_diag(...) @ C``.
"""
from __future__ import annotations

import numpy

from . import arrays, memory
from .argument_checks import positive_int
from .pattern import KSPattern

__all__ = ["perfect_shuffle", "inverse_perfect_shuffle", "inverse_permutation", "check_permutation", "perfect_shuffle_matrix",
           "bit_reversal", "block_diagonal_permutations", "block_diagonalize"]


def check_permutation(perm, n=None, what="the permutation"):
    """``perm`` if it is a permutation of ``range(n)`` (``n``: its length when None): a 1-D
    NumPy or CuPy array of an integer dtype holding each index once. TypeError for another
    type or dtype, ValueError naming ``what`` otherwise. A large CuPy permutation is checked
    on the GPU (one synchronization)."""
    if isinstance(perm, (list, tuple)):
        raise TypeError(f"{what} is a {type(perm).__name__}: pass numpy.asarray(perm) (or "
                        f"cupy.asarray(perm)) of an integer dtype")
    arrays.plain_array_module(perm, what)          # TypeError for any other array type
    if perm.dtype.kind not in "iu":
        raise TypeError(f"{what} must be an integer array, got dtype {perm.dtype}")
    if perm.ndim != 1:
        raise ValueError(f"{what} must be a 1-D integer array, got shape {perm.shape}")
    n = perm.shape[0] if n is None else n
    if perm.shape[0] != n:
        raise ValueError(f"{what} must be an integer array of shape ({n},), got shape "
                         f"{perm.shape}")
    small = arrays.on_host_if_small(perm)     # checked on the host when small
    module = arrays.array_module(small)
    if not bool((module.sort(small) == module.arange(n)).all()):
        raise ValueError(f"{what} is not a permutation of range({n}): an index repeats or "
                         f"lies outside")
    return perm


def inverse_permutation(perm, xp=numpy):
    """Gather indices of the inverse of the gather ``perm``: ``x[perm][inv] == x``, in the
    array module ``xp`` and the dtype of ``perm`` (a small CuPy permutation is inverted on
    the host, see :data:`kscupy.arrays.HOST_ELEMENTS`). ``perm`` must be a permutation
    (:func:`check_permutation`)."""
    perm = arrays.on_host_if_small(check_permutation(perm))
    module = arrays.array_module(perm)
    inv = module.empty_like(perm)
    inv[perm] = module.arange(perm.shape[0], dtype=perm.dtype)
    return xp.asarray(inv)


def int32_indices(perm, inverse: bool = False):
    """The gather ``perm`` (or with ``inverse``, its inverse) as int32 indices for a kernel,
    in ``perm``'s array module (a small CuPy permutation is cast on the host: no CuPy cast
    kernel to compile on first use)."""
    table = arrays.on_host_if_small(perm).astype(numpy.int32)
    xp = arrays.array_module(perm)
    return inverse_permutation(table, xp) if inverse else xp.asarray(table)


def perfect_shuffle(p: int, q: int, xp=numpy):
    """Gather indices of ``P_{p,q}``: ``x[perfect_shuffle(p, q)] == x.reshape(p, q).T.ravel()``.

    Returns an int64 array of length ``p*q`` (in the array module ``xp``).

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> ks.perfect_shuffle(2, 3)
    array([0, 3, 1, 4, 2, 5])
    >>> x = np.array([10, 11, 12, 13, 14, 15])
    >>> x[ks.perfect_shuffle(2, 3)], x.reshape(2, 3).T.ravel()
    (array([10, 13, 11, 14, 12, 15]), array([10, 13, 11, 14, 12, 15]))
    """
    p, q = positive_int("p", p), positive_int("q", q)
    memory.check_fits(8 * p * q, xp, f"perfect_shuffle({p}, {q}) ({p * q:,} int64 indices)")
    return xp.arange(p * q, dtype=xp.int64).reshape(p, q).T.ravel()


def inverse_perfect_shuffle(p: int, q: int, xp=numpy):
    """Gather indices of ``P_{p,q}^{-1} = P_{q,p}``: undoes :func:`perfect_shuffle`.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> x = np.arange(6) * 10
    >>> shuffled = x[ks.perfect_shuffle(2, 3)]
    >>> shuffled[ks.inverse_perfect_shuffle(2, 3)]
    array([ 0, 10, 20, 30, 40, 50])"""
    return perfect_shuffle(q, p, xp)


def perfect_shuffle_matrix(p: int, q: int, dtype=numpy.float64, xp=numpy):
    """The dense ``pq × pq`` permutation matrix ``P_{p,q}`` (``P @ x == x[perfect_shuffle(p, q)]``).

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> P = ks.perfect_shuffle_matrix(2, 2)
    >>> P
    array([[1., 0., 0., 0.],
           [0., 0., 1., 0.],
           [0., 1., 0., 0.],
           [0., 0., 0., 1.]])
    >>> bool(np.array_equal(ks.perfect_shuffle_matrix(2, 3).T, ks.perfect_shuffle_matrix(3, 2)))
    True"""
    p, q = positive_int("p", p), positive_int("q", q)
    memory.check_fits(numpy.dtype(dtype).itemsize * (p * q) ** 2, xp,
                      f"perfect_shuffle_matrix({p}, {q}) ({p * q} x {p * q} dense)")
    idx = perfect_shuffle(p, q, xp)
    P = xp.zeros((p * q, p * q), dtype=dtype)
    P[xp.arange(p * q), idx] = 1
    return P


def bit_reversal(n: int, xp=numpy):
    """Bit-reversal permutation of ``range(n)`` for ``n`` a power of two.

    ``bit_reversal(8) == [0, 4, 2, 6, 1, 5, 3, 7]``; it is its own inverse. ``x[bit_reversal(n)]``
    is the input order of a radix-2 decimation-in-time FFT.

    Examples
    --------
    >>> import kscupy as ks
    >>> ks.bit_reversal(8)
    array([0, 4, 2, 6, 1, 5, 3, 7])
    >>> ks.bit_reversal(8)[ks.bit_reversal(8)]
    array([0, 1, 2, 3, 4, 5, 6, 7])
    """
    n = positive_int("n", n)
    memory.check_fits(2 * 8 * n, xp, f"bit_reversal({n}) (two int64 arrays of {n:,})")
    if n & (n - 1):
        raise ValueError(f"bit_reversal needs a power of two, got {n}")
    bits = n.bit_length() - 1
    idx = numpy.arange(n, dtype=numpy.int64)
    rev = numpy.zeros(n, dtype=numpy.int64)
    for t in range(bits):
        rev |= ((idx >> t) & 1) << (bits - 1 - t)
    return xp.asarray(rev)


def block_diagonal_permutations(pattern, xp=numpy):
    """Gather indices ``(row_perm, col_perm)`` of ``R = I_a ⊗ P_{b,d}`` and ``C = I_a ⊗ P_{c,d}``.

    For a dense KS matrix ``D`` of this pattern, ``D[row_perm][:, col_perm]`` is block
    diagonal with ``a*d`` dense ``b × c`` blocks (see the module docstring).

    Examples
    --------
    >>> import kscupy as ks
    >>> rows, cols = ks.block_diagonal_permutations((1, 2, 3, 2))
    >>> rows, cols
    (array([0, 2, 1, 3]), array([0, 2, 4, 1, 3, 5]))
    """
    a, b, c, d = KSPattern.of(pattern)
    offsets_r = xp.arange(a, dtype=xp.int64)[:, None] * (b * d)
    offsets_c = xp.arange(a, dtype=xp.int64)[:, None] * (c * d)
    row_perm = (offsets_r + perfect_shuffle(b, d, xp)[None, :]).ravel()
    col_perm = (offsets_c + perfect_shuffle(c, d, xp)[None, :]).ravel()
    return row_perm, col_perm


def block_diagonalize(D, pattern):
    """Block-diagonalise a dense KS matrix with perfect shuffles (paper Appendix C).

    Parameters
    ----------
    D : array of shape ``(a*b*d, a*c*d)`` (NumPy or CuPy) supported on the pattern.
    pattern : ``(a, b, c, d)``.

    Returns
    -------
    blocks : array of shape ``(a*d, b, c)``, ``blocks[i*d + j]`` the block of group ``(i, j)``.
    row_perm, col_perm : the gather indices of :func:`block_diagonal_permutations`, so that
        ``D[row_perm][:, col_perm] == block_diag(*blocks)``; entries of ``D`` outside the
        support are dropped.

    Examples
    --------
    >>> import numpy as np, scipy.linalg, kscupy as ks
    >>> K = ks.KSMatrix.random((2, 3, 4, 5), dtype=np.float64, seed=0)
    >>> blocks, rows, cols = ks.block_diagonalize(K.todense(), K.pattern)
    >>> blocks.shape
    (10, 3, 4)
    >>> bool(np.array_equal(K.todense()[rows][:, cols], scipy.linalg.block_diag(*blocks)))
    True
    """
    arrays.plain_array_module(D, "the matrix to block-diagonalise")
    pattern = KSPattern.of(pattern)
    if D.ndim != 2 or D.shape != pattern.shape:
        raise ValueError(f"matrix of shape {D.shape} does not match pattern {tuple(pattern)}, "
                         f"whose shape is {pattern.shape}")
    from .arrays import array_module
    xp = array_module(D)
    a, b, c, d = pattern
    row_perm, col_perm = block_diagonal_permutations(pattern, xp)
    permuted = D[row_perm][:, col_perm].reshape(a * d, b, a * d, c)
    g = xp.arange(a * d)
    blocks = permuted[g, :, g, :]
    return blocks, row_perm, col_perm
