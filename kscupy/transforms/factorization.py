"""Dense-to-KS factorisation: the chain of given KS patterns that approximates a dense matrix.

This is the hierarchical (here: left-to-right) projection algorithm for butterfly and KS
chains of Zheng, Riccietti and Gribonval (hierarchical identification of butterfly
factorisations) and Le, Zheng, Riccietti and Gribonval ("Butterfly factorization with error
guarantees", arXiv:2411.04506, 2024), derived here from the block structure below.

**Two factors.** Let ``K_1`` have pattern ``(a1, b1, c1, d1)`` and ``K_2`` pattern
``(a2, b2, c2, d2)``, with ``a1 c1 d1 = a2 b2 d2``. They *chain* when ``a1 | a2``,
``d2 | d1`` and ``alpha = a2/a1`` divides ``c1``; write ``delta = d1/d2`` and
``r = c1/alpha`` (then ``b2 = r delta``). The middle index then splits in one mixed radix for
both factors, ``t = (i1, u, s, v, j2)`` of radix ``(a1, alpha, r, delta, d2)``, and

    ``(K_1 K_2)[(i1, k1, v, j2), (i1, u, l2, j2)] = sum_{s<r} w1[i1, k1, u r + s, v d2 + j2]
    * w2[i1 alpha + u, s delta + v, l2, j2]``

(row ``(i1, k1, v, j2)`` of radix ``(a1, b1, delta, d2)``, column ``(i1, u, l2, j2)`` of radix
``(a1, alpha, c2, d2)``). So the product has the KS pattern
``(a1, b1 delta, alpha c2, d2)`` (:func:`product_pattern`) and, inside each of its groups
``(i1, j2)``, the ``alpha delta`` sub-blocks ``(v, u)`` of size ``b1 x c2`` are products of
rank at most ``r`` whose parameters are disjoint. The best approximation of ``D`` by
``K_1 K_2`` is therefore the truncated SVD (rank ``r``) of every sub-block of ``D``, and it is
exact when ``D`` is such a product.

**L factors.** For patterns ``beta_1 ... beta_L`` the suffixes ``S_k = beta_k S_{k+1}`` must
be KS patterns, each step chaining in the sense above. The algorithm projects ``D`` on the
support of ``S_1`` and, for ``k = 1 .. L-1``, splits the current ``S_k``-matrix as
``beta_k x S_{k+1}`` by the two-factor step, keeping the left factor's sub-blocks
orthonormal (``U``) and handing ``Sigma V^H`` to the next step. With orthonormal ``U`` the map
``Z -> K_1 ... K_k Z`` preserves the Frobenius norm on matrices supported by ``S_{k+1}``, and
each step's error is orthogonal to what later steps change, so

    ``||D - C||_F^2 = e_1^2 + ... + e_{L-1}^2``,

``e_k`` being the error of step ``k``. Step ``k`` approximates a contraction of ``D`` (the
sub-blocks multiplied by ``U^H``), so ``e_k`` is at most the error of the best two-factor
approximation of ``D`` by ``(beta_1 ... beta_k) x (beta_{k+1} ... beta_L)``, itself at most
the best error over all chains of the given patterns (every chain is such a product). Hence

    ``||D - C||_F <= sqrt(L - 1) * min over chains ||D - K_1 ... K_L||_F``

(the same argument and constant as for the tensor-train SVD); for ``L = 2`` the result is
optimal and for ``L = 1`` it is the projection on the support. tests/test_factorization.py
checks the bound against an independent per-block SVD oracle.
"""
from __future__ import annotations

import numpy

from ..core import arrays
from ..operators.chain import KSChain
from ..operators.matrix import KSMatrix
from ..core.pattern import KSPattern

__all__ = ["factorize", "product_pattern"]


def _chain_parameters(left, right):
    """``(alpha, delta, r)`` of two chaining patterns, or ValueError naming the condition."""
    a1, b1, c1, d1 = left
    a2, b2, c2, d2 = right
    if a1 * c1 * d1 != a2 * b2 * d2:
        raise ValueError(f"patterns {tuple(left)} and {tuple(right)} cannot be multiplied: "
                         f"{tuple(left)} has {a1 * c1 * d1} columns but {tuple(right)} has "
                         f"{a2 * b2 * d2} rows")
    if a2 % a1 or d1 % d2 or c1 % (a2 // a1):
        raise ValueError(f"patterns {tuple(left)} and {tuple(right)} do not chain: their product "
                         f"is a KS pattern with rank-r blocks only when a1 divides a2 "
                         f"({a1} | {a2}), d2 divides d1 ({d2} | {d1}) and a2/a1 divides c1")
    alpha, delta = a2 // a1, d1 // d2
    return alpha, delta, c1 // alpha


def product_pattern(left, right) -> KSPattern:
    """The KS pattern ``(a1, b1 d1/d2, c2 a2/a1, d2)`` of the product of matrices of two
    chaining patterns (module docstring); ValueError when they do not chain.

    Examples
    --------
    >>> from kscupy.transforms.factorization import product_pattern
    >>> product_pattern((1, 2, 2, 4), (2, 4, 4, 1))      # butterfly stages merge
    KSPattern(a=1, b=8, c=8, d=1)
    """
    left, right = KSPattern.of(left), KSPattern.of(right)
    alpha, delta, _ = _chain_parameters(left, right)
    return KSPattern(left.a, left.b * delta, alpha * right.c, right.d)


def _project(D, pattern):
    """Canonical values ``w[i, k, l, j] = D[i*b*d + k*d + j, i*c*d + l*d + j]`` of the
    projection of the dense ``D`` onto the support of ``pattern``."""
    a, b, c, d = pattern
    D6 = D.reshape(a, b, d, a, c, d)                       # axes (i, k, j, i', l, j')
    return D6.diagonal(axis1=0, axis2=3).diagonal(axis1=1, axis2=3).transpose(2, 0, 1, 3)


def _split(W, left, right, xp):
    """Best ``K_1 K_2`` for the values ``W`` of pattern ``product_pattern(left, right)``:
    rank-``r`` truncated SVD of every sub-block; ``K_1``'s sub-blocks are orthonormal."""
    a1, b1, _, _ = left
    _, _, c2, d2 = right
    alpha, delta, r = _chain_parameters(left, right)
    # W[i1, k1*delta + v, u*c2 + l2, j2]: sub-block (i1, j2, v, u) is b1 x c2
    blocks = W.reshape(a1, b1, delta, alpha, c2, d2).transpose(0, 5, 2, 3, 1, 4)
    U, s, Vh = xp.linalg.svd(blocks, full_matrices=False)
    k = min(r, b1, c2)                  # a rank above min(b1, c2) adds zero columns
    A = xp.zeros(blocks.shape[:4] + (b1, r), dtype=W.dtype)
    B = xp.zeros(blocks.shape[:4] + (r, c2), dtype=W.dtype)
    A[..., :k] = U[..., :k]
    B[..., :k, :] = s[..., :k, None].astype(W.dtype) * Vh[..., :k, :]
    # w1[i1, k1, u*r + s, v*d2 + j2] = A[i1, j2, v, u, k1, s]
    w1 = A.transpose(0, 4, 3, 5, 2, 1).reshape(a1, b1, alpha * r, delta * d2)
    # w2[i1*alpha + u, s*delta + v, l2, j2] = B[i1, j2, v, u, s, l2]
    w2 = B.transpose(0, 3, 4, 2, 5, 1).reshape(a1 * alpha, r * delta, c2, d2)
    return w1, w2


def _butterfly_patterns(D):
    n = D.shape[0]
    if D.shape[0] != D.shape[1] or n & (n - 1):
        raise ValueError(f'factorize(D, "butterfly") needs a square matrix whose size is a '
                         f"power of two, got shape {D.shape}")
    L = n.bit_length() - 1
    return [(2 ** (l - 1), 2, 2, 2 ** (L - l)) for l in range(1, L + 1)] or [(1, 1, 1, 1)]


def factorize(D, patterns) -> KSChain:
    """The KS chain with the given patterns that approximates the dense matrix ``D``.

    Left-to-right hierarchical projection (module docstring): every step is a batch of
    truncated SVDs (``xp.linalg.svd``, on the GPU when ``D`` is a CuPy array).

    Guarantees: exact (to rounding) when ``D`` is a product of matrices with these patterns;
    optimal for two factors; in general ``||D - C||_F <= sqrt(L - 1)`` times the best error
    over all chains with these patterns.

    Parameters
    ----------
    D : numpy.ndarray or cupy.ndarray of shape ``(M, N)`` with finite entries, dtype float16 (or bfloat16),
        float32, float64, complex64 or complex128 (the factors get the same dtype and array
        module; a float16 ``D`` is factorized in float32, as LAPACK has no float16, and the
        factors are rounded to float16).
    patterns : sequence of ``L`` patterns ``(a, b, c, d)`` whose chain has shape ``(M, N)``,
        in which every pattern chains with the product of the patterns after it: ``a_k``
        divides ``a`` of that product, its ``d`` divides ``d_k``, and the ratio of the ``a``'s
        divides ``c_k``. Square dyadic butterflies ``(2^(l-1), 2, 2, 2^(L-l))``, block
        butterflies, Monarch ``(1, M/p, k, p), (p, k, N/p, 1)`` with ``p | k``, low rank and
        the DFT's mixed-radix patterns qualify. Or the string ``"butterfly"``: the square
        dyadic chain of size ``M`` (a power of two).

    Returns
    -------
    KSChain of ``L`` factors with ``patterns``, shape ``(M, N)``.

    Raises
    ------
    ValueError naming the problem when the patterns do not chain or do not match ``D.shape``,
    or when ``D`` holds NaN or infinity; TypeError for an unsupported array type or dtype.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> H = ks.hadamard(16).todense()
    >>> C = ks.factorize(H, "butterfly")
    >>> C.patterns[0], bool(np.allclose(C.todense(), H))
    (KSPattern(a=1, b=2, c=2, d=8), True)
    """
    xp = arrays.plain_array_module(D, "matrix to factorize")
    arrays.check_dtype(D.dtype)
    if D.ndim != 2:
        raise ValueError(f"factorize needs a 2-D matrix, got shape {D.shape}")
    if isinstance(patterns, str):
        if patterns != "butterfly":
            raise ValueError(f'patterns must be a sequence of patterns or "butterfly", '
                             f"got {patterns!r}")
        patterns = _butterfly_patterns(D)
    patterns = KSPattern.list_of(patterns)
    if D.size == 0:
        raise ValueError(f"factorize needs a non-empty matrix, got shape {D.shape}")
    for k in range(len(patterns) - 1):
        left, right = patterns[k], patterns[k + 1]
        if not left.chains_with(right):
            raise ValueError(f"patterns {k} and {k + 1} cannot be multiplied: {tuple(left)} has "
                             f"{left.shape[1]} columns but {tuple(right)} has {right.shape[0]} rows")
    suffixes = [patterns[-1]]                   # suffixes[k] = product of patterns[k:]
    for k in range(len(patterns) - 2, -1, -1):
        try:
            suffixes.insert(0, product_pattern(patterns[k], suffixes[0]))
        except ValueError as exc:
            raise ValueError(f"pattern {k} {tuple(patterns[k])} does not chain with the product "
                             f"{tuple(suffixes[0])} of patterns {k + 1}..{len(patterns) - 1}: "
                             f"{exc}") from None
    if tuple(D.shape) != suffixes[0].shape:
        raise ValueError(f"D has shape {tuple(D.shape)} but the chain of patterns has shape "
                         f"{suffixes[0].shape}")
    if not bool(xp.isfinite(D).all()):
        raise ValueError("factorize needs a matrix of finite entries; D holds NaN or infinity")
    dtype = D.dtype
    if arrays.is_half(dtype):           # the SVDs run in float32 (LAPACK has no 16-bit)
        D = D.astype(numpy.float32)
    W = _project(D, suffixes[0])
    values = []
    for k in range(len(patterns) - 1):
        left_values, W = _split(W, patterns[k], suffixes[k + 1], xp)
        values.append(left_values)
    values.append(W)
    return KSChain([KSMatrix(xp.ascontiguousarray(w, dtype=dtype)) for w in values])
