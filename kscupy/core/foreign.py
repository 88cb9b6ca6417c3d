"""Arrays of other libraries (PyTorch, JAX, ...) through DLPack: taken in without a copy as
NumPy or CuPy arrays, and results handed back as the caller's type.

An array is *foreign* when it is no NumPy or CuPy array but exports ``__dlpack__`` and
``__dlpack_device__`` (the array API standard's interchange). :func:`take` views it as a
NumPy array (CPU memory) or a CuPy array (CUDA memory, on its device), zero-copy:
``cupy.from_dlpack`` passes CuPy's current stream to the producer, which orders its pending
work before it. The result goes back through the producing library's own ``from_dlpack``,
found among the modules already imported (kscupy imports no framework): ``torch``'s,
``jax.dlpack``'s, or ``from_dlpack`` of the producer's top-level module. A PyTorch CUDA
tensor skips the protocol, whose handshakes cost more host time than short products take:
it comes in as a CuPy view made from its pointer, shape and strides, and its result goes
back through a capsule (:func:`_tensor_taken`); a repeated product whose run is a launch
on pointers skips CuPy arrays altogether and writes into a tensor PyTorch allocates
(:func:`tensor_product`). Its product runs on PyTorch's current stream (as a CuPy
``ExternalStream``, or CuPy's current stream where that is PyTorch's), so that it follows
the caller's work with no wait between streams.

A PyTorch tensor whose conjugation or negation is a lazy bit (``t.conj()``,
``t.conj().imag``) is resolved first, a copy (:func:`_resolved`).

bfloat16 in host memory: NumPy takes no bfloat16 through DLPack, so where ``ml_dtypes``
gives NumPy the dtype, a PyTorch tensor comes in as its bits (``tensor.view(torch.int16)``
through DLPack, viewed as bfloat16: no copy) and a JAX array through ``numpy.asarray``, and
results go back the same ways (:data:`_HOST_BFLOAT16`).
"""
from __future__ import annotations

import contextlib
import functools
import sys
import warnings

import numpy

from . import arrays
from .arrays import array_module, gpu_module

__all__ = ["Foreign", "is_foreign", "take", "native", "tensor_product"]

#: DLPack device types (``DLDeviceType``) whose memory NumPy reads, and CuPy.
_CPU = (1, 3)           # kDLCPU, kDLCUDAHost (pinned host memory)
_CUDA = (2, 13)         # kDLCUDA, kDLCUDAManaged

#: The ``from_dlpack`` of the libraries whose array types' modules are not the library
#: itself (a JAX array's class lives in ``jaxlib``): ``(module, attribute)``.
_JAX = (("jax.dlpack", "from_dlpack"), ("jax.numpy", "from_dlpack"))
_FROM_DLPACK = {"jaxlib": _JAX, "jax": _JAX, "torch": (("torch", "from_dlpack"),)}


class Foreign:
    """A foreign array taken in: ``native`` its NumPy or CuPy view, ``back(result)`` a
    NumPy or CuPy result as the caller's type (the result itself where the producer offers
    no ``from_dlpack``), ``stream`` the context to compute in: the producer's current CUDA
    stream as CuPy's where the producer says which it is (PyTorch; with the tensor's GPU made
    current where it is not; nothing where it is CuPy's current stream already), else the
    array's GPU (a context that changes nothing where it is the current one). (A plain
    class with slots: one is made for every product of a foreign operand, and a frozen
    dataclass costs the host several times more to make.)"""
    __slots__ = ("native", "back", "stream")

    def __init__(self, native, back, stream=None):
        self.native, self.back = native, back
        self.stream = contextlib.nullcontext() if stream is None else stream


def is_foreign(x) -> bool:
    """Whether ``x`` is an array of another library that DLPack can hand over (not a NumPy
    or CuPy array, nor one of their subclasses)."""
    kind = type(x)
    known = _FOREIGN_TYPES.get(kind)
    if known is None:       # decided once per type (the protocol's methods are the type's)
        if len(_FOREIGN_TYPES) >= 256:
            _FOREIGN_TYPES.clear()
        known = _FOREIGN_TYPES[kind] = _foreign_type(x)
    return known


_FOREIGN_TYPES: dict = {}


def _foreign_type(x) -> bool:
    if not (hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__")):
        return False
    try:
        array_module(x)
        return False
    except TypeError:
        return True


def take(x, role: str = "operand") -> Foreign:
    """``x`` (a foreign array, :func:`is_foreign`) as a NumPy or CuPy array sharing its
    memory. TypeError naming the fix for memory kscupy cannot reach (another device type)
    or a dtype NumPy and CuPy cannot take (bfloat16 without ``ml_dtypes``; NumPy takes none
    through DLPack)."""
    library = type(x).__module__.split(".")[0]
    x = _resolved(x, library)
    if library == "torch" and x.is_cuda:
        taken = _tensor_taken(x)
        if taken is not None:
            return taken
    device_type, device_id = (int(v) for v in x.__dlpack_device__())
    try:
        if device_type in _CPU and _host_bfloat16(x, library):
            taken_in, back = _HOST_BFLOAT16[_family(library)]
            return Foreign(taken_in(x), _bfloat16_back(back, _back_to(library)))
        if device_type in _CPU:
            native = numpy.from_dlpack(x)
        elif device_type in _CUDA:
            cupy, why = gpu_module()
            if cupy is None:
                raise TypeError(f"a {library} array in GPU memory as {role}, but {why}")
            stream = _producer_stream(cupy, x, library, device_id)
            with cupy.cuda.Device(device_id), \
                    stream if stream is not None else contextlib.nullcontext():
                native = cupy.from_dlpack(x)
            return Foreign(native, _back_to(library), stream)
        else:
            raise TypeError(f"a {library} array on DLPack device type {device_type} as "
                            f"{role}: kscupy runs on the CPU (NumPy) and on CUDA GPUs (CuPy)")
    except (BufferError, ValueError, RuntimeError) as exc:
        dtype = str(getattr(x, "dtype", "")).lower()
        if "bfloat16" in dtype:
            fix = ("install ml_dtypes (pip install 'kscupy[bfloat16]'), with which NumPy and "
                   "CuPy 14 hold bfloat16, or convert it to float32 first"
                   if arrays.BFLOAT16 is None else
                   "NumPy takes no bfloat16 through DLPack, and kscupy takes host bfloat16 "
                   "from PyTorch and JAX only: convert it to float32 first, or multiply on "
                   "the GPU")
            raise TypeError(f"a bfloat16 {library} array as {role}: {fix}") from None
        raise TypeError(f"a {library} array as {role} could not be taken through DLPack "
                        f"({exc}); convert it to a NumPy or CuPy array") from None
    return Foreign(native, _back_to(library))


def native(x, role: str = "operand"):
    """``take(x, role).native`` for use on CuPy's current stream of the array's GPU: where
    the producer's stream (PyTorch's current one) is another, that stream waits for the
    work pending on it (an event), so that a copy of values or a gradient's read of ``G``
    sees the tensor as PyTorch left it. (Products need no wait: they run on the producer's
    stream.)"""
    taken = take(x, role)
    stream = taken.stream
    ptr = getattr(stream, "ptr", None)
    if ptr is not None:
        import cupy
        # the current stream of the tensor's GPU, where its users run (device_of)
        with cupy.cuda.Device(stream.device_id):
            current = cupy.cuda.get_current_stream()
            if current.ptr != ptr:
                current.wait_event(stream.record())
    return taken.native


def _resolved(x, library: str):
    """``x`` with PyTorch's lazy conjugation and negation applied (a copy where one is set:
    ``t.conj()``, ``t.conj().imag``): DLPack carries a tensor's data without those bits, and
    PyTorch refuses to export the first and exports the second's data unnegated."""
    if library != "torch":
        return x
    if x.is_conj():
        x = x.resolve_conj()
    if x.is_neg():
        x = x.resolve_neg()
    return x


def _family(library: str) -> str:
    return "jax" if library in ("jax", "jaxlib") else library


def _torch():
    return sys.modules["torch"]


#: bfloat16 in host memory, per library: ``(take in, give back)`` between its arrays and
#: NumPy's bfloat16 ones (``ml_dtypes``'s), which DLPack cannot carry to and from NumPy.
_HOST_BFLOAT16 = {
    "torch": (lambda x: numpy.from_dlpack(x.view(_torch().int16)).view(arrays.BFLOAT16),
              lambda r: _torch().from_dlpack(r.view(numpy.int16)).view(_torch().bfloat16)),
    "jax": (lambda x: numpy.asarray(x),
            lambda r: sys.modules["jax.numpy"].asarray(r)),
}


def _host_bfloat16(x, library: str) -> bool:
    """Whether ``x`` is a bfloat16 array in host memory of a library of
    :data:`_HOST_BFLOAT16`, with ``ml_dtypes`` (and the library) imported."""
    family = _family(library)
    module = "jax.numpy" if family == "jax" else family
    return (arrays.BFLOAT16 is not None and family in _HOST_BFLOAT16
            and module in sys.modules and "bfloat16" in str(getattr(x, "dtype", "")))


def _bfloat16_back(bfloat16_back, back):
    """``back`` of a result, through ``bfloat16_back`` where it is bfloat16."""
    return lambda result: bfloat16_back(result) if arrays.is_bfloat16(result.dtype) \
        else back(result)


def tensor_product(x, runs, layout: str, backend: str):
    """The product of a repeated PyTorch CUDA tensor ``x`` with no CuPy array made on either
    side: where ``runs`` (a :class:`~kscupy.engine.runs.PreparedRuns`) holds a current
    kernel run for ``x``'s CuPy view (``kernel_run``: one that reads the operand's address
    and writes a new C-order result, kept by the first product of such a tensor), the result
    is a tensor PyTorch allocates (on its current stream, as its own operations do) and the
    run writes into it on that stream. None where it does not apply: the product then goes
    through :func:`take`. (Taking the tensor in as a CuPy view and handing a CuPy result
    back through DLPack cost the host more than short products take on the GPU.)

    Where the run is one 16-bit cuBLAS call, a GEMM by a kept matrix ``D`` (``run.gemm``)
    or one batched GEMM of the groups' blocks (``run.groups``), the product is PyTorch's own
    ``matmul`` or ``bmm`` by a view of ``D`` or of the blocks instead (:func:`_torch_blas`):
    the same cuBLAS call summed in float32, for a few microseconds less of host time than
    kscupy's call (the cuBLAS handle's stream and modes set from Python), which is what
    bounds short products. Not float32: PyTorch's float32 GEMM follows its own TF32 switch,
    which kscupy's default precision does not."""
    parts = _tensor_parts(x)        # (CuPy is present: only its operators keep runs)
    if parts is None:
        return None
    shape, strides, dtype, address, device_id = parts
    run = runs.kernel_run(shape, strides, dtype, address, layout, backend, device_id)
    if run is None:
        return None
    if dtype.itemsize == 2 and (run.gemm is not None or run.groups is not None):
        result = _torch_blas(x, run, dtype, device_id)
        if result is not None:
            return result
    result = x.new_empty(run.y_shape)
    stream = _producer_stream(_gpu_cupy(), x, "torch", device_id)
    if stream is None:          # PyTorch's stream is CuPy's current one (entering costs)
        run.launch(address, result.data_ptr())
    else:
        with stream:
            run.launch(address, result.data_ptr())
    return result


def _torch_blas(x, run, dtype, device_id):
    """``run``'s cuBLAS call on the 16-bit tensor ``x`` (on GPU ``device_id``) through
    PyTorch (on PyTorch's current stream), by a view of the run's matrix or blocks made once:
    ``matmul`` for ``run.gemm``, ``bmm`` on strided views of ``x`` and of the result for
    ``run.groups`` (views that cuBLAS reads in place, as kscupy's call does). PyTorch's own
    cuBLAS switches then apply (reduced-precision reductions, cuBLASLt, TunableOp), at
    defaults that compute what kscupy's call does. None where PyTorch would not compute
    what the run does or would refuse: under autocast (it would cast the operands), for
    float16 with PyTorch's float16 accumulation switched on
    (``torch.backends.cuda.matmul.allow_fp16_accumulation``), with deterministic
    algorithms asked for (PyTorch's GEMMs then raise unless ``CUBLAS_WORKSPACE_CONFIG`` is
    set), or with the matrix on another GPU (which cuBLAS reads across, and PyTorch
    refuses)."""
    torch = _torch()
    if torch.is_autocast_enabled() or torch.are_deterministic_algorithms_enabled() or \
            (dtype == numpy.float16 and _fp16_accumulation()):
        return None
    kept = run.views.get("torch")
    if kept is None:
        # no stream order asked for: the matrix was complete before its run was kept (a
        # preparation waits for what it queued), and a wait recorded on CuPy's stream
        # would break a PyTorch graph capture in progress
        A = run.gemm[0] if run.gemm is not None else run.groups[0]
        view = torch.utils.dlpack.from_dlpack(A.__dlpack__(stream=-1))
        if run.gemm is not None and run.gemm[1] == "bsf":
            view = view.T
        kept = run.views["torch"] = (view, A.device.id)
    operand, device = kept
    if device != device_id:
        return None
    if run.gemm is not None:
        return torch.matmul(operand, x) if run.gemm[1] == "bsl" else torch.matmul(x, operand)
    _, x_size, x_strides, y_size, y_strides = run.groups
    result = x.new_empty(run.y_shape)
    torch.bmm(operand, x.as_strided(x_size, x_strides),
              out=result.as_strided(y_size, y_strides))
    return result


def _fp16_accumulation() -> bool:
    """Whether PyTorch's float16 GEMMs accumulate in float16 (a switch since PyTorch 2.7)."""
    get = _fp16_accumulation_switch()
    return get is not None and get()


@functools.lru_cache(maxsize=1)
def _fp16_accumulation_switch():
    """PyTorch's reader of that switch, looked up once (None before PyTorch 2.7)."""
    return getattr(_torch()._C, "_get_cublas_allow_fp16_accumulation", None)


def _tensor_parts(x):
    """``(shape, strides in bytes, NumPy dtype, address, device)`` of ``x`` where it is a
    PyTorch CUDA tensor that CuPy can view as it is; None where DLPack must decide (and say
    what is wrong): not such a tensor, a dtype CuPy has no name for here (bfloat16 without
    ``ml_dtypes``), a tensor that requires grad (the exporter refuses it), one with a lazy
    conjugation or negation (:func:`_resolved`), or one without strided memory (sparse,
    nested, ...). The caller knows CuPy is present. (Every product of a tensor asks this:
    each attribute PyTorch reports costs the host a little, so each is read once.)"""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor) or x.requires_grad or x.is_neg() \
            or x.layout is not torch.strided or x.is_nested:
        return None
    device_id = x.get_device()          # -1 for a tensor in host memory
    dtype = _torch_dtypes().get(x.dtype)
    if device_id < 0 or dtype is None or (dtype.kind == "c" and x.is_conj()):
        return None
    size = dtype.itemsize
    steps = x.stride()
    # a matrix's two strides without a loop (most products' operands)
    strides = (steps[0] * size, steps[1] * size) if len(steps) == 2 else \
        tuple([s * size for s in steps])
    # torch.Size is a tuple: it keys the runs as the CuPy view's shape would
    return x.shape, strides, dtype, x.data_ptr(), device_id


def _tensor_taken(x):
    """The PyTorch CUDA tensor ``x`` taken in as a CuPy view made from its pointer, shape and
    strides, which PyTorch reports in a fraction of the host time its DLPack export takes
    (products of a few tens of microseconds would otherwise wait on the host); the view
    keeps ``x`` alive, and the result goes back through :func:`_tensor_back`. None where
    DLPack must decide (:func:`_tensor_parts`)."""
    cupy = _gpu_cupy()
    parts = None if cupy is None else _tensor_parts(x)
    if parts is None:
        return None
    shape, strides, dtype, address, device_id = parts
    # the bytes the view reaches: its last element's offset plus one (PyTorch's strides are
    # never negative; an empty tensor reaches none)
    if x.is_contiguous():
        span = x.numel() * dtype.itemsize
    else:
        span = 0 if 0 in shape else \
            dtype.itemsize + sum((n - 1) * s for n, s in zip(shape, strides))
    memory = cupy.cuda.UnownedMemory(address, span, x, device_id)
    native = cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)
    return Foreign(native, _tensor_back, _producer_stream(cupy, x, "torch", device_id))


def _tensor_back(result):
    """A CuPy result, made on CuPy's current stream, as a PyTorch tensor sharing its memory,
    through a DLPack capsule. Where PyTorch's current stream is CuPy's (a product, which
    runs on the producer's stream) the capsule asks for no stream order (``stream=-1``:
    PyTorch's ``from_dlpack`` of the array itself would ask for a handshake anyway); where
    not, for PyTorch's stream, which CuPy then makes wait for the result (the DLPack
    convention: 1 names the legacy default stream, whose handle is 0)."""
    torch = _torch()
    import cupy
    handle = _raw_stream(torch, result.device.id)
    order = -1 if handle == cupy.cuda.get_current_stream().ptr else (handle or 1)
    return torch.utils.dlpack.from_dlpack(result.__dlpack__(stream=order))


def _raw_stream(torch, device_id) -> int:
    """PyTorch's current stream on ``device_id``, its handle: through PyTorch's C module
    where it offers that (a tenth of the host time of ``current_stream``, which builds a
    Stream object), else through the public function."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(device_id) if raw is not None else \
        torch.cuda.current_stream(device_id).cuda_stream


@functools.lru_cache(maxsize=1)
def _gpu_cupy():
    """CuPy where it imports and sees a CUDA device, else None: asked once (a tensor in GPU
    memory is taken on every product)."""
    return gpu_module()[0]


@functools.lru_cache(maxsize=1)
def _torch_dtypes() -> dict:
    """PyTorch's dtypes that CuPy holds, as NumPy dtypes (bfloat16 where ``ml_dtypes`` gives
    it NumPy's name)."""
    torch = _torch()
    names = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32",
             "float64", "complex64", "complex128")
    dtypes = {getattr(torch, name): numpy.dtype(name) for name in names}
    if arrays.BFLOAT16 is not None:
        dtypes[torch.bfloat16] = arrays.BFLOAT16
    return dtypes


def _producer_stream(cupy, x, library, device_id):
    """PyTorch's current stream on the tensor's device, as a CuPy stream (so that the
    product runs where the caller's work runs, with no wait between streams), which also
    makes the tensor's GPU current where it is not (:class:`_OnDevice`); None where it is
    CuPy's current stream on the current GPU (both on the legacy default stream, the common
    case: entering a stream costs the host more than some products take). For other
    producers the array's GPU as a context (None where it is the current one)."""
    torch = sys.modules.get("torch") if library == "torch" else None
    on_current = device_id == cupy.cuda.runtime.getDevice()
    if torch is None:
        return None if on_current else cupy.cuda.Device(device_id)
    handle = _raw_stream(torch, device_id)
    if on_current and handle == cupy.cuda.get_current_stream().ptr:
        return None
    key = (handle, device_id)
    stream = _STREAMS.get(key)
    if stream is None:      # a wrapper of the handle, made once (CuPy never destroys it)
        if len(_STREAMS) >= MAX_STREAMS:
            _STREAMS.clear()
        # CuPy 14 deprecates ExternalStream for Stream.from_external, which takes an object
        # of the CUDA stream protocol rather than a handle and a device; ExternalStream is
        # the one constructor of both CuPy 13 and 14 (a user's warning filters stay theirs
        # for everything else)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = _STREAMS[key] = cupy.cuda.ExternalStream(*key)
    return stream if on_current else _OnDevice(cupy, stream)


class _OnDevice:
    """A producer's stream on a GPU other than CuPy's current one, as a context that makes
    that GPU current too (CuPy enters no stream of another device, and the product's arrays
    live there); ``ptr``, ``device_id`` and ``record()`` as the stream's."""

    def __init__(self, cupy, stream):
        self.stream, self.ptr, self.device_id = stream, stream.ptr, stream.device_id
        self._device = cupy.cuda.Device(stream.device_id)

    def record(self):
        """An event recorded on the stream (made on its device, as CUDA requires)."""
        with self._device:
            return self.stream.record()

    def __enter__(self):
        self._device.__enter__()
        try:
            return self.stream.__enter__()
        except BaseException:
            self._device.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        try:
            self.stream.__exit__(*exc)
        finally:
            self._device.__exit__(*exc)


#: CuPy's wrappers of producers' streams, by (handle, device): one per stream, not one per
#: product (making one costs the host more than some products take); at most MAX_STREAMS,
#: all dropped when a new one would exceed it.
_STREAMS: dict = {}
MAX_STREAMS = 64


def _back_to(library: str):
    """The producer's ``from_dlpack``, if its library is imported and has one, else the
    identity."""
    for module_name, attribute in _FROM_DLPACK.get(library, ((library, "from_dlpack"),)):
        convert = getattr(sys.modules.get(module_name), attribute, None)
        if callable(convert):
            return convert
    return lambda result: result
