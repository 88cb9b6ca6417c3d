"""Compile kernel instantiations from ``kernels_cu/`` with NVRTC (``cupy.RawModule``), once.

Every instantiation is compiled on first use and kept for the process here, and on disk by
CuPy's kernel cache. The source text handed to NVRTC starts with a digest of every file in
``kernels_cu/``, so CuPy's cache (keyed by source text) notices edits to included headers.

Threads may ask for kernels at the same time (:func:`kscupy.warmup` prepares its products in
a thread pool): NVRTC runs without the GIL, so different instantiations compile in parallel,
and one instantiation asked for twice is compiled once (a lock per instantiation).

**Compiling in the background.** A tuned instantiation takes NVRTC a fraction of a second
to over a second; ``auto`` does not wait for one. Inside :func:`unless_compiled`, asking
for an instantiation that is not loaded yet submits its compile to a pool of background
threads (once) and raises :class:`StillCompiling`; the caller
(:func:`kscupy.engine.execute.prepare`) then runs the direct kernel
(``kernels_cu/ks_direct.cu``, quick to compile) for this call. When a background compile
finishes, :data:`compiles_finished` grows, which is part of the stamp of every prepared run
(:mod:`kscupy.engine.runs`), so the next call prepares
again and finds the tuned kernel. An instantiation that an earlier process compiled (a marker
file beside CuPy's disk cache says so) loads from that cache in milliseconds, in the
calling thread. ``KSCUPY_BACKGROUND_COMPILE=0`` in the environment (or
:func:`waiting`) makes every call wait instead: each call then runs the same kernels, bit for
bit, from the first one on. A compile that failed in the background raises its error in the
next call that asks for it. The process waits for compiles still running when it exits, so
that they land in the disk cache. A background thread loads what it compiled in CUDA's
relaxed stream-capture mode, so that a CUDA graph another thread captures meanwhile stays
valid.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import hashlib
import os
import threading
from pathlib import Path

import numpy

from ..core import arrays

__all__ = ["source_dir", "scalar_name", "function", "compile_ahead", "kernels_loaded",
           "StillCompiling",
           "unless_compiled", "waiting", "finish_background_compiles", "compiles_finished"]

#: Whether :func:`unless_compiled` compiles in the background (``KSCUPY_BACKGROUND_COMPILE=0``
#: turns it off: every call then waits for its kernel).
BACKGROUND = os.environ.get("KSCUPY_BACKGROUND_COMPILE", "1") != "0"
#: Background compiles at once (NVRTC runs without the GIL; each uses one core).
BACKGROUND_THREADS = min(8, os.cpu_count() or 1)

_SCALAR = {numpy.dtype(numpy.float16): "ks::float16", numpy.dtype(numpy.float32): "float",
           numpy.dtype(numpy.float64): "double",
           numpy.dtype(numpy.complex64): "ks::cplx<float>",
           numpy.dtype(numpy.complex128): "ks::cplx<double>"}
if arrays.BFLOAT16 is not None:
    _SCALAR[arrays.BFLOAT16] = "ks::bfloat16"


def source_dir() -> Path:
    """Directory of the CUDA sources: inside the installed package, else the source tree."""
    installed = Path(__file__).resolve().parent.parent / "kernels_cu"
    return installed if installed.is_dir() else Path(__file__).resolve().parents[2] / "kernels_cu"


def scalar_name(dtype) -> str:
    """The kernels' C++ scalar type for a NumPy dtype."""
    return _SCALAR[numpy.dtype(dtype)]


@functools.lru_cache(maxsize=None)
def _source(filename: str) -> str:
    directory = source_dir()
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.cu*")):
        digest.update(path.name.encode() + path.read_bytes())
    return f"// kernels_cu digest {digest.hexdigest()}\n" + (directory / filename).read_text()


_functions: dict = {}        # (filename, name, smem, device_id, prefer_shared) -> function
_key_locks: dict = {}
_key_locks_lock = threading.Lock()
_pending: dict = {}          # key -> Future of a background compile
_pending_lock = threading.Lock()
_pool = None
_mode = threading.local()    # .background: depth of unless_compiled; .waiting: of waiting
#: Background compiles finished in this process (successful or not).
compiles_finished = 0


class StillCompiling(Exception):
    """Raised inside :func:`unless_compiled` for an instantiation whose compile is running in
    the background (``key``: what :func:`function` was asked for)."""

    def __init__(self, key):
        super().__init__(f"{key[1]} is compiling in the background")
        self.key = key


@contextlib.contextmanager
def unless_compiled():
    """Within: :func:`function` does not wait for an instantiation that is not loaded; it
    starts its compile in the background and raises :class:`StillCompiling` (unless
    :data:`BACKGROUND` is off or :func:`waiting` is active)."""
    _mode.background = getattr(_mode, "background", 0) + 1
    try:
        yield
    finally:
        _mode.background -= 1


@contextlib.contextmanager
def waiting():
    """Within (this thread): every :func:`function` call waits for its kernel, also inside
    :func:`unless_compiled` (the tuner and warmup want the tuned kernels themselves)."""
    _mode.waiting = getattr(_mode, "waiting", 0) + 1
    try:
        yield
    finally:
        _mode.waiting -= 1


def prepare_all(*makers) -> list:
    """``[make() for make in makers]`` for the kernels of one run (each ``make`` asks
    :func:`function` for one): inside :func:`unless_compiled` a maker that raises
    :class:`StillCompiling` does not stop the later ones, so all the run's missing kernels
    start compiling in this one call, and the first StillCompiling is raised after them."""
    results, pending = [], None
    for make in makers:
        try:
            results.append(make())
        except StillCompiling as error:
            pending = pending or error
    if pending is not None:
        raise pending
    return results


def finish_background_compiles():
    """Wait for every background compile submitted so far (their errors are raised by the
    calls that ask for those kernels)."""
    with _pending_lock:
        futures = list(_pending.values())
    concurrent.futures.wait(futures)


def function(filename: str, name: str, smem: int = 0, device_id: int = 0,
             prefer_shared: bool = False):
    """The compiled kernel ``name`` (a template instantiation) of ``kernels_cu/filename``.

    ``smem``: dynamic shared memory it will be launched with (above 48 KiB the limit is
    raised); ``prefer_shared``: give shared memory all of the SM's storage that L1 can
    spare, so that several blocks each holding a whole tile fit per SM. ``device_id`` is
    part of the cache key: a function is loaded per device. Safe to call from several
    threads (see the module's docstring).
    """
    key = (filename, name, smem, device_id, prefer_shared)
    fn = _functions.get(key)
    if fn is None and BACKGROUND and getattr(_mode, "background", 0) \
            and not getattr(_mode, "waiting", 0) and not _compiled_before(key):
        return _from_background(key)
    if fn is None:
        with _key_locks_lock:
            lock = _key_locks.setdefault(key, threading.Lock())
        with lock:
            fn = _functions.get(key)
            if fn is None:
                fn = _functions[key] = _load(*key)
                _leave_marker(key)
    return fn


def compile_ahead(filename: str, name: str, smem: int = 0, device_id: int = 0,
                  prefer_shared: bool = False):
    """Start compiling an instantiation in the background (the arguments of
    :func:`function`), unless it is loaded, compiling, compiled by an earlier process, or
    :data:`BACKGROUND` is off. Returns at once."""
    key = (filename, name, smem, device_id, prefer_shared)
    if BACKGROUND and key not in _functions and key not in _pending and not _compiled_before(key):
        _submitted(key)


def _submitted(key):
    """The Future of ``key``'s background compile, submitted now if it was not."""
    global _pool
    with _pending_lock:
        future = _pending.get(key)
        if future is None:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(
                    BACKGROUND_THREADS, thread_name_prefix="kscupy-nvrtc")
            future = _pending[key] = _pool.submit(_compile_in_background, key)
            future.add_done_callback(_count_finished)
    return future


def _from_background(key):
    """The function of ``key`` if its background compile has finished (its error if it
    failed); else the compile is submitted (once) and StillCompiling raised."""
    future = _submitted(key)
    if not future.done():
        raise StillCompiling(key)
    future.result()                       # re-raises the compile's error
    return function(*key)                 # loaded by the background thread


def _marker(key) -> str:
    """A file in CuPy's kernel cache directory that says an earlier process compiled this
    instantiation (this source, this GPU architecture): it is then in that cache, loads in
    milliseconds, and is not worth a trip through the background."""
    import cupy
    filename, name, _, device_id, _ = key
    arch = cupy.cuda.Device(device_id).compute_capability
    tag = hashlib.sha256(f"{_source(filename)[:120]}|{name}|{arch}".encode()).hexdigest()
    # CuPy's documented cache location
    cache = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    return os.path.join(cache, "kscupy-compiled", tag)


def _compiled_before(key) -> bool:
    return os.path.exists(_marker(key))


def _leave_marker(key):
    path = _marker(key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()
    except OSError:        # a read-only cache: the next process compiles in the background
        pass


def _compile_in_background(key):
    import cupy
    with _capture_relaxed(), cupy.cuda.Device(key[3]):   # a new thread's device is 0
        function(*key)


#: ``CU_STREAM_CAPTURE_MODE_RELAXED`` of the driver's ``CUstreamCaptureMode``.
_CAPTURE_MODE_RELAXED = 2


@contextlib.contextmanager
def _capture_relaxed():
    """This thread's stream-capture interaction mode set to relaxed, restored on exit.

    Loading a module and raising a kernel's shared-memory limit are driver calls outside
    any stream. While a stream is captured in CUDA's default (global) mode, a call that
    CUDA deems potentially unsafe, from any thread, invalidates the capture (e.g. a user's
    CUDA graph captured while a background compile finishes); a thread in relaxed mode is
    not held to that. These calls do not touch the captured stream, so the graph stays
    what was captured. Where the driver library or the call is not there (another
    platform), the mode stays as it is."""
    exchange = _exchange_capture_mode()
    mode = ctypes.c_int(_CAPTURE_MODE_RELAXED)
    # (on success ``mode`` holds the thread's previous mode, put back on exit)
    relaxed = exchange is not None and exchange(ctypes.byref(mode)) == 0
    try:
        yield
    finally:
        if relaxed:
            exchange(ctypes.byref(mode))


@functools.lru_cache(maxsize=None)
def _exchange_capture_mode():
    """The driver's ``cuThreadExchangeStreamCaptureMode``, or None where it cannot be
    loaded."""
    try:
        return ctypes.CDLL("libcuda.so.1").cuThreadExchangeStreamCaptureMode
    except (OSError, AttributeError):
        return None


def _count_finished(future):
    global compiles_finished
    with _pending_lock:
        compiles_finished += 1


def kernels_loaded() -> int:
    """Kernel instantiations this process has loaded (compiled by NVRTC, or read from CuPy's
    disk cache when an earlier process compiled them)."""
    return len(_functions)


def _load(filename, name, smem, device_id, prefer_shared):
    import cupy
    module = cupy.RawModule(code=_source(filename), options=("-std=c++17", f"-I{source_dir()}"),
                            name_expressions=[name])
    fn = module.get_function(name)
    # CuPy may hand out the same CUfunction for the same source and name (its module cache):
    # raise the limit, never lower it below what an earlier key of this name asked for
    if smem > 48 * 1024 and fn.max_dynamic_shared_size_bytes < smem:
        fn.max_dynamic_shared_size_bytes = smem
    if prefer_shared:
        fn.preferred_shared_memory_carveout = 100
    return fn
