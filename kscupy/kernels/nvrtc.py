"""Compile kernel instantiations from ``kernels_cu/`` with NVRTC (``cupy.RawModule``), once.

Every instantiation is compiled on first use and kept for the process here, and on disk by
CuPy's kernel cache. The source text handed to NVRTC starts with a digest of every file in
``kernels_cu/``, so CuPy's cache (keyed by source text) notices edits to included headers.

Threads may ask for kernels at the same time (:func:`kscupy.warmup` prepares its products in
a thread pool): NVRTC runs without the GIL, so different instantiations compile in parallel,
and one instantiation asked for twice is compiled once (a lock per instantiation).
"""
from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path

import numpy

__all__ = ["source_dir", "scalar_name", "function", "kernels_loaded"]

_SCALAR = {numpy.dtype(numpy.float16): "ks::float16", numpy.dtype(numpy.float32): "float",
           numpy.dtype(numpy.float64): "double",
           numpy.dtype(numpy.complex64): "ks::cplx<float>",
           numpy.dtype(numpy.complex128): "ks::cplx<double>"}


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
    if fn is None:
        with _key_locks_lock:
            lock = _key_locks.setdefault(key, threading.Lock())
        with lock:
            fn = _functions.get(key)
            if fn is None:
                fn = _functions[key] = _load(*key)
    return fn


def kernels_loaded() -> int:
    """Kernel instantiations this process has loaded (compiled by NVRTC, or read from CuPy's
    disk cache when an earlier process compiled them)."""
    return len(_functions)


def _load(filename, name, smem, device_id, prefer_shared):
    import cupy
    module = cupy.RawModule(code=_source(filename), options=("-std=c++17", f"-I{source_dir()}"),
                            name_expressions=[name])
    fn = module.get_function(name)
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    if prefer_shared:
        fn.preferred_shared_memory_carveout = 100
    return fn
