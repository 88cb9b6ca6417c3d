"""Probe: GPU time of the values' gradient kernel for the 16-bit dtypes under several tile
shapes (``ks_values_grad.config`` swapped for each), for the patterns whose kernel lags
cuBLAS in ``gradients.json`` (B = 25088, CUDA events over back-to-back calls)::

    PYTHONPATH=$PWD python3 benchmarks/probe_values_grad_tiles.py [dtype]
"""
import sys

import cupy
import numpy

from kscupy.bench.timing import throughput_seconds
from kscupy.kernels import ks_values_grad
from kscupy.kernels.ks_mma import MmaConfig

PATTERNS = [(1, 1024, 1024, 1), (1, 512, 512, 2), (2, 128, 128, 4), (1, 96, 384, 4),
            (1, 64, 64, 24), (6, 384, 384, 4), (32, 192, 192, 4), (1, 256, 64, 12)]
BATCH = 25088
#: (bm, bn, wm, wn, stages)
TILES = [(128, 128, 2, 4, 3), (128, 128, 2, 4, 4), (64, 64, 2, 2, 3), (64, 64, 2, 2, 4),
         (128, 64, 2, 2, 3), (64, 128, 2, 2, 3)]


def main(dtype="float16"):
    original = ks_values_grad.config
    rng = cupy.random.default_rng(0)
    for pattern in PATTERNS:
        a, b, c, d = pattern
        for layout in ("bsl", "bsf") if d == 1 else ("bsl",):
            shape_x, shape_g = ((a * c * d, BATCH), (a * b * d, BATCH)) if layout == "bsl" \
                else ((BATCH, a * c * d), (BATCH, a * b * d))
            X = rng.standard_normal(shape_x, dtype=numpy.float32).astype(dtype)
            G = rng.standard_normal(shape_g, dtype=numpy.float32).astype(dtype)
            line = []
            for bm, bn, wm, wn, stages in TILES:
                order = original(dtype, layout).order
                cfg = MmaConfig(slots=1, bm=bm, bn=bn, bk=64, wm=wm, wn=wn, stages=stages,
                                order=order)
                ks_values_grad.config = lambda dt, lay, tile="small", cfg=cfg: cfg
                ks_values_grad._plan.cache_clear()
                try:
                    t = throughput_seconds(lambda pair: ks_values_grad.values_gradient(
                        pair[1], pair[0], pattern, layout), [(X, G)])
                    line.append(f"{bm}x{bn}/{wm}x{wn}/s{stages}: {t * 1e6:.0f}")
                except Exception as exc:        # a tile the kernel refuses: say which
                    line.append(f"{bm}x{bn}/{wm}x{wn}/s{stages}: {type(exc).__name__}")
            ks_values_grad.config = original
            ks_values_grad._plan.cache_clear()
            print(pattern, layout, "; ".join(line), flush=True)
            del X, G
            cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main(*sys.argv[1:])
