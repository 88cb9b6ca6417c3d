"""Declared structure of a KS factor's values: blocks a kernel may compute instead of load.

A factor's stored values are always what it means. A *structure* is a claim about them that
whoever makes the factor may declare (``KSMatrix(values, structure=DFTStage(...))``; the
DFT and Hadamard factories do): it is checked against the values when it is declared, and
again after every write of the values (:meth:`kscupy.core.factor.Factor.structure`), so it is
never trusted blindly. A factor whose values no longer match simply has no structure, and
every path applies its stored blocks.

:class:`DFTStage` is the one structure so far: a stage of a Cooley-Tukey FFT (twiddled) or of
a Walsh-Hadamard transform (untwiddled). For pattern ``(a, r, r, d)`` its canonical values are

    ``w[i, k, l, j] = scale * ω_r^(k l) * ω_(r d)^(l j)``   (twiddled)
    ``w[i, k, l, j] = scale * ω_r^(k l)``                    (untwiddled: ``F_r ⊗ I_d`` per group)

with ``ω_m = exp(sign 2 pi i / m)``: block ``(i, j)`` is ``scale F_r diag(t_j)``,
``t_j[l] = ω_(r d)^(l j)``. ``ks_rows`` computes radix-2 stages from the twiddles alone
(one table of ``d`` values instead of ``4 d`` block entries, a butterfly instead of a
2 x 2 product); other radices keep their stored blocks there.
"""
from __future__ import annotations

import dataclasses

import numpy

from . import arrays

__all__ = ["DFTStage"]


@dataclasses.dataclass(frozen=True)
class DFTStage:
    """Blocks ``scale F_r diag(t_j)`` of a Cooley-Tukey stage (see the module docstring).

    ``sign``: -1 for the forward DFT's ``ω = exp(-2 pi i / m)``, +1 for the inverse;
    ``twiddled``: False for ``F_r ⊗ I_d`` per group (a Hadamard stage when ``r = 2``, real);
    ``scale``: a real number (the normalisation a factory puts on one stage).
    """
    sign: int = -1
    twiddled: bool = True
    scale: float = 1.0

    def __post_init__(self):
        if not isinstance(self.twiddled, (bool, numpy.bool_)):
            raise TypeError(f"DFTStage.twiddled must be True or False, got {self.twiddled!r}")
        if self.sign not in (-1, 1):
            raise ValueError(f"DFTStage.sign must be -1 or +1, got {self.sign!r}")
        if isinstance(self.scale, complex) or not numpy.isfinite(self.scale):
            raise ValueError(f"DFTStage.scale must be a finite real number, got {self.scale!r}")

    def values(self, pattern) -> numpy.ndarray:
        """The canonical ``(a, r, r, d)`` values for ``pattern`` in complex128 (NumPy)."""
        a, r, c, d = pattern
        if r != c:
            raise ValueError(f"a DFT stage is square, got the pattern {tuple(pattern)}")
        k = numpy.arange(r).reshape(r, 1, 1)
        l_ = numpy.arange(r).reshape(1, r, 1)
        j = numpy.arange(d).reshape(1, 1, d) if self.twiddled else 0
        # the phase of ω_r^(k l) ω_(r d)^(l j) in whole turns of 1 / (r d): exact integers
        turns = (k * l_ * d + l_ * j) % (r * d)
        return numpy.broadcast_to(self.scale * _unit_roots(self.sign * turns, r * d)[None],
                                  (a, r, r, d))

    def twiddles(self, d: int, conjugated: bool = False) -> numpy.ndarray:
        """``t[j] = ω_(2 d)^j`` for ``j < d`` (complex128; conjugated on request): the
        twiddles of a radix-2 stage's groups, the second column's factor of block ``j``."""
        t = _unit_roots(self.sign * numpy.arange(d), 2 * d)
        return numpy.conj(t) if conjugated else t

    def holds_for(self, stored_values, pattern) -> bool:
        """Whether canonical ``stored_values`` (``(a, b, c, d)``, NumPy or CuPy) equal this
        structure's values to within rounding in their dtype: every entry within
        ``8 eps |scale|``. Real values match only a structure whose values are real."""
        a, b, c, d = pattern
        if b != c:
            return False
        stored_values = arrays.on_host_if_small(stored_values)
        xp = arrays.array_module(stored_values)
        expected = self.values(pattern)[0]             # the same for every i
        if stored_values.dtype.kind != "c":
            if numpy.any(expected.imag != 0):
                return False
            expected = expected.real
        tol = 8 * arrays.epsilon(stored_values.dtype) * abs(self.scale)
        wide = numpy.complex128 if stored_values.dtype.kind == "c" else numpy.float64
        diff = xp.abs(stored_values.astype(wide) - xp.asarray(expected))
        return bool(diff.max() <= tol)


def _unit_roots(turns, m):
    """``exp(2 pi i turns / m)`` in complex128, exact (0, ±1) at multiples of quarter turns,
    so that real stages (Hadamard) come out real."""
    w = numpy.exp(2j * numpy.pi * (numpy.asarray(turns) % m) / m)
    quarter = (4 * numpy.asarray(turns)) % m == 0
    return numpy.where(quarter, numpy.round(w.real) + 1j * numpy.round(w.imag), w)
