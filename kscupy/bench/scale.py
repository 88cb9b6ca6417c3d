"""The scale suite: what a copy of an operator costs on its first product (an operator
shipped to a dask worker, unpickled, deep-copied), and a batch larger than the GPU streamed
through it (:func:`kscupy.stream_matmul`).

    python -m kscupy bench --suite scale --out bench-results

Rows ``{"suite": "fresh_copy", "operator": ..., "rows": ..., "first_s": ..., "warm_s":
...}``: ``first_s`` the median over ``COPIES`` unpickled copies of the wall time of each
copy's first product (the batch-size-first ``X @ op.T`` of ``--rows`` rows, synchronised),
after the original ran once in the process; ``warm_s`` the median of the same product
repeated on the original. Both are latencies (host time included), since a fresh copy's
cost is host time: planning, preparing launches.

Rows ``{"suite": "out_of_core", "memory": "pinned" | "pageable", "streams": ..., "bytes":
..., "seconds": ..., "bandwidth_fraction": ..., "duplex_fraction": ...}``: a float32 batch
of ``--host-gb`` GB (once per count in ``--streams``; ``--pageable-gb`` for pageable
memory, two streams) in host memory through a random butterfly(4096) with
:func:`kscupy.stream_matmul` (batch-size-first), the result as large again;
``bandwidth_fraction`` is the batch's bytes over the time, divided by the host-to-device
copy bandwidth measured in the same run (a pinned 1 GiB copy): each byte crosses twice, and
the copies in and out overlap. ``duplex_fraction`` divides by the rate of each direction
while both copy at once (``copy_bandwidths`` in the file, with the device-to-host one), the
ceiling of such a pipeline.

Rows ``{"suite": "dask", "gpus": N, ...}`` (:mod:`.multigpu`): ``--dask-rows`` rows of the
same two operators' batch persisted on clusters of 1, 2, 4 and all visible GPUs, against
the same chunks transformed on one GPU without Dask; left out (``"dask": "not run: ..."``
in the file) where ``dask.distributed`` is missing or ``--dask-rows`` is 0.

``--scale-rows`` makes some kinds of rows only (``"<kind>": "not run: ..."`` in the file
for the others).
"""
from __future__ import annotations

import json
import pathlib
import pickle
import time

import numpy

try:
    import cupy
except ImportError:
    cupy = None

from .. import butterfly, dft
from ..arguments import (choice_list, nonnegative_int, positive_float, positive_int,
                         positive_int_list)
from ..streaming import CHUNK_BYTES, stream_matmul
from . import multigpu
from .timing import run_metadata

#: The operators of the issue's target, by name: (factory, dtype).
OPERATORS = {"dft(1024)": (lambda dtype: dft(1024, dtype=dtype, xp=cupy), numpy.complex64),
             "butterfly(1024)": (lambda dtype: butterfly(1024, dtype=dtype, xp=cupy, seed=0),
                                 numpy.float32)}
#: Copies timed per operator, and warm products.
COPIES = 5
WARM = 20
#: The kinds of rows, in the order a run makes them (``--scale-rows``).
KINDS = ("fresh_copy", "out_of_core", "dask")


def add_arguments(parser):
    group = parser.add_argument_group("scale suite")
    group.add_argument("--rows", type=positive_int, default=50000,
                       help="rows of the batch-size-first operand (default 50000)")
    group.add_argument("--host-gb", type=positive_float, default=32.0,
                       help="GB of the pinned host batch streamed (default 32)")
    group.add_argument("--pageable-gb", type=positive_float, default=4.0,
                       help="GB of the pageable host batch streamed (default 4)")
    group.add_argument("--streams", type=positive_int_list, default="2,3,4",
                       help="stream counts the pinned batch is streamed with (default 2,3,4)")
    group.add_argument("--dask-rows", type=nonnegative_int, default=4 * 2**20,
                       help="rows of the batch the Dask rows persist (default 4194304; 0: "
                            "no Dask rows)")
    group.add_argument("--dask-chunk", type=positive_int, default=2**17,
                       help="rows a chunk of that batch (default 131072)")
    group.add_argument("--scale-rows", type=choice_list(KINDS), default=",".join(KINDS),
                       help=f"comma-separated kinds of rows to make, of {','.join(KINDS)} "
                            f"(default: all)")


def _dask_missing(args) -> str:
    """Why the Dask rows are left out, or ""."""
    if not args.dask_rows:
        return "--dask-rows 0"
    try:
        import distributed  # noqa: F401
    except ImportError:
        return "dask.distributed is not installed"
    return ""


def synchronised_seconds(fn):
    """Seconds of one call of ``fn()`` between two synchronisations of the current stream
    (a latency: host time included)."""
    cupy.cuda.get_current_stream().synchronize()
    t0 = time.perf_counter()
    fn()
    cupy.cuda.get_current_stream().synchronize()
    return time.perf_counter() - t0


def fresh_copy_row(name, rows):
    """One row: the first product of fresh copies of ``OPERATORS[name]`` against the warm
    product of the original."""
    make, dtype = OPERATORS[name]
    op = make(dtype)
    rng = cupy.random.default_rng(0)
    X = rng.standard_normal((rows, op.shape[1]), dtype=numpy.float32).astype(dtype)
    op.matmul(X, layout="bsf")                       # compiles, plans: the process is warm
    warm = [synchronised_seconds(lambda: op.matmul(X, layout="bsf")) for _ in range(WARM)]
    pickled = pickle.dumps(op)
    first = []
    for _ in range(COPIES):
        twin = pickle.loads(pickled)
        first.append(synchronised_seconds(lambda: twin.matmul(X, layout="bsf")))
    return {"suite": "fresh_copy", "operator": name, "dtype": numpy.dtype(dtype).name,
            "rows": rows, "first_s": float(numpy.median(first)),
            "warm_s": float(numpy.median(warm)), "first_all_s": first}


def copy_bandwidths():
    """Bytes per second of pinned 1 GiB copies (medians of five): ``"h2d"`` host to device,
    ``"d2h"`` device to host, and ``"duplex"`` each direction's rate while both run at once
    on two streams (the most a pipeline that copies its batch in and its result out can
    reach)."""
    import cupyx
    n = 2**28
    host_in, host_out = (cupyx.empty_pinned((n,), dtype=numpy.float32) for _ in range(2))
    host_in[...] = 1.0
    device_in, device_out = (cupy.ones((n,), dtype=numpy.float32) for _ in range(2))
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]

    def duplex():
        device_in.set(host_in, stream=streams[0])
        device_out.get(stream=streams[1], out=host_out, blocking=False)
        for stream in streams:
            stream.synchronize()

    def median(fn):
        return host_in.nbytes / float(numpy.median([synchronised_seconds(fn)
                                                    for _ in range(5)]))
    return {"h2d": median(lambda: device_in.set(host_in)),
            "d2h": median(lambda: device_out.get(out=host_out)),
            "duplex": median(duplex)}


def out_of_core_row(gigabytes, pinned, bandwidths, streams=2):
    """One row: a float32 host batch of ``gigabytes`` through a butterfly(4096) with
    :func:`kscupy.stream_matmul` on ``streams`` streams, timed once after a small warm-up
    call; its fraction of the host-to-device bandwidth (the issue's measure) and of the
    duplex one (:func:`copy_bandwidths`)."""
    import cupyx
    op = butterfly(4096, dtype=numpy.float32, xp=cupy, seed=0)
    rows = int(gigabytes * 1e9) // (4 * 4096)
    make = (lambda shape: cupyx.empty_pinned(shape, numpy.float32)) if pinned else \
        (lambda shape: numpy.empty(shape, numpy.float32))
    X, Y = make((rows, 4096)), make((rows, 4096))
    X[...] = 1.0                                   # touched: its pages exist before timing
    per_chunk = CHUNK_BYTES // (2 * 4 * 4096)      # stream_matmul's rows per chunk
    warm = min(rows, 2 * per_chunk + 1)            # a whole chunk's shape and a ragged one
    stream_matmul(op, X[:warm], out=Y[:warm], chunk_bytes=CHUNK_BYTES, streams=streams)
    t0 = time.perf_counter()
    stream_matmul(op, X, out=Y, chunk_bytes=CHUNK_BYTES, streams=streams)
    seconds = time.perf_counter() - t0
    rate = X.nbytes / seconds
    return {"suite": "out_of_core", "memory": "pinned" if pinned else "pageable",
            "streams": streams, "bytes": X.nbytes, "seconds": seconds,
            "h2d_bandwidth": bandwidths["h2d"], "d2h_bandwidth": bandwidths["d2h"],
            "duplex_bandwidth": bandwidths["duplex"],
            "bandwidth_fraction": rate / bandwidths["h2d"],
            "duplex_fraction": rate / bandwidths["duplex"]}


def main(args, baselines=None):
    out = pathlib.Path(args.out)
    meta = run_metadata()
    kinds = args.scale_rows
    result = {"device": meta["gpu"], "commit": meta["commit"], "date": meta["date"],
              "command": meta["command"], "cupy": meta["cupy"], "kscupy": meta["kscupy"],
              "rows": [fresh_copy_row(name, args.rows) for name in OPERATORS
                       if "fresh_copy" in kinds]}
    out.write_text(json.dumps(result, indent=1))
    if "out_of_core" in kinds:
        bandwidths = copy_bandwidths()
        result["copy_bandwidths"] = bandwidths
        cases = [(args.host_gb, True, n) for n in args.streams] + [(args.pageable_gb, False, 2)]
        for gigabytes, pinned, streams in cases:
            result["rows"].append(out_of_core_row(gigabytes, pinned, bandwidths, streams))
            out.write_text(json.dumps(result, indent=1))
    for kind in KINDS:
        if kind not in kinds:
            result[kind] = "not run: left out of --scale-rows"
    why = _dask_missing(args) if "dask" in kinds else ""
    if why:
        result["dask"] = f"not run: {why}"
    elif "dask" in kinds:
        for row in multigpu.dask_rows(OPERATORS, args.dask_rows, args.dask_chunk):
            result["rows"].append(row)
            out.write_text(json.dumps(result, indent=1))
    out.write_text(json.dumps(result, indent=1))
    print(f"\n{result['device']}")
    for r in result["rows"]:
        if r["suite"] == "fresh_copy":
            print(f"{r['operator']:16s} first product of a copy {r['first_s'] * 1e3:8.3f} ms, "
                  f"warm {r['warm_s'] * 1e3:8.3f} ms ({r['first_s'] / r['warm_s']:.2f}x)")
        elif r["suite"] == "dask":
            print(f"dask, {r['operator']:16s} {r['gpus']} GPUs {r['rows']} rows in "
                  f"{r['seconds'] * 1e3:8.2f} ms: {r['speedup']:.2f}x one GPU, "
                  f"{r['bandwidth_fraction']:.2f} of one Dask-less GPU a GPU "
                  f"(relerr {r['relerr']:.1e})")
        else:
            print(f"out of core, {r['memory']:8s} {r['streams']} streams "
                  f"{r['bytes'] / 1e9:6.1f} GB in {r['seconds']:7.2f} s: "
                  f"{r['bandwidth_fraction']:.2f} of the host-to-device bandwidth "
                  f"({r['h2d_bandwidth'] / 1e9:.1f} GB/s), {r['duplex_fraction']:.2f} of "
                  f"the duplex one ({r['duplex_bandwidth'] / 1e9:.1f} GB/s)")
