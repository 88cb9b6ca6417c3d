"""Which arrays kscupy accepts: array-module detection and dtype rules.

CuPy is imported only when a CuPy array is seen (or asked for), so kscupy imports and runs
on machines without CuPy or without a GPU.
"""
from __future__ import annotations

import contextlib
import importlib
import numbers

import numpy

__all__ = ["operand_module", "plain_array_module", "check_operand_dtype", "is_refused_operand", "SUPPORTED_DTYPES", "HALF_DTYPES", "BFLOAT16", "is_bfloat16", "is_half", "real_dtype", "epsilon", "PRECISIONS", "runs_at", "array_module", "cupy_or_none", "gpu_module", "check_dtype", "result_dtype",
           "scalar_of", "numpy_copy", "device_id", "device_of", "read_only", "frozen", "device_mover", "HOST_ELEMENTS",
           "on_host_if_small", "check_module"]

def _bfloat16():
    """NumPy's bfloat16 dtype where the ``ml_dtypes`` package (the ``bfloat16`` extra) is
    installed (CuPy 14 holds it then too), else None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return numpy.dtype(ml_dtypes.bfloat16)


#: bfloat16 (PyTorch's and JAX's 16-bit float), or None without ``ml_dtypes``. NumPy files
#: it under kind ``"V"``, not ``"f"``: test for it with :func:`is_bfloat16` (``dtype ==
#: None`` is true of float64, NumPy's default dtype).
BFLOAT16 = _bfloat16()
#: The 16-bit dtypes: storage and result precision only. Their products accumulate in
#: float32 and are rounded once (on the tensor cores, in cuBLAS, and on the CPU by
#: computing in float32).
HALF_DTYPES = tuple(t for t in (numpy.dtype(numpy.float16), BFLOAT16) if t is not None)
#: The value dtypes a KS matrix may hold and products return: the 16-bit ones above, float32,
#: float64, complex64 and complex128.
SUPPORTED_DTYPES = HALF_DTYPES + tuple(numpy.dtype(t) for t in
                                       (numpy.float32, numpy.float64, numpy.complex64,
                                        numpy.complex128))


def is_bfloat16(dtype) -> bool:
    """Whether ``dtype`` is bfloat16 (never where ``ml_dtypes`` is missing)."""
    return BFLOAT16 is not None and numpy.dtype(dtype) == BFLOAT16


def is_half(dtype) -> bool:
    """Whether ``dtype`` is one of :data:`HALF_DTYPES` (computed through float32)."""
    return numpy.dtype(dtype) in HALF_DTYPES


def real_dtype(dtype) -> numpy.dtype:
    """The dtype of the real and imaginary parts of ``dtype`` (``dtype`` itself where real).

    Written without ``numpy.finfo``, which older ``ml_dtypes`` releases do not teach about
    bfloat16."""
    dtype = numpy.dtype(dtype)
    return numpy.empty(0, dtype).real.dtype


def epsilon(dtype) -> float:
    """Machine epsilon of a float or complex ``dtype``, bfloat16 included (``2**-7``)."""
    dtype = real_dtype(dtype)
    if is_bfloat16(dtype):
        return 2.0 ** -7
    return float(numpy.finfo(dtype).eps)


#: Arithmetic precisions a GPU backend may compute at: ``"default"`` keeps the dtype's
#: accuracy (float16 summed in float32); ``"tf32"`` is the opt-in of one TF32 product per
#: term (about 1e-3 relative error), for float32 and complex64 only.
PRECISIONS = ("default", "tf32")


def runs_at(dtype, precision: str) -> bool:
    """Whether a product of ``dtype`` values can be computed at ``precision``."""
    dtype = numpy.dtype(dtype)
    if dtype not in SUPPORTED_DTYPES:
        return False
    return precision == "default" or (precision == "tf32"
                                      and dtype in (numpy.float32, numpy.complex64))


def cupy_or_none():
    """The ``cupy`` module when it can be imported, else None."""
    try:
        return importlib.import_module("cupy")
    except ImportError:
        return None


def gpu_module():
    """``(cupy, None)`` when CuPy imports and sees a CUDA device, else ``(None, reason)``."""
    cupy = cupy_or_none()
    if cupy is None:
        return None, "CuPy is not installed"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver or no device: CuPy raises CUDARuntimeError
        return None, f"CuPy sees no CUDA device ({exc})"
    if count == 0:
        return None, "CuPy sees no CUDA device"
    return cupy, None


def array_module(x):
    """``numpy`` for a NumPy array, ``cupy`` for a CuPy array; TypeError for anything else."""
    if isinstance(x, numpy.ndarray):
        return numpy
    if type(x).__module__.split(".")[0] == "cupy" or (
            _ReadOnlyCupyArray is not None and isinstance(x, _ReadOnlyCupyArray)):
        import cupy
        if isinstance(x, cupy.ndarray):
            return cupy
    raise TypeError(f"expected a numpy.ndarray or cupy.ndarray, got {type(x).__name__}")


def is_refused_operand(x) -> bool:
    """Whether ``x`` is a kind of operand products refuse with a message of their own (see
    :func:`operand_module`) rather than leave to the other operand's ``@``."""
    return _refused(x) is not None


def check_module(xp):
    """Raise TypeError unless ``xp`` (an ``xp=`` argument) is the ``numpy`` or ``cupy``
    module."""
    if xp is not numpy and getattr(xp, "__name__", None) != "cupy":
        raise TypeError(f"xp must be numpy or cupy, got {xp!r}")


def check_dtype(dtype) -> numpy.dtype:
    """Return ``dtype`` as a NumPy dtype if kscupy supports it, else raise TypeError."""
    dt = numpy.dtype(dtype)
    if dt not in SUPPORTED_DTYPES:
        if dt.newbyteorder("=") in SUPPORTED_DTYPES:
            raise TypeError(f"dtype {dt.str} is in non-native byte order; convert it with "
                            f"x.astype(x.dtype.newbyteorder('='))")
        names = ", ".join(str(t) for t in SUPPORTED_DTYPES)
        raise TypeError(f"unsupported dtype {dt}; kscupy supports {names}")
    return dt


def result_dtype(*dtypes) -> numpy.dtype:
    """``numpy.result_type`` of the operands (dtypes, or scalars), checked to be a supported
    dtype. A Python int, float or complex is "weak" (NumPy 2's rule, NEP 50): it keeps the
    other operands' floating dtype, or makes it complex of the same precision. The rule is
    applied here: ``ml_dtypes`` 0.5.1 (not 0.7) promotes bfloat16 and a Python float to
    float64."""
    weak = [t for t in dtypes if type(t) in (int, float, complex)]
    dt = numpy.result_type(*[t for t in dtypes if type(t) not in (int, float, complex)])
    if dt.kind in "fc" or is_bfloat16(dt):          # bfloat16's kind is "V"
        if dt.kind != "c" and any(type(t) is complex for t in weak):
            dt = numpy.promote_types(dt, numpy.complex64)
    elif weak:
        dt = numpy.result_type(dt, *weak)
    if dt not in SUPPORTED_DTYPES:
        names = ", ".join(str(t) for t in SUPPORTED_DTYPES)
        raise TypeError(f"operands of dtypes {', '.join(str(numpy.dtype(t)) for t in dtypes)} "
                        f"promote to {dt}, which kscupy does not compute in (supported: {names})")
    return dt


def scalar_of(alpha):
    """``alpha`` as a number that scales an operator, or None when it is no scalar.

    Python numbers and NumPy scalars pass as they are; a 0-d NumPy or CuPy array of an
    integer, float or complex dtype becomes the NumPy scalar it holds (a CuPy one is read
    back from the device), so it promotes like a NumPy scalar. Other numbers (``Fraction``,
    ``Decimal``) become the Python float (or complex) nearest them. bool is no scalar here.
    """
    if isinstance(alpha, (bool, numpy.bool_)):
        return None
    if isinstance(alpha, (int, float, complex, numpy.number)):
        return alpha
    if isinstance(alpha, numbers.Number):
        value = complex(alpha)
        return value if value.imag else float(alpha)
    if getattr(alpha, "ndim", None) == 0 and getattr(alpha, "dtype", None) is not None \
            and numpy.dtype(alpha.dtype).kind in "iufc":
        try:
            return numpy.asarray(alpha.get() if array_module(alpha) is not numpy
                                 else alpha)[()]
        except TypeError:        # an array of another library
            return None
    return None


def _refused(X, role="operand"):
    """Why ``X`` cannot be the array ``role`` (a product's operand, a matrix's values) as a
    TypeError naming the fix, or None: masked arrays (their masked entries would be used),
    ``numpy.matrix`` (its ``*`` and shapes follow other rules), SciPy and cupyx sparse
    matrices, Python sequences."""
    kind = type(X).__name__
    if isinstance(X, numpy.ma.MaskedArray):
        return TypeError(f"a masked array as {role}: its masked entries would be used; pass "
                         f"X.filled(value) for the values you mean (or numpy.asarray(X) for "
                         f"the hidden ones)")
    if isinstance(X, numpy.matrix):
        return TypeError(f"a numpy.matrix as {role}: pass numpy.asarray(X)")
    if type(X).__module__.startswith(("scipy.sparse", "cupyx.scipy.sparse")):
        return TypeError(f"a sparse matrix ({kind}) as {role}: kscupy takes dense arrays; "
                         f"pass X.toarray() (a KSMatrix K gives a sparse product as "
                         f"K.tocsr() @ X)")
    if isinstance(X, (list, tuple)):
        return TypeError(f"a {kind} as {role}: pass numpy.asarray(X) (or cupy.asarray(X)) of "
                         f"a float or complex dtype")
    return None


def plain_array_module(x, role: str):
    """The array module of ``x``, a plain NumPy or CuPy array given as ``role`` (e.g.
    ``"values"``): masked arrays, matrices, sparse matrices and sequences are refused with
    the fix, as product operands are (:func:`operand_module`)."""
    refused = _refused(x, role)
    if refused is not None:
        raise refused
    return array_module(x)


def check_operand_dtype(dtype, role="operand"):
    """TypeError unless ``dtype`` is one a product computes in: integer, bool and object
    operands (or other arrays given as ``role``) are not converted behind the caller's
    back."""
    dtype = numpy.dtype(dtype)
    if dtype.kind not in "fc" and not is_bfloat16(dtype):
        names = ", ".join(str(t) for t in SUPPORTED_DTYPES)
        raise TypeError(f"{role} of dtype {dtype}: products take {names}; convert it first "
                        f"(e.g. X.astype(numpy.float32))")


def operand_module(X):
    """The array module of a product's operand ``X`` (``numpy`` or ``cupy``), after the checks
    every product makes: an array (not a masked array, matrix, sparse matrix or sequence)
    of a float or complex dtype. TypeError naming the operand and the fix otherwise."""
    xp = plain_array_module(X, "operand")
    check_operand_dtype(X.dtype)
    return xp


def address(x) -> int:
    """The address of a NumPy (host) or CuPy (device) array's first element."""
    return x.data.ptr if hasattr(x.data, "ptr") else x.ctypes.data


def numpy_copy(x):
    """A NumPy copy of a NumPy or CuPy array."""
    return x.get() if array_module(x) is not numpy else x.copy()


#: CuPy arrays of at most this many elements are checked, inverted and combined on the host
#: where kscupy only derives bookkeeping from them (permutations, declared structure, merged
#: small factors): in a process whose CuPy kernel cache is empty, every CuPy operation
#: compiles a kernel the first time it runs (a fraction of a second to seconds each, which
#: made a DFT factory take seconds), where copying 2^16 elements takes microseconds.
HOST_ELEMENTS = 1 << 16


def on_host_if_small(x, elements=None):
    """A NumPy copy of ``x`` when it is a CuPy array of at most :data:`HOST_ELEMENTS`
    elements (waiting for the current stream), else ``x`` itself. ``elements``: the size to
    judge by instead of ``x.size`` (for arrays that are combined, so that all of them stay on
    one side)."""
    if isinstance(x, numpy.ndarray) or (x.size if elements is None else elements) > HOST_ELEMENTS:
        return x
    return x.get()


def device_id(x):
    """The id of the GPU holding ``x`` (a CuPy array), None for host arrays."""
    return getattr(getattr(x, "device", None), "id", None)


def device_of(x):
    """A context in which CuPy allocates on ``x``'s GPU (CuPy allocates on the current
    device, whatever its operands' devices); does nothing for a NumPy array."""
    return x.device if array_module(x) is not numpy else contextlib.nullcontext()


def read_only(x):
    """A copy of ``x`` (a view for NumPy) that refuses to be written into (see :func:`frozen`):
    how operators hand out their values, so a write cannot bypass the caches derived from
    them. ``x`` must be the operator's own storage: on NumPy the array owning its memory is
    made read-only as well. On CuPy the copy keeps writes that bypass the array's methods
    away from ``x``."""
    if array_module(x) is numpy:
        return frozen(x)
    with device_of(x):
        return frozen(x.copy())


def frozen(x):
    """``x`` made unwritable, sharing its memory: for NumPy, a view of ``x`` after the array
    owning the memory had its write flag turned off (NumPy lets a view of a writable array,
    or an array owning its memory, be made writable again with ``setflags``, never a view
    of a read-only array); for CuPy (which has no write flag) a view of class
    :func:`read_only_cupy_class`, whose item assignment, in-place operators, ``fill`` and
    ``put`` raise ``ValueError`` as NumPy's read-only arrays do. Copies of it and results
    computed from it are writable."""
    if array_module(x) is numpy:
        owner = x
        while isinstance(owner.base, numpy.ndarray):
            owner = owner.base
        owner.flags.writeable = False
        return x.view()
    view = read_only_cupy_class()(x.shape, x.dtype, x.data, x.strides)
    view._frozen = True
    return view


_READ_ONLY_MESSAGE = ("assignment destination is read-only: an operator's values are not "
                      "written in place (the operator would not see the write); copy them, "
                      "change the copy and assign it, e.g. w = K.values.copy(); "
                      "w[...] = ...; K.values = w")


def read_only_cupy_class():
    """The CuPy array class :func:`read_only` returns (defined on first use, as CuPy is
    optional). An instance is frozen when :func:`frozen` made it or when it is a view of
    one (CuPy views keep the array they view as ``base``); writes through its methods raise.
    Writes that bypass the array's methods (``cupy.copyto(v, ...)``, ``out=v``, raw
    pointers) cannot be intercepted."""
    global _ReadOnlyCupyArray
    if _ReadOnlyCupyArray is None:
        import cupy

        def refusing(name):
            def method(self, *args, **kwargs):
                if self._frozen or getattr(self.base, "_frozen", False):
                    raise ValueError(_READ_ONLY_MESSAGE)
                return getattr(cupy.ndarray, name)(self, *args, **kwargs)
            method.__name__ = name
            return method

        writers = ("__setitem__", "fill", "put", "__iadd__", "__isub__", "__imul__",
                   "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__imatmul__",
                   "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__")
        namespace = {name: refusing(name) for name in writers if hasattr(cupy.ndarray, name)}
        namespace["_frozen"] = False
        namespace["__doc__"] = "A CuPy array that refuses writes; see kscupy.core.arrays.read_only."
        namespace["__module__"] = __name__
        _ReadOnlyCupyArray = type("ReadOnlyCupyArray", (cupy.ndarray,), namespace)
    return _ReadOnlyCupyArray


_ReadOnlyCupyArray = None


def device_mover(device):
    """The array conversion that moves arrays to ``device``: ``"cpu"`` (NumPy copies),
    ``"gpu"`` (CuPy copies on the current device), an ``int`` device id or a
    ``cupy.cuda.Device`` (CuPy copies on that device)."""
    if isinstance(device, str):
        if device == "cpu":
            return numpy_copy
        if device not in ("gpu", "cuda"):
            raise ValueError(f'device must be "cpu", "gpu", a device id or a cupy.cuda.Device, '
                             f'got {device!r}')
        device = None
    elif isinstance(device, bool) or not (isinstance(device, (int, numpy.integer))
                                          or type(device).__module__.startswith("cupy")):
        raise TypeError(f'device must be "cpu", "gpu", a device id or a cupy.cuda.Device, '
                        f'got {type(device).__name__}')
    cupy, why = gpu_module()
    if cupy is None:
        raise RuntimeError(f"cannot move an operator to the GPU: {why}")
    target = cupy.cuda.Device() if device is None else cupy.cuda.Device(
        device if isinstance(device, (int, numpy.integer)) else device.id)

    def move(x):
        with target:
            return cupy.array(x, copy=True)   # copies across devices (peer or via the host)
    return move
