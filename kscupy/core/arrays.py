"""Which arrays kscupy accepts: array-module detection and dtype rules.

CuPy is imported only when a CuPy array is seen (or asked for), so kscupy imports and runs
on machines without CuPy or without a GPU.
"""
from __future__ import annotations

import contextlib
import importlib
import numbers

import numpy

__all__ = ["SUPPORTED_DTYPES", "PRECISIONS", "runs_at", "array_module", "cupy_or_none", "gpu_module", "check_dtype", "result_dtype",
           "is_scalar", "numpy_copy", "device_of", "read_only", "device_mover", "HOST_ELEMENTS",
           "on_host_if_small", "check_module"]

#: The value dtypes a KS matrix may hold and products return. float16 is storage and result
#: precision: its products accumulate in float32 and are rounded to float16 once (on the
#: tensor cores, in cuBLAS, and on the CPU by computing in float32). CuPy has no bfloat16.
SUPPORTED_DTYPES = tuple(numpy.dtype(t) for t in
                         (numpy.float16, numpy.float32, numpy.float64, numpy.complex64,
                          numpy.complex128))


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
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy
        if isinstance(x, cupy.ndarray):
            return cupy
    raise TypeError(f"expected a numpy.ndarray or cupy.ndarray, got {type(x).__name__}")


def check_module(xp):
    """Raise TypeError unless ``xp`` (an ``xp=`` argument) is the ``numpy`` or ``cupy``
    module."""
    if xp is not numpy and getattr(xp, "__name__", None) != "cupy":
        raise TypeError(f"xp must be numpy or cupy, got {xp!r}")


def check_dtype(dtype) -> numpy.dtype:
    """Return ``dtype`` as a NumPy dtype if kscupy supports it, else raise TypeError."""
    dt = numpy.dtype(dtype)
    if dt not in SUPPORTED_DTYPES:
        names = ", ".join(str(t) for t in SUPPORTED_DTYPES)
        raise TypeError(f"unsupported dtype {dt}; kscupy supports {names}")
    return dt


def result_dtype(*dtypes) -> numpy.dtype:
    """``numpy.result_type`` of the operands, checked to be a supported dtype."""
    dt = numpy.result_type(*dtypes)
    if dt not in SUPPORTED_DTYPES:
        names = ", ".join(str(t) for t in SUPPORTED_DTYPES)
        raise TypeError(f"operands of dtypes {', '.join(str(numpy.dtype(t)) for t in dtypes)} "
                        f"promote to {dt}, which kscupy does not compute in (supported: {names})")
    return dt


def is_scalar(alpha) -> bool:
    """True for Python and NumPy numbers (bool excluded), False for anything else."""
    return (isinstance(alpha, (numbers.Number, numpy.number))
            and not isinstance(alpha, (bool, numpy.bool_)))


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


def device_of(x):
    """A context in which CuPy allocates on ``x``'s GPU (CuPy allocates on the current
    device, whatever its operands' devices); does nothing for a NumPy array."""
    return x.device if array_module(x) is not numpy else contextlib.nullcontext()


def read_only(x):
    """``x`` as something that cannot be written into it: a read-only view of a NumPy array,
    a copy of a CuPy array (CuPy arrays have no write flag). Operators hand out their values
    this way, so a write cannot bypass the caches derived from them."""
    if array_module(x) is numpy:
        view = x.view()
        view.flags.writeable = False
        return view
    with device_of(x):
        return x.copy()


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
