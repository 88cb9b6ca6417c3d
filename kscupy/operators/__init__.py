"""The operators users hold: one KS factor (:class:`KSMatrix`), a chain of them
(:class:`KSChain`), a chain's leading block (:class:`KSSubmatrix`) and the real part of an
operator (:class:`KSRealPart`), all :class:`KSOperator`. They validate and delegate: how a
product runs is :mod:`kscupy.engine`'s."""
from .base import KSOperator
from .matrix import KSMatrix
from .chain import KSChain
from .submatrix import KSSubmatrix
from .realpart import KSRealPart

__all__ = ["KSOperator", "KSMatrix", "KSChain", "KSSubmatrix", "KSRealPart"]
