"""Operators as data: pickling, deep copies, moves between devices and ``.npz`` files.

A :class:`~kscupy.KSMatrix` is described by the canonical values ``w`` (shape
``(a, b, c, d)``) of the matrix it was built from and two view flags (``transposed``,
``conjugated``: ``K.T``, ``K.H`` and ``K.conj()`` are views of one stored matrix). A
:class:`~kscupy.KSChain` is described by its factors and its input and output permutations.
Pickles, deep copies, device moves and files carry exactly that; caches (dense matrices,
GPU plans) are dropped and rebuilt on first use.

``.npz`` layout (format version 1): ``kscupy_format`` (the version), ``kscupy_kind``
(``"KSMatrix"`` or ``"KSChain"``), ``factor_count``, and for each factor ``f``:
``pattern_f`` (the stored pattern, 4 integers), ``values_f`` (its canonical values),
``view_f`` (2 booleans: transposed, conjugated); chains add ``input_permutation`` and
``output_permutation`` when they have them.
"""
from __future__ import annotations

import numpy

from . import _arrays
from .chain import KSChain
from .matrix import KSMatrix
from .pattern import KSPattern

__all__ = ["save", "load", "FORMAT_VERSION", "rebuild_matrix", "rebuild_chain", "map_arrays",
           "to_numpy_copy", "device_mover"]

#: Version written by :func:`save`; :func:`load` reads this version and older ones.
FORMAT_VERSION = 1
KINDS = ("KSMatrix", "KSChain")


def matrix_parts(K: KSMatrix):
    """``(stored_values, transposed, conjugated)`` with ``K == view(KSMatrix(stored_values))``."""
    transposed, conjugated = K.view_flags
    stored = K
    if transposed:
        stored = stored.T
    if conjugated:
        stored = stored.conj()
    return stored.values, transposed, conjugated


def rebuild_matrix(values, transposed, conjugated) -> KSMatrix:
    """The inverse of :func:`matrix_parts` (used by pickle): a fresh matrix, then the view."""
    K = KSMatrix(values)
    if transposed:
        K = K.T
    return K.conj() if conjugated else K


def rebuild_chain(factors, input_permutation, output_permutation) -> KSChain:
    """A chain from its parts (used by pickle); plans are rebuilt on first use."""
    return KSChain._make(list(factors), input_permutation, output_permutation)


def map_arrays(op, convert):
    """The same operator with every array ``x`` it holds replaced by ``convert(x)``."""
    if isinstance(op, KSMatrix):
        values, transposed, conjugated = matrix_parts(op)
        return rebuild_matrix(convert(values), transposed, conjugated)
    if isinstance(op, KSChain):
        perm = lambda p: None if p is None else convert(p)  # noqa: E731
        return rebuild_chain([map_arrays(f, convert) for f in op.factors],
                             perm(op.input_permutation), perm(op.output_permutation))
    raise TypeError(f"expected a KSMatrix or KSChain, got {type(op).__name__}")


def to_numpy_copy(x):
    """A NumPy copy of a NumPy or CuPy array."""
    return x.get() if _arrays.array_module(x) is not numpy else x.copy()


def device_mover(device):
    """The array conversion behind ``op.to_device(device)``.

    ``device``: ``"cpu"`` (NumPy copies), ``"gpu"`` (CuPy arrays on the current device), an
    ``int`` device id or a ``cupy.cuda.Device`` (CuPy arrays on that device).
    """
    if isinstance(device, str):
        if device == "cpu":
            return to_numpy_copy
        if device not in ("gpu", "cuda"):
            raise ValueError(f'device must be "cpu", "gpu", a device id or a cupy.cuda.Device, '
                             f'got {device!r}')
        device = None
    elif isinstance(device, bool) or not (isinstance(device, (int, numpy.integer))
                                          or type(device).__module__.startswith("cupy")):
        raise TypeError(f'device must be "cpu", "gpu", a device id or a cupy.cuda.Device, '
                        f'got {type(device).__name__}')
    cupy, why = _arrays.gpu_module()
    if cupy is None:
        raise RuntimeError(f"cannot move an operator to the GPU: {why}")
    target = cupy.cuda.Device() if device is None else cupy.cuda.Device(
        device if isinstance(device, (int, numpy.integer)) else device.id)

    def move(x):
        with target:
            return cupy.array(x, copy=True)   # copies across devices (peer or via the host)
    return move


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
        perms = {name: to_numpy_copy(p) for name, p in
                 (("input_permutation", op.input_permutation),
                  ("output_permutation", op.output_permutation)) if p is not None}
    else:
        raise TypeError(f"kscupy.save writes a KSMatrix or KSChain, got {type(op).__name__}")
    arrays = {"kscupy_format": numpy.int64(FORMAT_VERSION), "kscupy_kind": numpy.str_(kind),
              "factor_count": numpy.int64(len(factors)), **perms}
    for f, factor in enumerate(factors):
        values, transposed, conjugated = matrix_parts(factor)
        arrays[f"values_{f}"] = to_numpy_copy(values)
        arrays[f"pattern_{f}"] = numpy.array(values.shape, dtype=numpy.int64)
        arrays[f"view_{f}"] = numpy.array([transposed, conjugated])
    numpy.savez(path, **arrays)


def load(path, xp=numpy):
    """Read an operator written by :func:`save`; its arrays are created with ``xp``
    (``numpy``, or ``cupy`` for the current GPU).

    Raises ValueError for a file that :func:`save` did not write (no kscupy markers, missing
    or inconsistent entries) or that a newer kscupy wrote (format version above
    :data:`FORMAT_VERSION`).
    """
    if xp is not numpy and getattr(xp, "__name__", None) != "cupy":
        raise TypeError(f"xp must be numpy or cupy, got {xp!r}")
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
            factors.append(rebuild_matrix(xp.asarray(values), transposed, conjugated))
    except KeyError as exc:
        raise ValueError(f"{path} is an incomplete kscupy file: no entry {exc}") from None
    if kind == "KSMatrix":
        if len(factors) != 1:
            raise ValueError(f"{path} marks a KSMatrix but holds {len(factors)} factors")
        return factors[0]
    perm = lambda name: None if name not in entries else xp.asarray(entries[name])  # noqa: E731
    return KSChain(factors, input_permutation=perm("input_permutation"),
                   output_permutation=perm("output_permutation"))
