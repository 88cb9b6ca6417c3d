"""Array-generic KS multiplication algorithms (paper Appendix A), for NumPy and CuPy alike.

Each function computes the action of one KS matrix ``K`` (pattern ``(a, b, c, d)``, shape
``(M, N)``) on a batch, in one of two layouts:

* ``"bsl"`` (batch-size-last): ``X`` of shape ``(N, B)``, returns ``K @ X`` of shape ``(M, B)``;
* ``"bsf"`` (batch-size-first): ``X`` of shape ``(B, N)``, returns ``X @ K.T`` of shape ``(B, M)``.

``blocks`` is the array of shape ``(a, d, b, c)`` whose ``[i, j]`` entry is the dense block
``K[rows(i, j)][:, cols(i, j)]`` (see :mod:`kscupy.core.pattern`); it may be any strided view.
The operands must already share the result dtype: these functions never cast.

They serve as the CPU implementation, as fallbacks and baselines on the GPU, and as the
oracles' building blocks in the tests (which check them against a dense float64 product
built from the definition).
"""
from __future__ import annotations

from .pattern import KSPattern

__all__ = ["bmm", "einsum", "dense", "sparse", "todense", "tocsr", "blocks_gradient"]


def _pattern_of(blocks) -> KSPattern:
    a, d, b, c = blocks.shape
    return KSPattern(a, b, c, d)


def bmm(blocks, X, layout, xp):
    """Permute / batched matmul / permute (the Monarch "BMM" algorithm).

    BSL: ``X (N, B)`` viewed as ``(a, c, d, B)`` is permuted to ``(a, d, c, B)`` so that each
    group's ``c`` input rows are contiguous; one batched product with the ``(a, d, b, c)``
    blocks gives ``(a, d, b, B)``, permuted back to ``(a, b, d, B)`` = ``(M, B)``.
    BSF is the same with the batch axis first.
    """
    a, b, c, d = _pattern_of(blocks)
    if layout == "bsl":
        B = X.shape[1]
        Xp = xp.ascontiguousarray(X.reshape(a, c, d, B).transpose(0, 2, 1, 3))  # (a, d, c, B)
        Yp = xp.matmul(blocks, Xp)                                               # (a, d, b, B)
        return xp.ascontiguousarray(Yp.transpose(0, 2, 1, 3)).reshape(a * b * d, B)
    B = X.shape[0]
    Xp = xp.ascontiguousarray(X.reshape(B, a, c, d).transpose(1, 3, 0, 2))       # (a, d, B, c)
    Yp = xp.matmul(Xp, blocks.swapaxes(-1, -2))                                  # (a, d, B, b)
    return xp.ascontiguousarray(Yp.transpose(2, 0, 3, 1)).reshape(B, a * b * d)


def einsum(blocks, X, layout, xp):
    """One tensor contraction over the ``(a, c, d)`` view of the input (Appendix A, EINSUM)."""
    a, b, c, d = _pattern_of(blocks)
    if layout == "bsl":
        B = X.shape[1]
        Y = xp.einsum("ijkl,iljn->ikjn", blocks, X.reshape(a, c, d, B))
        return Y.reshape(a * b * d, B)
    B = X.shape[0]
    Y = xp.einsum("ijkl,nilj->nikj", blocks, X.reshape(B, a, c, d))
    return Y.reshape(B, a * b * d)


def dense(D, X, layout, xp):
    """Product with the dense ``(M, N)`` matrix ``D`` (cuBLAS GEMM on the GPU)."""
    return D @ X if layout == "bsl" else X @ D.T


def sparse(S, X, layout, xp):
    """Product with the CSR matrix ``S`` (scipy.sparse on the CPU, cuSPARSE on the GPU)."""
    if layout == "bsl":
        return S @ X
    return (S @ X.T).T


def todense(blocks, xp):
    """The dense ``(M, N)`` matrix whose group blocks are ``blocks``."""
    pattern = _pattern_of(blocks)
    rows, cols = pattern.indices(xp)
    D = xp.zeros(pattern.shape, dtype=blocks.dtype)
    D[rows, cols] = blocks
    return D


def tocsr(blocks, xp):
    """The matrix as CSR (``scipy.sparse`` for NumPy, ``cupyx.scipy.sparse`` for CuPy)."""
    pattern = _pattern_of(blocks)
    if xp.__name__ == "numpy":
        import scipy.sparse as sp
    else:
        import cupyx.scipy.sparse as sp
    rows, cols = pattern.indices(xp)
    values = xp.ascontiguousarray(blocks).ravel()
    return sp.coo_matrix((values, (rows.ravel(), cols.ravel())), shape=pattern.shape).tocsr()



def blocks_gradient(G, X, pattern, layout, xp):
    """The gradient of a real loss with respect to the ``(a, d, b, c)`` blocks of a KS matrix
    of ``pattern``, given the product's operand ``X`` and the loss's gradient ``G`` with
    respect to the product (both in ``layout``, one dtype): per group, the batch sum
    ``G_g X_g^H`` (PyTorch's convention for complex values: the conjugate of JAX's).

    In index form (bsl), ``dW[i, k, l, j] = sum_n G[i*b*d + k*d + j, n] *
    conj(X[i*c*d + l*d + j, n])``. Each group's rows of ``G`` and ``X`` are gathered by one
    transpose (as :func:`bmm` does), then one batched product sums over the batch.
    """
    a, b, c, d = pattern
    if layout == "bsl":
        B = G.shape[1]
        Gp = xp.ascontiguousarray(G.reshape(a, b, d, B).transpose(0, 2, 1, 3))   # (a, d, b, B)
        Xp = xp.ascontiguousarray(X.reshape(a, c, d, B).transpose(0, 2, 3, 1))   # (a, d, B, c)
    else:
        B = G.shape[0]
        Gp = xp.ascontiguousarray(G.reshape(B, a, b, d).transpose(1, 3, 2, 0))   # (a, d, b, B)
        Xp = xp.ascontiguousarray(X.reshape(B, a, c, d).transpose(1, 3, 0, 2))   # (a, d, B, c)
    return xp.matmul(Gp, Xp.conj() if Xp.dtype.kind == "c" else Xp)            # (a, d, b, c)
