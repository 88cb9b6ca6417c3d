"""Products of a GPU operator with a batch held in host memory, larger than the GPU.

:func:`stream_matmul` cuts the batch into chunks along its batch axis and sends them through
the GPU on several CUDA streams, so that one chunk's host-to-device copy, another's product
and a third's device-to-host copy overlap. The streams start after the caller's stream's
work; the products run one after another (the first builds what the operator keeps, its
converted values and kernel tables, which the others read), the copies around them. Each
stream owns a device buffer for its input chunk; the product allocates its result from
CuPy's pool on that stream. A chunk's copies
run from and into the caller's arrays directly where they are page-locked ("pinned") and
the chunk is contiguous (batch-size-first rows of C-ordered arrays); otherwise through a
pinned staging buffer per stream, filled and emptied by the host while the GPU works on
the other streams (a copy from pageable memory would block the host in any case).
"""
from __future__ import annotations

import numpy

from .core import arrays, memory
from .core.argument_checks import check_layout, positive_int

__all__ = ["stream_matmul", "chunks"]

#: Default device memory for one stream's chunk (its input and its result).
CHUNK_BYTES = 256 * 2**20


def chunks(batch: int, per_chunk: int) -> list:
    """``[(start, stop), ...]`` covering ``range(batch)`` in runs of ``per_chunk`` (the last
    one shorter where ``per_chunk`` does not divide ``batch``)."""
    return [(start, min(start + per_chunk, batch)) for start in range(0, batch, per_chunk)]


def stream_matmul(op, X, *, layout="bsf", out=None, chunk_bytes=None, streams=2,
                  backend="auto", progress=False):
    """``op`` applied to a NumPy batch ``X`` through the GPU, chunk by chunk.

    Parameters
    ----------
    op : a kscupy operator holding CuPy values (KSMatrix, KSChain, ...), shape ``(M, N)``.
    X : numpy.ndarray, ``(B, N)`` for ``layout="bsf"`` (``X @ op.T``) or ``(N, B)`` for
        ``"bsl"`` (``op @ X``), in host memory (pinned or not).
    layout : {"bsf", "bsl"}
    out : numpy.ndarray of the result's shape and dtype (``(B, M)`` or ``(M, B)``,
        ``numpy.result_type(op.dtype, X.dtype)``) to write into; default a new (pageable)
        array. Pinned ``X`` and ``out`` (``cupyx.empty_pinned``) in C order let the copies
        run straight from and into them.
    chunk_bytes : device bytes of one chunk's input and result together (default
        :data:`CHUNK_BYTES`, less where the GPU has less free memory); each stream holds one.
    streams : CUDA streams the chunks rotate over (at least 1).
    backend : as for ``op.matmul``.
    progress : a tqdm progress bar over the chunks (needs tqdm).

    Returns
    -------
    ``out``.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> cupy, _ = ks.gpu_module()
    >>> if cupy is not None:      # doctest: +SKIP
    ...     B = ks.butterfly(4096, dtype=np.float32, xp=cupy, seed=0)
    ...     X = np.ones((1_000_000, 4096), dtype=np.float32)       # 16 GB in host memory
    ...     Y = ks.stream_matmul(B, X)                             # X @ B.T, (1e6, 4096)
    """
    check_layout(layout)
    if not _an_operator(op):
        raise TypeError(f"stream_matmul applies a kscupy operator, got {type(op).__name__}")
    cupy, why = arrays.gpu_module()
    if op.xp is numpy or cupy is None:
        raise TypeError("stream_matmul streams a host batch through the GPU: it needs an "
                        "operator holding CuPy values" + (f" ({why})" if cupy is None else
                                                          "; for a NumPy operator use "
                                                          "op.matmul(X)"))
    if arrays.plain_array_module(X, "X") is not numpy:
        raise TypeError("stream_matmul takes a batch in host memory (a NumPy array); a CuPy "
                        "batch is multiplied with op.matmul(X)")
    arrays.check_operand_dtype(X.dtype, "X")
    streams = positive_int("streams", streams)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    M, N = op.shape
    batch_axis = 0 if layout == "bsf" else 1
    if X.shape[1 - batch_axis] != N:
        expected = "(B, N)" if layout == "bsf" else "(N, B)"
        raise ValueError(f"X of shape {X.shape} in layout {layout!r}: expected {expected} "
                         f"with N={N}")
    B = X.shape[batch_axis]
    dtype = arrays.result_dtype(op.dtype, X.dtype)
    shape = (B, M) if layout == "bsf" else (M, B)
    if out is None:
        memory.check_fits(dtype.itemsize * B * M, numpy, f"the result of shape {shape}")
        out = numpy.empty(shape, dtype=dtype)
    elif not isinstance(out, numpy.ndarray) or out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out must be a NumPy array of shape {shape} and dtype {dtype}, got "
                         f"{type(out).__name__} {getattr(out, 'shape', '')} "
                         f"{getattr(out, 'dtype', '')}")
    elif not out.flags.writeable:
        raise ValueError("out is read-only")
    if B == 0:
        return out
    per_row = (N * X.dtype.itemsize + M * dtype.itemsize)
    budget = chunk_bytes if chunk_bytes is not None else min(
        CHUNK_BYTES, memory.available_bytes(cupy) // (4 * streams))
    if budget < per_row:
        raise ValueError(f"chunk_bytes={budget} is less than one batch element's input and "
                         f"result ({per_row} bytes)")
    runs = chunks(B, max(1, min(B, budget // per_row)))
    _Pipeline(cupy, op, X, out, layout, backend, streams, runs[0][1]).run(runs, progress)
    return out


class _Pipeline:
    """The streams, buffers and bookkeeping of one :func:`stream_matmul`. Every buffer is
    flat and sized for the longest chunk; a chunk uses its first elements as a C-ordered
    array of the chunk's shape (so the ragged last chunk is contiguous too)."""

    def __init__(self, cupy, op, X, out, layout, backend, streams, rows):
        self.cupy, self.op, self.X, self.out = cupy, op, X, out
        self.layout, self.backend = layout, backend
        # the streams start after the caller's stream's work (the operator's values, X's
        # producer): they do not wait for it on their own
        caller = cupy.cuda.get_current_stream().record()
        self.streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]
        for stream in self.streams:
            stream.wait_event(caller)
        # CuPy 13 made ndarray.get wait for its copy unless told not to
        self.get_async = {"blocking": False} if int(cupy.__version__.split(".")[0]) >= 13 \
            else {}
        self.N = X.shape[1] if layout == "bsf" else X.shape[0]
        self.M = out.shape[1] if layout == "bsf" else out.shape[0]
        # straight copies need pinned, C-ordered arrays and contiguous chunks (bsf rows)
        self.direct_in = layout == "bsf" and X.flags.c_contiguous and _pinned(cupy, X)
        self.direct_out = layout == "bsf" and out.flags.c_contiguous and _pinned(cupy, out)
        self.device_in = []
        for stream in self.streams:             # each from its own stream's pool
            with stream:
                self.device_in.append(cupy.empty(rows * self.N, dtype=X.dtype))
        self.stage_in = None if self.direct_in else [
            _pinned_array(rows * self.N, X.dtype) for _ in self.streams]
        self.stage_out = None if self.direct_out else [
            _pinned_array(rows * self.M, out.dtype) for _ in self.streams]
        self.copied_in = [None] * len(self.streams)     # event: the staging input is free
        self.pending = [None] * len(self.streams)       # (event, start, stop) to empty

    def _part(self, A, start, stop):
        """Batch elements ``start:stop`` of the caller's ``X`` or ``out``."""
        return A[start:stop] if self.layout == "bsf" else A[:, start:stop]

    def _chunk(self, flat, features, count):
        """The first elements of a flat buffer as a chunk of ``count`` batch elements."""
        shape = (count, features) if self.layout == "bsf" else (features, count)
        return flat[:count * features].reshape(shape)

    def _empty(self, s):
        """Copy stream ``s``'s finished result from its staging buffer into ``out``."""
        if self.pending[s] is None:
            return
        done, start, stop = self.pending[s]
        done.synchronize()
        numpy.copyto(self._part(self.out, start, stop),
                     self._chunk(self.stage_out[s], self.M, stop - start))
        self.pending[s] = None

    def _copy_in(self, s, stream, start, stop):
        """Chunk ``start:stop`` of ``X`` on its way to the device on stream ``s``; returns
        its device array."""
        device_in = self._chunk(self.device_in[s], self.N, stop - start)
        if self.direct_in:
            device_in.set(self.X[start:stop], stream=stream)
            return device_in
        if self.copied_in[s] is not None:
            self.copied_in[s].synchronize()          # the staging buffer's last copy left
        staged = self._chunk(self.stage_in[s], self.N, stop - start)
        numpy.copyto(staged, self._part(self.X, start, stop))
        device_in.set(staged, stream=stream)
        self.copied_in[s] = stream.record()
        return device_in

    def _copy_out(self, s, stream, Y, start, stop):
        """The chunk's result ``Y`` on its way back to ``out`` on stream ``s``."""
        Y = self.cupy.ascontiguousarray(Y)
        if self.direct_out:
            Y.get(stream=stream, out=self.out[start:stop], **self.get_async)
            return
        self._empty(s)                               # the staging buffer's last result
        Y.get(stream=stream, out=self._chunk(self.stage_out[s], self.M, stop - start),
              **self.get_async)
        self.pending[s] = (stream.record(), start, stop)

    def run(self, runs, progress):
        bar = None
        if progress:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                raise ImportError("progress=True draws a tqdm progress bar: pip install "
                                  "tqdm") from None
            bar = tqdm(total=len(runs), desc="stream_matmul")
        multiplied = None          # event: the last chunk's product is done
        try:
            for k, (start, stop) in enumerate(runs):
                s = k % len(self.streams)
                stream = self.streams[s]
                with stream:
                    device_in = self._copy_in(s, stream, start, stop)
                    # products run one after another: the first builds what the operator
                    # keeps (converted values, kernel tables) on its stream, which the
                    # others then read; the copies still overlap them
                    if multiplied is not None:
                        stream.wait_event(multiplied)
                    Y = self.op.matmul(device_in, layout=self.layout, backend=self.backend)
                    multiplied = stream.record()
                    self._copy_out(s, stream, Y, start, stop)
                    del Y
                if bar is not None:
                    bar.update(1)
        finally:
            # copies in flight read X and write out and the pinned buffers: let them land
            # before returning (or raising), and before the buffers go back to the pool
            for stream in self.streams:
                stream.synchronize()
            if bar is not None:
                bar.close()
        if not self.direct_out:
            for s in range(len(self.streams)):
                self._empty(s)


def _an_operator(op) -> bool:
    """Whether ``op`` has what :func:`stream_matmul` reads of a kscupy operator: its
    ``matmul``, its values' array module ``xp``, ``shape`` and ``dtype``. (Known by these,
    not by its class: this module sits below the operators, beside :mod:`kscupy.dask`,
    which hands it a worker's NumPy chunks.)"""
    return all(hasattr(op, name) for name in ("matmul", "xp", "shape", "dtype"))


def _pinned_array(size, dtype):
    """A flat NumPy array of ``size`` elements in page-locked memory."""
    import cupyx
    return cupyx.empty_pinned((size,), dtype=dtype)


def _pinned(cupy, A) -> bool:
    """Whether the NumPy array ``A``'s memory is page-locked (registered with CUDA)."""
    if A.size == 0:
        return False
    try:
        attributes = cupy.cuda.runtime.pointerGetAttributes(A.ctypes.data)
    except Exception:           # pageable memory on some drivers raises
        return False
    return getattr(attributes, "type", 0) == getattr(cupy.cuda.runtime, "memoryTypeHost", 1)
