"""Scalar multiples and sums of KS operators (``alpha * op``, ``op / alpha``, ``-op``,
``K1 + K2``, ``K1 - K2``).

Dtype rule: ``alpha * op`` has dtype ``numpy.result_type(op.dtype, alpha)``, NumPy's rule for
an array and a scalar. With NumPy 2 (NEP 50) a Python scalar is "weak": ``2.5 * K`` keeps a
float32 ``K`` float32 and ``1j * K`` makes it complex64, while a NumPy scalar keeps its own
precision (``numpy.float64(2) * K`` is float64). Nothing is ever downcast. A result outside
the supported dtypes raises TypeError.

* A :class:`~kscupy.KSMatrix` times a scalar is a new KSMatrix with scaled values.
* A :class:`~kscupy.KSChain` times a scalar scales one factor (the first, leftmost), never
  all of them: the product is scaled once.
* ``K1 + K2`` and ``K1 - K2`` are defined for two KSMatrix of the same pattern on the same
  array module and give a KSMatrix of dtype ``numpy.result_type(K1.dtype, K2.dtype)``; a
  different pattern raises ValueError, a chain or a NumPy/CuPy mix raises TypeError.
"""
from __future__ import annotations

import numbers

import numpy

from . import _arrays
from .chain import KSChain
from .matrix import KSMatrix

__all__ = ["is_scalar", "scaled", "added"]


def is_scalar(alpha) -> bool:
    """True for Python and NumPy numbers (bool excluded), False for anything else."""
    return (isinstance(alpha, (numbers.Number, numpy.number))
            and not isinstance(alpha, (bool, numpy.bool_)))


def scaled(op, alpha, divide=False):
    """``op * alpha`` (or ``op / alpha`` with ``divide``) as an operator of the same kind.

    Raises TypeError for a non-scalar ``alpha`` or an unsupported result dtype,
    ZeroDivisionError for ``op / 0``.
    """
    if not is_scalar(alpha):
        raise TypeError(f"a {type(op).__name__} can be multiplied by a scalar, not by "
                        f"{type(alpha).__name__}")
    if divide and alpha == 0:
        raise ZeroDivisionError(f"division of a {type(op).__name__} by zero")
    if isinstance(op, KSChain):
        first = scaled(op.factors[0], alpha, divide)
        return KSChain._make([first, *op.factors[1:]], op.input_permutation,
                             op.output_permutation)
    dtype = _arrays.result_dtype(op.dtype, alpha)
    values = op.values.astype(dtype)
    return KSMatrix(values / alpha if divide else values * alpha)


def added(left, right, sign=1):
    """``left + right`` (``sign=1``) or ``left - right`` (``sign=-1``) for two KSMatrix of one
    pattern; see the module docstring for the errors."""
    for op in (left, right):
        if not isinstance(op, KSMatrix):
            raise TypeError(f"only two KSMatrix of the same pattern can be added, got "
                            f"{type(left).__name__} and {type(right).__name__} (a sum of "
                            f"chains is not a KS chain)")
    if left.xp is not right.xp:
        raise TypeError(f"cannot add a KSMatrix holding {left.xp.__name__} values and one "
                        f"holding {right.xp.__name__} values; move one of them first")
    if left.pattern != right.pattern:
        raise ValueError(f"cannot add KS matrices of different patterns {tuple(left.pattern)} "
                         f"and {tuple(right.pattern)}: the sum is not KS")
    dtype = _arrays.result_dtype(left.dtype, right.dtype)
    values = left.values.astype(dtype)
    return KSMatrix(values + right.values if sign > 0 else values - right.values)
