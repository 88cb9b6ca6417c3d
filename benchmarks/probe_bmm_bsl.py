"""Probe: ``bmm`` (cuBLAS's batched GEMM, no permutation) beside the tensor-core ``kernel``
on batch-size-last products with d = 1, where each group is one ``b x c`` by ``c x B`` GEMM.
The model (``costs.bmm_seconds``) prices that GEMM with the small-block penalty fitted to
bmm's permuted cases, about 2.5x too high here, so ``auto`` never picks it (issue 9). The
rows are the data for a refit; see docs/performance.md.

    PYTHONPATH=$PWD python3 benchmarks/probe_bmm_bsl.py benchmarks/results/bmm_bsl_d1_h200.json
"""
import json
import pathlib
import sys

import cupy
import numpy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import kscupy as ks  # noqa: E402
from kscupy import dispatch  # noqa: E402
from kscupy.kernels import nvrtc  # noqa: E402
from timing import run_metadata, time_fn  # noqa: E402

PATTERNS = ((64, 16, 16), (32, 32, 32), (128, 32, 32), (16, 64, 64), (64, 64, 64),
            (8, 128, 128), (128, 128, 128), (16, 256, 256), (6, 64, 256), (2, 48, 192),
            (2, 192, 48), (64, 64, 256))
CASES = ((numpy.float32, 25088), (numpy.float64, 8192), (numpy.complex64, 8192),
         (numpy.float16, 25088))


def main(out):
    nvrtc.BACKGROUND = False
    rows = []
    for dtype, batch in CASES:
        for a, b, c in PATTERNS:
            K = ks.KSMatrix.random((a, b, c, 1), dtype=dtype, xp=cupy)
            X = cupy.asarray(numpy.random.default_rng(0).standard_normal((a * c, batch))
                             .astype(dtype))
            seconds = {name: time_fn(dispatch.prepare(K.factor, X, "bsl", name), [X],
                                     max_repeat=20) for name in ("bmm", "kernel")}
            rows.append(dict(pattern=[a, b, c, 1], dtype=numpy.dtype(dtype).name, layout="bsl",
                             batch=batch, seconds=seconds))
            print(rows[-1], flush=True)
    result = dict(run_metadata(), rows=rows)
    pathlib.Path(out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
