"""One fresh process's first use of kscupy: the child that bench_latency.py starts twice per
trial (empty caches, then the same caches warm) to time issue 10's first use.

    CUPY_CACHE_DIR=$D/cupy KSCUPY_CACHE_DIR=$D/kscupy CUDA_CACHE_PATH=$D/cuda \\
        PYTHONPATH=$PWD python3 benchmarks/first_use.py

The clock starts before ``import kscupy`` and stops when every result is on the host: the
imports of NumPy, CuPy and kscupy; a KS pattern with random values applied to a batch in
both layouts (the CUDA context is created here, by the first allocation); ``dft(1024)``
built and applied to a vector. Prints one JSON line: the total ``work_s``, the time of each
step, and (after the clock stopped) the backends ``auto`` picked. Imports nothing from the
benchmarks, so that nothing runs before the clock starts.
"""
import time

START = time.perf_counter()

import json  # noqa: E402

#: A pattern ``auto`` runs on the KS kernel in both layouts at this batch (on an H200, with
#: the cost model of this commit), so that the empty-cache time includes NVRTC compiles.
PATTERN = (16, 64, 64, 4)
BATCH = 64
DFT_SIZE = 1024


def main():
    steps = {}
    mark = START
    import numpy
    import cupy
    import kscupy as ks
    steps["import_s"], mark = time.perf_counter() - mark, time.perf_counter()

    K = ks.KSMatrix.random(PATTERN, dtype=numpy.float32, xp=cupy, seed=0)
    X = cupy.random.default_rng(1).standard_normal((K.shape[1], BATCH), dtype=numpy.float32)
    cupy.asnumpy(K @ X)
    steps["pattern_bsl_s"], mark = time.perf_counter() - mark, time.perf_counter()

    X_bsf = cupy.ascontiguousarray(X.T)
    cupy.asnumpy(K.matmul(X_bsf, layout="bsf"))
    steps["pattern_bsf_s"], mark = time.perf_counter() - mark, time.perf_counter()

    F = ks.dft(DFT_SIZE, dtype=numpy.complex64, xp=cupy)
    v = cupy.random.default_rng(2).standard_normal(DFT_SIZE, dtype=numpy.float32)
    cupy.asnumpy(F @ v.astype(numpy.complex64))
    steps["dft_s"] = time.perf_counter() - mark
    work_s = time.perf_counter() - START

    from kscupy.engine import decide
    from kscupy.core.problem import problem_of
    auto = {layout: decide.choose(problem_of(K.factor, operand, layout)).backend
            for layout, operand in (("bsl", X), ("bsf", X_bsf))}
    print(json.dumps({"work_s": work_s, "steps": steps, "pattern": list(PATTERN),
                      "batch": BATCH, "dft_size": DFT_SIZE, "auto_choice": auto}))


if __name__ == "__main__":
    main()
