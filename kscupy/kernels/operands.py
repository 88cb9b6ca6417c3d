"""Operands and results of a kernel launch, in either layout, addressed by element strides."""
from __future__ import annotations

__all__ = ["operands"]


def _element_strides(A):
    itemsize = A.dtype.itemsize
    if any(s % itemsize for s in A.strides):
        return None
    return tuple(s // itemsize for s in A.strides)


def operands(X, layout, M):
    """``(X, Y, B, (sx_f, sx_b, sy_f, sy_b))`` for a product with ``M`` output features.

    ``X`` is ``(N, B)`` in ``"bsl"`` and ``(B, N)`` in ``"bsf"``, with any strides (copied
    once if they are not whole elements). ``Y`` is a new C-contiguous result of the same
    layout; the strides are in elements along the feature (``f``) and batch (``b``) axes.
    """
    import cupy
    strides = _element_strides(X)
    if strides is None:
        X = cupy.ascontiguousarray(X)
        strides = _element_strides(X)
    if layout == "bsl":
        B = X.shape[1]
        Y = cupy.empty((M, B), dtype=X.dtype)
        return X, Y, B, (strides[0], strides[1], B, 1)
    B = X.shape[0]
    Y = cupy.empty((B, M), dtype=X.dtype)
    return X, Y, B, (strides[1], strides[0], 1, M)
