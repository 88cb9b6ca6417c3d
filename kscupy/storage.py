"""Operators in files: ``kscupy.save`` and ``kscupy.load`` (``.npz``).

A :class:`~kscupy.KSMatrix` is described by the canonical values ``w`` (shape
``(a, b, c, d)``) of the matrix it was built from and two view flags (``transposed``,
``conjugated``: ``K.T``, ``K.H`` and ``K.conj()`` are views of one stored matrix). A
:class:`~kscupy.KSChain` is described by its factors and its input and output permutations.
Files carry exactly that, as do pickles, deep copies and device moves (``__reduce__`` and
``_map_arrays`` of each operator); caches (dense matrices, GPU plans) are dropped and rebuilt
on first use.

``.npz`` layout (format version 1): ``kscupy_format`` (the version), ``kscupy_kind``
(``"KSMatrix"`` or ``"KSChain"``), ``factor_count``, and for each factor ``f``:
``pattern_f`` (the stored pattern, 4 integers), ``values_f`` (its canonical values),
``view_f`` (2 booleans: transposed, conjugated); chains add ``input_permutation`` and
``output_permutation`` when they have them.
"""
from __future__ import annotations

import numpy

from .core import arrays
from .operators.chain import KSChain
from .operators.matrix import KSMatrix
from .core.pattern import KSPattern

__all__ = ["save", "load", "FORMAT_VERSION"]

#: Version written by :func:`save`; :func:`load` reads this version and older ones.
FORMAT_VERSION = 1
KINDS = ("KSMatrix", "KSChain")


# -- files ----------------------------------------------------------------------------------
def save(path, op) -> None:
    """Write a KSMatrix or KSChain (NumPy or CuPy values) to the ``.npz`` file ``path``.

    The file holds the stored patterns, values, view flags and permutations, a kind marker
    and the format version (see the module docstring); :func:`load` reads it back. NumPy
    appends ``.npz`` to a path without that suffix.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kscupy as ks
    >>> C = ks.hadamard(8)
    >>> path = os.path.join(tempfile.mkdtemp(), "h8.npz")
    >>> ks.save(path, C)
    >>> bool(np.array_equal(ks.load(path).todense(), C.todense()))
    True
    """
    if isinstance(op, KSMatrix):
        kind, factors, perms = "KSMatrix", [op], {}
    elif isinstance(op, KSChain):
        kind, factors = "KSChain", list(op.factors)
        perms = {name: arrays.numpy_copy(p) for name, p in
                 (("input_permutation", op.input_permutation),
                  ("output_permutation", op.output_permutation)) if p is not None}
    else:
        raise TypeError(f"kscupy.save writes a KSMatrix or KSChain, got {type(op).__name__}")
    entries = {"kscupy_format": numpy.int64(FORMAT_VERSION), "kscupy_kind": numpy.str_(kind),
              "factor_count": numpy.int64(len(factors)), **perms}
    for f, factor in enumerate(factors):
        values, (transposed, conjugated) = factor.stored_values(), factor.view_flags
        entries[f"values_{f}"] = arrays.numpy_copy(values)
        entries[f"pattern_{f}"] = numpy.array(values.shape, dtype=numpy.int64)
        entries[f"view_{f}"] = numpy.array([transposed, conjugated])
    numpy.savez(path, **entries)


def load(path, xp=numpy):
    """Read an operator written by :func:`save`; its arrays are created with ``xp``
    (``numpy``, or ``cupy`` for the current GPU).

    Raises ValueError for a file that :func:`save` did not write (no kscupy markers, missing
    or inconsistent entries) or that a newer kscupy wrote (format version above
    :data:`FORMAT_VERSION`).
    """
    arrays.check_module(xp)
    with numpy.load(path, allow_pickle=False) as data:
        entries = {name: data[name] for name in data.files}
    if "kscupy_format" not in entries or "kscupy_kind" not in entries:
        raise ValueError(f"{path} is not a kscupy operator file (no kscupy_format/kscupy_kind "
                         f"entries; it holds {sorted(entries)[:8]})")
    version = int(entries["kscupy_format"])
    if version > FORMAT_VERSION:
        raise ValueError(f"{path} has format version {version}, newer than the {FORMAT_VERSION} "
                         f"this kscupy reads; upgrade kscupy")
    kind = str(entries["kscupy_kind"])
    if kind not in KINDS:
        raise ValueError(f"{path} holds an operator of unknown kind {kind!r}")
    try:
        factors = []
        for f in range(int(entries["factor_count"])):
            values, pattern = entries[f"values_{f}"], KSPattern.of(entries[f"pattern_{f}"].tolist())
            if values.shape != tuple(pattern):
                raise ValueError(f"values_{f} has shape {values.shape}, pattern_{f} is "
                                 f"{tuple(pattern)}")
            transposed, conjugated = (bool(v) for v in entries[f"view_{f}"])
            factors.append(KSMatrix._rebuild(xp.asarray(values), transposed, conjugated))
    except KeyError as exc:
        raise ValueError(f"{path} is an incomplete kscupy file: no entry {exc}") from None
    if kind == "KSMatrix":
        if len(factors) != 1:
            raise ValueError(f"{path} marks a KSMatrix but holds {len(factors)} factors")
        return factors[0]
    perm = lambda name: None if name not in entries else xp.asarray(entries[name])  # noqa: E731
    return KSChain(factors, input_permutation=perm("input_permutation"),
                   output_permutation=perm("output_permutation"))
