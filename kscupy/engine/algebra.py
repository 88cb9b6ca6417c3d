"""Products of KS factors as one factor: what the planner forms when it merges small
factors or applies a run of factors as their product.

The product of KS factors is supported on ``I_AS ⊗ 1 ⊗ I_DS`` (``AS``, ``DS`` the gcds of
their ``a``'s and ``d``'s, :func:`kscupy.core.pattern.super_pattern`): its pattern is
:func:`product_pattern`, and it is formed (:func:`product`) from each factor restricted to
the super-groups, so the work is that of the dense super-group blocks.
"""
from __future__ import annotations

import numpy

from ..core import arrays
from ..core.factor import Factor
from ..core.pattern import KSPattern, super_pattern

__all__ = ["merge", "merge_all", "product", "product_pattern", "product_fits",
           "MERGE_MAX_BLOCK", "PRODUCT_MAX_ENTRIES"]

#: Largest block (b·c) a merge may produce: merging is for small FFT-like blocks.
MERGE_MAX_BLOCK = 16

#: Largest product (entries of its super-group blocks) a plan may form of a run of factors:
#: the product is formed once per plan (see :func:`product`), in double precision.
PRODUCT_MAX_ENTRIES = 1 << 22


def _restricted_blocks(blocks, pattern: KSPattern, AS: int, DS: int):
    """A factor of ``pattern`` with ``(a, d, b, c)`` ``blocks`` as ``I_AS ⊗ D ⊗ I_DS``: the
    dense blocks D, shape ``(AS, DS, M/(AS DS), N/(AS DS))``, in the array module of
    ``blocks``."""
    xp = arrays.array_module(blocks)
    a, b, c, d = pattern
    af, df = a // AS, d // DS
    blocks = blocks.reshape(AS, af, df, DS, b, c)      # group (i'·af + i_s, j_s·DS + j')
    # D[i', j'][i_s·b·df + k·df + j_s, i_s2·c·df + l·df + j_s2] = block[k, l] on i_s = i_s2,
    # j_s = j_s2
    D = xp.einsum("xsyzkl,st,yu->xzskytlu", blocks, xp.eye(af, dtype=blocks.dtype),
                  xp.eye(df, dtype=blocks.dtype))
    return D.reshape(AS, DS, af * b * df, af * c * df)


def merge(left: Factor, right: Factor):
    """``left @ right`` as one Factor when the product is KS with small blocks, else None.

    The product is merged only when its blocks have at most ``MERGE_MAX_BLOCK`` entries and
    it has no more non-zeros than the two factors together (so the merged factor does no
    more arithmetic). Computed in double precision, returned in the dtype of the factors.
    """
    pattern = product_pattern([left, right])
    if (pattern.b * pattern.c > MERGE_MAX_BLOCK
            or pattern.nnz > left.pattern.nnz + right.pattern.nnz):
        return None
    return product([left, right])


def product_pattern(factors) -> KSPattern:
    """The KS pattern of the product of ``factors`` (written left to right): their
    super-groups' pattern ``(AS, M/(AS DS), N/(AS DS), DS)``."""
    AS, DS = super_pattern([f.pattern for f in factors])
    M, N = factors[0].shape[0], factors[-1].shape[1]
    return KSPattern(AS, M // (AS * DS), N // (AS * DS), DS)


def product(factors) -> Factor:
    """The product of ``factors`` (written left to right) as one Factor of
    :func:`product_pattern`, computed in double precision and returned in their common
    dtype (see :data:`PRODUCT_MAX_ENTRIES`)."""
    AS, DS = super_pattern([f.pattern for f in factors])
    dtype = numpy.result_type(*[f.dtype for f in factors])
    wide = numpy.complex128 if dtype.kind == "c" else numpy.float64
    elements = sum(f.tiles.size for f in factors)

    def restricted(factor):      # small factors are multiplied on the host
        blocks = factor.oriented(arrays.on_host_if_small(factor.tiles, elements))
        return _restricted_blocks(blocks.astype(wide), factor.pattern, AS, DS)
    P = restricted(factors[0])
    for factor in factors[1:]:
        P = P @ restricted(factor)
    module = arrays.array_module(P)
    P = module.ascontiguousarray(P.astype(dtype))
    return Factor.of_blocks(factors[0].xp.asarray(P), product_pattern(factors))


def product_fits(factors) -> bool:
    """Whether a plan may form the product of ``factors``: its blocks and every factor
    restricted to the super-groups have at most :data:`PRODUCT_MAX_ENTRIES` entries."""
    AS, DS = super_pattern([f.pattern for f in factors])
    sizes = [f.shape[0] * f.shape[1] for f in factors] + [factors[0].shape[0]
                                                           * factors[-1].shape[1]]
    return max(sizes) // (AS * DS) <= PRODUCT_MAX_ENTRIES


def merge_all(factors):
    """Greedily merge adjacent factors (left to right, see :func:`merge`); a new list."""
    out = list(factors)
    i = 0
    while i < len(out) - 1:
        merged = merge(out[i], out[i + 1])
        if merged is None:
            i += 1
        else:
            out[i:i + 2] = [merged]
    return out
