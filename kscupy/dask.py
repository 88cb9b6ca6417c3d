"""KS operators applied to ``dask.array`` batches, lazily, block by block.

``op @ X`` (``X`` a dask array of shape ``(N,)`` or ``(N, B)``) and ``X @ op.T`` (``X`` of
shape ``(B, N)``; also ``Z @ op``) return lazy dask arrays. The batch is split along its
batch axis only: when the feature axis spans several chunks it is first rechunked into one,
since every output row needs every input feature. Each block is multiplied where it
lives: with a NumPy operator NumPy chunks on the CPU; with a CuPy operator CuPy chunks on
the GPU of the worker that holds them, and NumPy chunks through that GPU and back
(:func:`kscupy.stream_matmul`: a batch in host memory, larger than the GPUs). The operator
travels to workers by pickle (:mod:`kscupy.storage`); under a ``distributed`` client it is
scattered once and reused by later products while its values stand. The result has dtype
``numpy.result_type(op.dtype, X.dtype)`` and a ``meta`` of the chunks' array type.

dask is imported only when a dask array meets an operator (``pip install kscupy[dask]``).

Several GPUs: :func:`gpu_cluster` starts a ``dask.distributed`` cluster of one worker per GPU;
chunks created on (or sent to) a worker are CuPy arrays on that worker's GPU, and each is
multiplied there (``docs/examples/dask_multi_gpu.py``).
"""
from __future__ import annotations

import collections
import logging
import math
import sys
import threading
import uuid

import numpy

from .core import arrays
from .streaming import stream_matmul

__all__ = ["matmul", "is_dask_array", "gpu_cluster"]


def is_dask_array(x) -> bool:
    """True for a ``dask.array.Array``, recognised without importing dask."""
    cls = type(x)
    return cls.__name__ == "Array" and cls.__module__.split(".")[:2] == ["dask", "array"]


def _apply_block(block, op, layout):
    return op.matmul(block, layout=layout)


def _stream_block(block, op, layout):
    """A NumPy chunk through a GPU operator (:func:`kscupy.stream_matmul`), host to host:
    a vector as a batch-size-last batch of one, as products take it."""
    if block.ndim == 1:
        return stream_matmul(op, block.reshape(-1, 1), layout="bsl").reshape(-1)
    return stream_matmul(op, block, layout=layout)


def matmul(op, X, layout="bsl"):
    """``op.matmul(X, layout=layout)`` for a dask array ``X``, as a lazy dask array.

    Parameters
    ----------
    op : a kscupy operator whose values live in the array module of ``X``'s chunks.
    X : dask.array.Array; ``layout="bsl"``: shape ``(N,)`` or ``(N, B)``; ``layout="bsf"``:
        shape ``(B, N)`` or ``(N,)``. NumPy chunks with a GPU operator go through the GPU of
        the worker that holds them, chunk by chunk (:func:`kscupy.stream_matmul`), and
        come back as NumPy chunks: a batch larger than the GPUs, in host memory.

    Returns
    -------
    dask.array.Array of shape ``(M,)``, ``(M, B)`` or ``(B, M)``, chunked like ``X`` along
    the batch axis, one chunk along the feature axis.

    Raises TypeError for CuPy chunks with a NumPy operator, chunks that are no NumPy or
    CuPy arrays or not of a float or complex dtype, ValueError on a shape
    mismatch or an unknown feature size.

    Examples
    --------
    >>> import numpy as np, dask.array as da, kscupy as ks
    >>> K = ks.KSMatrix.random((2, 3, 4, 5), dtype=np.float64, seed=0)
    >>> X = da.ones((1000, 40), chunks=(250, 20))
    >>> Y = X @ K.T
    >>> Y.shape, Y.chunks[1], type(Y.compute()).__name__
    ((1000, 30), (30,), 'ndarray')
    """
    import dask
    import dask.array

    if layout not in ("bsl", "bsf"):
        raise ValueError(f'layout must be "bsl" or "bsf", got {layout!r}')
    try:
        chunk_module = arrays.array_module(X._meta)
    except TypeError:
        raise TypeError(f"dask array chunks of type {type(X._meta).__name__} are not NumPy or "
                        f"CuPy arrays") from None
    apply = _apply_block
    if chunk_module is not op.xp:
        if op.xp is numpy:
            raise TypeError(f"cannot multiply a {type(op).__name__} holding numpy values with "
                            f"a dask array of {chunk_module.__name__} chunks; move one of them "
                            f"first (op.to_device(...) or X.map_blocks(...))")
        apply = _stream_block               # host chunks through the worker's GPU
    if X.ndim not in (1, 2):
        raise ValueError(f"operand must be 1-D or 2-D, got shape {X.shape}")
    arrays.check_operand_dtype(X.dtype)
    M, N = op.shape
    feature_axis = 0 if (X.ndim == 1 or layout == "bsl") else 1
    if any(math.isnan(size) for size in X.shape):
        raise ValueError(f"the dask array's chunk sizes are unknown (shape {X.shape}): call "
                         f"X.compute_chunk_sizes() first")
    if X.shape[feature_axis] != N:
        raise ValueError(f"shape mismatch: {type(op).__name__} of shape {op.shape} cannot be "
                         f"applied to a dask array of shape {X.shape} in layout {layout!r} "
                         f"(N={N} features along axis {feature_axis})")
    dtype = arrays.result_dtype(op.dtype, X.dtype)
    if len(X.chunks[feature_axis]) > 1:
        X = X.rechunk({feature_axis: -1})
    chunks = list(X.chunks)
    chunks[feature_axis] = (M,)
    meta = chunk_module.empty((0,) * X.ndim, dtype=dtype)
    token = uuid.uuid4().hex
    return dask.array.map_blocks(apply, X, _operator_argument(op, token), layout,
                                 chunks=tuple(chunks), dtype=dtype, meta=meta,
                                 name=f"kscupy-matmul-{token}")


def _operator_argument(op, token):
    """How the blocks of one product receive ``op``. Under a ``distributed`` client current
    in this process, a future of the operator scattered to the workers once and reused by
    every later product of the same operator while its values stand (:func:`_scattered`):
    the client sends it once, not with each graph (dask's memory manager may keep a single
    replica; a worker without one fetches it from a peer, and a copy's first product finds
    the plans an equal operator made in its process, :mod:`kscupy.engine.planner`).
    Otherwise one key of the graph (sent once to each worker, not once per block), named
    explicitly: dask would hash the operator's values to name it."""
    import dask
    scattered = _scattered(op)
    return scattered if scattered is not None else \
        dask.delayed(op, name=f"kscupy-operator-{token}")


#: Operators scattered to the workers of a client, by :meth:`_values_key`: ``key ->
#: (client, future)``, the least recently used dropped (with the workers' copy) beyond
#: MAX_SCATTERED. Keyed by what an operator applies, not by the object: ``X @ K.T`` makes
#: a new view of ``K`` each time, and a worker's in-process store keeps the object alive.
_SCATTERED: collections.OrderedDict = collections.OrderedDict()
_SCATTERED_LOCK = threading.Lock()
MAX_SCATTERED = 8


def _scattered(op):
    """The future of ``op`` scattered (``broadcast``) to the workers of the current
    ``distributed`` client, made once per client and per :meth:`_values_key` of the
    operator (a write makes a new one); None without a synchronous client that computes
    dask's graphs (``distributed`` not imported, no client made, an asynchronous one, or
    dask's scheduler set to another) or for an operator without such a key (then it travels
    with each graph). A graph holding the future computes on that client only: with a
    client current, ``compute(scheduler="threads")`` of such a product fails with dask's
    "Missing dependency" error (set dask's scheduler for the block instead,
    ``dask.config.set(scheduler="threads")``)."""
    distributed = sys.modules.get("distributed")
    key = getattr(op, "_values_key", lambda: None)()
    if distributed is None or key is None:
        return None
    import dask
    if dask.config.get("scheduler", None) != "dask.distributed":
        return None                         # graphs computed elsewhere could not resolve it
    try:
        client = distributed.default_client()
    except ValueError:                      # no client in this process
        return None
    if client.asynchronous:                 # its scatter is a coroutine
        return None
    with _SCATTERED_LOCK:
        found = _SCATTERED.get(key)
        if found is not None and found[0] is client and client.status == "running":
            _SCATTERED.move_to_end(key)
            return found[1]
        future = client.scatter(op, broadcast=True, hash=False)
        _SCATTERED[key] = (client, future)
        _SCATTERED.move_to_end(key)
        while len(_SCATTERED) > MAX_SCATTERED:
            _SCATTERED.popitem(last=False)
        return future


def gpu_cluster(count=None):
    """A local ``dask.distributed`` cluster of ``count`` single-threaded workers (default: one
    per visible GPU), worker ``i`` seeing only GPU ``i`` (its ``CUDA_VISIBLE_DEVICES``), so its
    CuPy arrays and kernels live there. ``dask_cuda.LocalCUDACluster`` when dask-cuda is
    installed, else plain ``distributed`` workers. Use it as a context manager with a
    ``distributed.Client``. ImportError without ``distributed``; RuntimeError without GPUs.
    """
    cupy, why = arrays.gpu_module()
    if cupy is None:
        raise RuntimeError(f"gpu_cluster needs GPUs: {why}")
    visible = cupy.cuda.runtime.getDeviceCount()
    count = visible if count is None else int(count)
    if not 1 <= count <= visible:
        raise ValueError(f"count must be between 1 and the {visible} visible GPUs, got {count}")
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        from distributed import Nanny, Scheduler, SpecCluster
        # one process per GPU: CUDA_VISIBLE_DEVICES is read when the worker's CUDA starts
        workers = {f"gpu{i}": {"cls": Nanny, "options": {
            "nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": str(i)}}} for i in range(count)}
        return SpecCluster(workers=workers, silence_logs=logging.WARNING,
                           scheduler={"cls": Scheduler, "options": {"dashboard_address": None}})
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=list(range(count)), threads_per_worker=1)
