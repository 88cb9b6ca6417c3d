"""A kernel launch prepared once: the function, grid and every argument but the operand and
result pointers, packed for the CUDA driver (:class:`Launcher`), and the run that allocates
the result and launches (:class:`KernelRun`).

CuPy's ``RawKernel`` call converts each argument on every launch; for the single-factor
kernels' 18 arguments that was most of the host time of a repeated product. A :class:`Launcher` keeps each argument in a ``ctypes`` cell and the array of
their addresses that ``cuLaunchKernel`` reads, so a launch writes two pointers and makes one
driver call. The driver copies the arguments when the launch is queued, so the cells can be
rewritten by the next launch at once.

``cuLaunchKernel`` needs the device's context current in the calling thread, so each launch
makes sure of it (:func:`kscupy.core.device.bind_context`, a set lookup after the first).
"""
from __future__ import annotations

import ctypes
import threading

import numpy

from ..core.device import bind_context

__all__ = ["Launcher", "KernelRun"]

_CELLS = {numpy.dtype(numpy.int32): ctypes.c_int32, numpy.dtype(numpy.int64): ctypes.c_int64,
          numpy.dtype(numpy.uint64): ctypes.c_uint64,
          numpy.dtype(numpy.float32): ctypes.c_float,
          numpy.dtype(numpy.float64): ctypes.c_double}


class Launcher:
    """``launcher(x_ptr, y_ptr)`` launches ``fn(X, Y, *arguments)`` on CuPy's current stream.

    ``fn`` is a compiled ``cupy.RawKernel`` (loaded on the current device, which every
    launch must run on); ``arguments`` are CuPy arrays (passed by address and kept alive
    here), None (a null pointer: an optional table the kernel does without) and NumPy
    scalars of the kernel's parameter types (int32, int64, uint64, float32, float64);
    ``keep``: objects that own memory the kernel reads by addresses held inside those
    arrays, kept alive as long as the launch. ``pointers``: how many pointer arguments come
    first (two, ``X`` and ``Y``, unless more are asked for: :meth:`with_pointers` then
    launches).
    """

    def __init__(self, fn, grid, block, smem, arguments, keep=(), pointers=2):
        import cupy
        self._cupy = cupy
        self._current_stream = cupy.cuda.get_current_stream
        self._launch_kernel = cupy.cuda.driver.launchKernel
        self._device = cupy.cuda.runtime.getDevice()
        self._function = fn.kernel.ptr
        self._grid = tuple(grid) + (1,) * (3 - len(grid))
        self._block = tuple(block) + (1,) * (3 - len(block))
        self._smem = int(smem)
        self._x, self._y = ctypes.c_void_p(), ctypes.c_void_p()
        self._more = [ctypes.c_void_p() for _ in range(pointers - 2)]
        self._cells = [self._x, self._y] + self._more + [self._cell(a) for a in arguments]
        # the arrays passed by address, and what holds memory the kernel reads by an address
        # inside them (a segment's factors and tables, whose addresses its meta table holds)
        self._kept = [a for a in arguments if isinstance(a, cupy.ndarray)] + list(keep)
        self._addresses = (ctypes.c_void_p * len(self._cells))(
            *(ctypes.addressof(cell) for cell in self._cells))
        self._parameters = ctypes.addressof(self._addresses)
        self._lock = threading.Lock()     # the pointer cells are shared by all threads

    @property
    def grid(self) -> tuple:
        """The launch's grid ``(x, y, z)``."""
        return self._grid

    def _cell(self, argument):
        if argument is None:
            return ctypes.c_void_p(None)
        if isinstance(argument, self._cupy.ndarray):
            return ctypes.c_void_p(argument.data.ptr)
        if isinstance(argument, numpy.generic) and argument.dtype in _CELLS:
            return _CELLS[argument.dtype](argument.item())
        raise TypeError(f"a kernel argument must be a CuPy array, None or a NumPy int32, "
                        f"int64, uint64, float32 or float64 scalar, got "
                        f"{type(argument).__name__}")

    def __call__(self, x_ptr: int, y_ptr: int):
        (gx, gy, gz), (bx, by, bz) = self._grid, self._block
        stream = self._current_stream().ptr
        bind_context(self._device)
        with self._lock:
            self._x.value, self._y.value = x_ptr, y_ptr
            self._launch_kernel(self._function, gx, gy, gz, bx, by, bz, self._smem, stream,
                                self._parameters, 0)


    def with_pointers(self, x_ptr: int, y_ptr: int, *more: int):
        """Launch with all ``pointers`` pointer arguments (``__call__`` sets the first two
        only, the common case, at less host time)."""
        if len(more) != len(self._more):
            raise TypeError(f"the kernel takes {2 + len(self._more)} pointers, got "
                            f"{2 + len(more)}")
        (gx, gy, gz), (bx, by, bz) = self._grid, self._block
        stream = self._current_stream().ptr
        bind_context(self._device)
        with self._lock:
            self._x.value, self._y.value = x_ptr, y_ptr
            for cell, pointer in zip(self._more, more):
                cell.value = pointer
            self._launch_kernel(self._function, gx, gy, gz, bx, by, bz, self._smem, stream,
                                self._parameters, 0)


class KernelRun:
    """A prepared product: ``run(X)`` allocates a new C-contiguous ``Y`` of ``y_shape`` and
    ``dtype`` and calls ``launch(X's pointer, Y's pointer)``, which queues the product on
    CuPy's current stream: a kernel's :class:`Launcher`, or cuBLAS calls
    (:mod:`kscupy.kernels.gemm`); ``kept``: what the launch reads by address, kept alive
    with it. The launch reads only ``X``'s address (its shape and strides were fixed when
    the run was prepared), so :meth:`with_result_shape` serves a vector through the run
    prepared for its ``(N, 1)`` view without reshaping either side (a CuPy reshape costs
    host time), and a PyTorch tensor's product writes into a tensor PyTorch allocates
    (:func:`kscupy.core.foreign.tensor_product`). What a PyTorch tensor's product may hand
    to PyTorch's own cuBLAS calls instead: ``gemm``, ``(D, layout)`` where the run is one
    GEMM by the matrix ``D`` (``D @ X`` in ``"bsl"``, ``X @ D.T`` in ``"bsf"``); ``groups``,
    ``(W, x_size, x_strides, y_size, y_strides)`` where it is one batched product of the
    groups' blocks, ``Y_g = W[g] @ X_g`` (``W`` ``(G, b, c)``, the operator's blocks; ``X_g``
    the ``c × B`` matrix ``g`` of the operand seen with that size and those strides in
    elements, ``Y_g`` of the C-order result likewise, transposed in ``"bsf"``:
    :func:`kscupy.kernels.gemm.prepare_groups`). ``views`` holds other libraries' views of
    ``D`` or ``W``, made once."""
    __slots__ = ("launch", "y_shape", "dtype", "kept", "gemm", "groups", "views", "_new")

    def __init__(self, launch, y_shape, dtype, kept=(), gemm=None, groups=None):
        import cupy
        self.launch, self.y_shape, self.dtype = launch, tuple(y_shape), numpy.dtype(dtype)
        self.kept, self.gemm, self.groups, self.views = kept, gemm, groups, {}
        self._new = cupy.ndarray          # the constructor: cupy.empty's Python layer skipped

    def __call__(self, X):
        Y = self._new(self.y_shape, self.dtype)
        self.launch(X.data.ptr, Y.data.ptr)
        return Y

    def with_result_shape(self, y_shape) -> "KernelRun":
        """The same launch with ``Y`` allocated as ``y_shape`` (same size, C order)."""
        if numpy.prod(y_shape) != numpy.prod(self.y_shape):
            raise ValueError(f"result shape {y_shape} does not hold {self.y_shape}")
        return KernelRun(self.launch, y_shape, self.dtype, self.kept, self.gemm, self.groups)
