"""The scale suite's Dask rows: one transform of a batch persisted on one or several GPUs,
against the same chunks transformed on one GPU without Dask.

Rows ``{"suite": "dask", "gpus": N, "operator": ..., "dtype": ..., "rows": ..., "chunk":
..., "seconds": ..., "speedup": ..., "bandwidth_fraction": ..., "relerr": ...}``: the
batch (``rows`` x 1024, batch-size-first, in chunks of ``chunk`` rows) is drawn on the
workers and persisted there (each GPU holds its share and its result); ``seconds`` is the
median over :data:`REPEAT` runs of ``(X @ op.T).persist()`` and ``wait`` after one warm-up
run (which ships the operator and compiles); ``speedup`` is the one-GPU row's seconds over
this row's; ``bandwidth_fraction`` the seconds of the same chunks transformed one after
another on one GPU without Dask (``no_dask_seconds``, in the row) over this row's, times
``gpus`` (so 1.0 is every GPU at one Dask-less GPU's rate). ``relerr``: the result's first
:data:`CHECKED_ROWS` rows (of its first chunk) against the operator applied to them without Dask.

Workers come from :func:`kscupy.dask.gpu_cluster` (one process per GPU). Needs
``dask.distributed`` (carried to a machine without it as wheels).
"""
from __future__ import annotations

import importlib
import time

import numpy

#: Timed runs per row, after one warm-up.
REPEAT = 3
#: Rows of the result checked against a product without Dask.
CHECKED_ROWS = 1024


def random_chunk(module: str, n: int, dtype, block_id=None, block_info=None):
    """Chunk ``block_id`` of a batch of ``n`` features, drawn where it lives (in ``module``,
    ``"numpy"`` or ``"cupy"``) from a seed of its own: the same chunk wherever drawn."""
    xp = importlib.import_module(module)
    rows = block_info[None]["chunk-shape"][0]
    rng = xp.random.default_rng(1000 + block_id[0])
    dtype = numpy.dtype(dtype)
    X = rng.standard_normal((rows, n), dtype=numpy.float32)
    if dtype.kind == "c":
        X = X + 1j * rng.standard_normal((rows, n), dtype=numpy.float32)
    return X.astype(dtype, copy=False)


def _batch(op, dtype, rows, chunk):
    """The lazy batch: ``rows`` x ``op.shape[1]`` in chunks of ``chunk`` rows, drawn in the
    operator's array module."""
    import dask.array as da
    n = op.shape[1]
    sizes = (chunk,) * (rows // chunk) + ((rows % chunk,) if rows % chunk else ())
    return da.map_blocks(random_chunk, op.xp.__name__, n, numpy.dtype(dtype).str,
                         chunks=(sizes, (n,)), dtype=dtype,
                         meta=op.xp.empty((0, 0), dtype=dtype))


def _chunk(op, dtype, rows, chunk, index):
    """Chunk ``index`` of :func:`_batch`, drawn here."""
    size = min(chunk, rows - index * chunk)
    return random_chunk(op.xp.__name__, op.shape[1], numpy.dtype(dtype).str,
                        block_id=(index, 0), block_info={None: {"chunk-shape": (size,)}})


def _synchronize(xp):
    if xp.__name__ == "cupy":
        xp.cuda.get_current_stream().synchronize()


def no_dask_seconds(op, dtype, rows, chunk) -> float:
    """Seconds to transform the batch's chunks (held in this process's memory, drawn
    beforehand) one after another, ``X_i @ op.T`` each into a new array, after one warm-up
    of the first: what one GPU reaches without Dask. The chunks and results are freed."""
    xp = op.xp
    chunks = [_chunk(op, dtype, rows, chunk, i) for i in range(-(-rows // chunk))]
    chunks[0] @ op.T
    results = []
    _synchronize(xp)
    t0 = time.perf_counter()
    for X in chunks:
        results.append(X @ op.T)
    _synchronize(xp)
    seconds = time.perf_counter() - t0
    del chunks, results
    if xp.__name__ == "cupy":
        xp.get_default_memory_pool().free_all_blocks()
    return seconds


def dask_row(op, name, dtype, rows, chunk, client, gpus, no_dask, one_gpu=None) -> dict:
    """One row on the cluster of ``client`` (``gpus`` workers); ``no_dask`` the seconds of
    :func:`no_dask_seconds`, ``one_gpu`` the one-GPU row's seconds (None: this is it)."""
    from distributed import wait
    X = _batch(op, dtype, rows, chunk).persist()
    wait(X)
    seconds, checked = [], min(CHECKED_ROWS, chunk, rows)
    for run in range(REPEAT + 1):                  # the first ships op and compiles
        t0 = time.perf_counter()
        Y = (X @ op.T).persist()
        wait(Y)
        if run:
            seconds.append(time.perf_counter() - t0)
        if run == REPEAT:              # the first rows of the first chunk, to the client
            got = numpy.asarray(_to_host(Y[:checked].compute()), dtype=numpy.complex128)
        _release(client, Y)
    X0 = _chunk(op, dtype, rows, chunk, 0)[:checked]
    ref = numpy.asarray(_to_host(X0 @ op.T), dtype=numpy.complex128)
    del X
    median = float(numpy.median(seconds))
    return {"suite": "dask", "gpus": gpus, "operator": name,
            "dtype": numpy.dtype(dtype).name, "rows": rows, "chunk": chunk,
            "seconds": median, "all_seconds": seconds, "no_dask_seconds": no_dask,
            "speedup": (one_gpu if one_gpu is not None else median) / median,
            "bandwidth_fraction": no_dask / (median * gpus),
            "relerr": float(numpy.linalg.norm(got - ref) / numpy.linalg.norm(ref))}


def _release(client, Y, timeout=60.0):
    """Drop the persisted ``Y`` and wait until no worker holds its chunks: the next run's
    result must not meet this one's in a GPU's memory (4M complex64 rows take 32 GiB)."""
    held = set(client.who_has(Y))
    client.cancel(Y)
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline and \
            held & {key for key, workers in client.who_has().items() if workers}:
        time.sleep(0.01)


def _to_host(A):
    return A.get() if hasattr(A, "get") else A


def gpu_counts(visible: int) -> list:
    """The cluster sizes timed: 1, 2 and 4 GPUs where there are as many, and all of them."""
    return sorted({n for n in (1, 2, 4) if n <= visible} | {visible})


def dask_rows(operators: dict, rows: int, chunk: int, counts=None):
    """The rows for ``operators`` (``{name: (make(dtype), dtype)}``), one per cluster size
    of ``counts`` (default :func:`gpu_counts` of the visible GPUs), yielded as each is
    measured: the Dask-less baseline first in this process, then a cluster per size."""
    import cupy
    from distributed import Client
    from ..dask import gpu_cluster
    counts = counts or gpu_counts(cupy.cuda.runtime.getDeviceCount())
    for name, (make, dtype) in operators.items():
        op = make(dtype)
        no_dask = no_dask_seconds(op, dtype, rows, chunk)
        one_gpu = None
        for gpus in counts:
            with gpu_cluster(gpus) as cluster, Client(cluster) as client:
                row = dask_row(op, name, dtype, rows, chunk, client, gpus, no_dask, one_gpu)
            if gpus == 1:
                one_gpu = row["seconds"]
            yield row
