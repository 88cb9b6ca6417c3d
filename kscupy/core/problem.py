"""Problem: what decides how one factor's product should run (everything but the values).

The backends' cost models, the kernel heuristic, the tuner and its cache, and the chain
planner all reason about a :class:`Problem`; :func:`batch_bucket` is the one rule by which
batch sizes share decisions.
"""
from __future__ import annotations

import dataclasses

import numpy

from .pattern import KSPattern

__all__ = ["Problem", "batch_bucket", "pow2_at_least", "problem_of"]


def pow2_at_least(n: int) -> int:
    """The smallest power of two at or above ``n`` (1 for ``n <= 1``)."""
    return 1 << max(0, int(n) - 1).bit_length()


def batch_bucket(batch: int) -> int:
    """The bucket of a batch size, ``pow2_at_least(batch)``: batch sizes within a factor of
    two share tuning results, cost-model decisions and chain plans."""
    return pow2_at_least(batch)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One factor applied to a batch: effective pattern, batch size, dtype and access."""
    pattern: KSPattern      # pattern of the operator applied (transposed for a .T view)
    batch: int
    dtype: numpy.dtype
    layout: str             # "bsl" or "bsf"
    batch_contiguous: bool  # the operand's batch stride is one element
    transposed: bool        # the operator reads its stored blocks transposed

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def access(self) -> str:
        """"bsl" when the batch is contiguous (threads can walk it), else "bsf"."""
        return "bsl" if self.layout == "bsl" and self.batch_contiguous else "bsf"

    def in_batch_last(self) -> "Problem":
        """The same product with the operand batch-size-last and its batch contiguous: what
        a batch-size-first product becomes between two transposes
        (:func:`kscupy.kernels.ks_mma.prepare_batch_last`)."""
        return dataclasses.replace(self, layout="bsl", batch_contiguous=True)

    def key(self) -> str:
        """The problem's name in the tuning cache (batch sizes bucketed)."""
        a, b, c, d = self.pattern
        return (f"{self.layout}|{self.dtype}|{a},{b},{c},{d}|T{int(self.transposed)}"
                f"|B{batch_bucket(self.batch)}|s{int(self.batch_contiguous)}")


def problem_of(factor, X, layout) -> Problem:
    """The :class:`Problem` of ``factor`` (a :class:`~kscupy.core.factor.Factor`) applied to the
    2-D operand ``X`` in ``layout``."""
    batch_axis = 1 if layout == "bsl" else 0
    return Problem(pattern=factor.pattern, batch=int(X.shape[batch_axis]),
                   dtype=numpy.dtype(X.dtype), layout=layout,
                   batch_contiguous=X.strides[batch_axis] == X.dtype.itemsize,
                   transposed=factor.transposed)
