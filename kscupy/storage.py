"""Operators in files: ``kscupy.save`` and ``kscupy.load`` (``.npz``).

A :class:`~kscupy.KSMatrix` is described by the canonical values ``w`` (shape
``(a, b, c, d)``) of the matrix it was built from and two view flags (``transposed``,
``conjugated``: ``K.T``, ``K.H`` and ``K.conj()`` are views of one stored matrix). A
:class:`~kscupy.KSChain` is described by its factors and its input and output permutations,
a :class:`~kscupy.KSSubmatrix` by its chain and shape, a :class:`~kscupy.KSRealPart` by the
complex operator it is the real part of. Files carry exactly that, as do pickles, deep copies
and device moves (``__reduce__`` and ``_map_arrays`` of each operator); caches (dense
matrices, GPU plans) are dropped and rebuilt on first use.

``.npz`` layout (format version 2): ``kscupy_format`` (the version) and the operator's
entries, each name prefixed by where it sits (``""`` at the top, ``"chain."`` inside a
submatrix, ``"of."`` inside a real part): ``kind`` (``"KSMatrix"``, ``"KSChain"``,
``"KSSubmatrix"`` or ``"KSRealPart"``); for a matrix or chain ``factor_count`` and for each
factor ``f`` ``pattern_f`` (the stored pattern, 4 integers), ``values_f`` (its canonical
values) and ``view_f`` (2 booleans: transposed, conjugated), chains with
``input_permutation`` and ``output_permutation`` when they have them; for a submatrix
``shape`` (2 integers). Version 1 files (a matrix or chain, the top kind in
``kscupy_kind``) load too.
"""
from __future__ import annotations

import os
import zipfile

import numpy

from .core import arrays
from .core.pattern import KSPattern
from .operators import KSChain, KSMatrix, KSRealPart, KSSubmatrix

__all__ = ["save", "load", "FORMAT_VERSION"]

#: Version written by :func:`save`; :func:`load` reads this version and older ones.
FORMAT_VERSION = 2
KINDS = ("KSMatrix", "KSChain", "KSSubmatrix", "KSRealPart")


# -- files ----------------------------------------------------------------------------------
def save(path, op) -> None:
    """Write a KSMatrix, KSChain, KSSubmatrix or KSRealPart (NumPy or CuPy values) to the
    ``.npz`` file ``path``.

    The file holds the stored patterns, values, view flags, permutations and shapes, kind
    markers and the format version (see the module docstring); :func:`load` reads it back.
    NumPy appends ``.npz`` to a path without that suffix.

    Examples
    --------
    >>> import os, tempfile, numpy as np, kscupy as ks
    >>> C = ks.hadamard(8)
    >>> path = os.path.join(tempfile.mkdtemp(), "h8.npz")
    >>> ks.save(path, C)
    >>> bool(np.array_equal(ks.load(path).todense(), C.todense()))
    True
    """
    entries = {"kscupy_format": numpy.int64(FORMAT_VERSION)}
    _encode(op, "", entries)
    numpy.savez(path, **entries)


def _encode(op, prefix, entries):
    if isinstance(op, KSMatrix):
        kind, factors, perms = "KSMatrix", [op], {}
    elif isinstance(op, KSChain):
        kind, factors = "KSChain", list(op.factors)
        perms = {name: arrays.numpy_copy(p) for name, p in
                 (("input_permutation", op.input_permutation),
                  ("output_permutation", op.output_permutation)) if p is not None}
    elif isinstance(op, KSSubmatrix):
        entries[prefix + "kind"] = numpy.str_("KSSubmatrix")
        entries[prefix + "shape"] = numpy.array(op.shape, dtype=numpy.int64)
        _encode(op.chain, prefix + "chain.", entries)
        return
    elif isinstance(op, KSRealPart):
        entries[prefix + "kind"] = numpy.str_("KSRealPart")
        _encode(op.operator, prefix + "of.", entries)
        return
    else:
        raise TypeError(f"kscupy.save writes a KSMatrix, KSChain, KSSubmatrix or KSRealPart, "
                        f"got {type(op).__name__}")
    entries[prefix + "kind"] = numpy.str_(kind)
    entries[prefix + "factor_count"] = numpy.int64(len(factors))
    entries.update({prefix + name: p for name, p in perms.items()})
    for f, factor in enumerate(factors):
        values, (transposed, conjugated) = factor.stored_values(), factor.view_flags
        entries[f"{prefix}values_{f}"] = arrays.numpy_copy(values)
        entries[f"{prefix}pattern_{f}"] = numpy.array(values.shape, dtype=numpy.int64)
        entries[f"{prefix}view_{f}"] = numpy.array([transposed, conjugated])


def _with_suffix_if_saved_so(path):
    """``path + ".npz"`` where ``path`` names no file and that does: :func:`save` (NumPy's
    ``savez``) adds the suffix to a path without one."""
    if isinstance(path, (str, os.PathLike)) and not os.path.exists(path) \
            and os.path.exists(os.fspath(path) + ".npz"):
        return os.fspath(path) + ".npz"
    return path


def load(path, xp=numpy):
    """Read an operator written by :func:`save`; its arrays are created with ``xp``
    (``numpy``, or ``cupy`` for the current GPU).

    Raises ValueError, naming the file and what is wrong, for a file that :func:`save` did
    not write (not an ``.npz`` archive, truncated or empty, no kscupy markers, missing or
    inconsistent entries) or that a newer kscupy wrote (format version above
    :data:`FORMAT_VERSION`); nothing in a file is ever unpickled.
    """
    arrays.check_module(xp)
    path = _with_suffix_if_saved_so(path)
    try:
        data = numpy.load(path, allow_pickle=False)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (OSError, EOFError, zipfile.BadZipFile, NotImplementedError) as exc:
        # empty, truncated or damaged (zipfile meets impossible versions in damaged headers)
        raise ValueError(f"{path} is not a kscupy operator file (empty, truncated or not an "
                         f".npz archive: {exc})") from None
    except ValueError:      # NumPy took the bytes for a pickle, which it may not load
        raise ValueError(f"{path} is not a kscupy operator file (not an .npz archive)") \
            from None
    if not isinstance(data, numpy.lib.npyio.NpzFile):
        raise ValueError(f"{path} is not a kscupy operator file (a single .npy array, not "
                         f"an .npz archive)")
    entries = {}
    with data:
        for name in data.files:
            try:
                entries[name] = data[name]
            except ValueError:     # an object entry (never unpickled) or a damaged header
                raise ValueError(f"{path} is not a kscupy operator file: its entry {name!r} "
                                 f"is not a plain array (kscupy writes no object entries "
                                 f"and unpickles nothing)") from None
            except Exception as exc:   # zipfile, zlib and npy-format failures of damaged data
                raise ValueError(f"{path} is a damaged .npz archive: entry {name!r} cannot "
                                 f"be read ({type(exc).__name__}: {exc})") from None
    if "kscupy_format" not in entries or not {"kscupy_kind", "kind"} & set(entries):
        raise ValueError(f"{path} is not a kscupy operator file (no kscupy_format and kind "
                         f"entries; it holds {sorted(entries)[:8]})")
    fmt = entries["kscupy_format"]
    if fmt.shape != () or fmt.dtype.kind not in "iu":
        raise ValueError(f"{path} has an unreadable format version (an integer is written; "
                         f"got {fmt.dtype} of shape {fmt.shape})")
    version = int(fmt)
    if version < 1:
        raise ValueError(f"{path} has format version {version}, which no kscupy writes")
    if version > FORMAT_VERSION:
        raise ValueError(f"{path} has format version {version}, newer than the {FORMAT_VERSION} "
                         f"this kscupy reads; upgrade kscupy")
    if version < 2:        # version 1: the top kind in kscupy_kind
        if "kscupy_kind" not in entries:
            raise ValueError(f"{path} is an incomplete kscupy file: no entry 'kscupy_kind'")
        entries["kind"] = entries.pop("kscupy_kind")
    try:
        return _decode(entries, "", xp, path)
    except KeyError as exc:
        raise ValueError(f"{path} is an incomplete kscupy file: no entry {exc}") from None
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ValueError(f"{path} holds an inconsistent operator: {exc}") from None


def _decode(entries, prefix, xp, path):
    kind = str(entries[prefix + "kind"])
    if kind not in KINDS:
        raise ValueError(f"an operator of unknown kind {kind!r}")
    if kind == "KSSubmatrix":
        shape = tuple(int(s) for s in entries[prefix + "shape"])
        return KSSubmatrix(_decode(entries, prefix + "chain.", xp, path), shape)
    if kind == "KSRealPart":
        return KSRealPart(_decode(entries, prefix + "of.", xp, path))
    factors = []
    for f in range(int(entries[prefix + "factor_count"])):
        values = entries[f"{prefix}values_{f}"]
        pattern = KSPattern.of(entries[f"{prefix}pattern_{f}"].tolist())
        if values.shape != tuple(pattern):
            raise ValueError(f"values_{f} has shape {values.shape}, pattern_{f} is "
                             f"{tuple(pattern)}")
        view = entries[f"{prefix}view_{f}"]
        if view.dtype != numpy.bool_ or view.shape != (2,):
            raise ValueError(f"view_{f} must hold 2 booleans (transposed, conjugated), got "
                             f"{view.dtype} of shape {view.shape}")
        transposed, conjugated = (bool(v) for v in view)
        factors.append(KSMatrix._rebuild(xp.asarray(values), transposed, conjugated))
    if kind == "KSMatrix":
        if len(factors) != 1:
            raise ValueError(f"a KSMatrix of {len(factors)} factors")
        return factors[0]

    def perm(name):
        return None if prefix + name not in entries else xp.asarray(entries[prefix + name])
    return KSChain(factors, input_permutation=perm("input_permutation"),
                   output_permutation=perm("output_permutation"))
