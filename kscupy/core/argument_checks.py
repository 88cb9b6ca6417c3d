"""Checks of the scalar arguments public functions take: sizes, flags, seeds, real
numbers (tolerances, steps, rates) and a product's layout.

One home for them, so every factory, pattern and shuffle says the same thing about the same
mistake: a wrong type is a ``TypeError`` (a float, string, bool or None where a size goes;
anything but a bool where a flag goes), a wrong value a ``ValueError``. NumPy integer
scalars and 0-d integer arrays are sizes too, converted to ``int`` at once so that no
arithmetic on them wraps around in a small integer type.
"""
from __future__ import annotations

import operator

import numpy

__all__ = ["positive_int", "flag", "seed", "real_number", "LAYOUTS", "check_layout"]

#: A product's layouts: batch-size-last (``op @ X``, X ``(N, B)``) and batch-size-first
#: (``X @ op.T``, X ``(B, N)``).
LAYOUTS = ("bsl", "bsf")


def check_layout(layout):
    """ValueError unless ``layout`` is one of :data:`LAYOUTS`."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def positive_int(name: str, value) -> int:
    """``value`` as a Python ``int`` >= 1; TypeError for a non-integer type (bools
    included), ValueError for a value below 1."""
    if isinstance(value, (bool, numpy.bool_)) or not _integral(value):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} "
                        f"{value!r}")
    value = operator.index(value)
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def _integral(value) -> bool:
    if isinstance(value, numpy.ndarray):
        return value.ndim == 0 and value.dtype.kind in "iu"
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def flag(name: str, value) -> bool:
    """``value`` if it is a bool (Python's or NumPy's), else TypeError: a string such as
    ``"no"`` would otherwise read as true."""
    if not isinstance(value, (bool, numpy.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def seed(value):
    """``value`` as a seed of NumPy's generators: None, or a non-negative integer (a NumPy
    integer too); ValueError naming ``seed`` otherwise (NumPy's own message does not)."""
    if value is None:
        return None
    if isinstance(value, (bool, numpy.bool_)) or not isinstance(value, (int, numpy.integer)) \
            or value < 0:
        raise ValueError(f"seed must be None or a non-negative integer, got {value!r}")
    return int(value)


def real_number(name: str, value, *, positive: bool = True) -> float:
    """``value`` as a finite ``float``, above zero (``positive``) or at least zero: TypeError
    for a non-number (bools and complex numbers included), ValueError otherwise. NumPy
    scalars are numbers."""
    if isinstance(value, (bool, numpy.bool_)) or \
            not isinstance(value, (int, float, numpy.integer, numpy.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not numpy.isfinite(value) or value < 0 or (positive and value == 0):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be a {kind} number (and finite), got {value!r}")
    return value
