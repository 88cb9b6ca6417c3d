"""Dev probe: host time of a repeated product, and its cProfile (tottime), CuPy operands."""
import cProfile, pstats, sys, time
import cupy, numpy
import kscupy as ks
from kscupy.core import arrays
from kscupy.bench.timing import throughput_seconds

def case(pattern, dtype, B, layout):
    dt = arrays.BFLOAT16 if dtype == "bfloat16" else numpy.dtype(dtype)
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    K = ks.KSMatrix(K.values.astype(dt))
    M, N = K.shape
    shape = (N, B) if layout == "bsl" else (B, N)
    X = cupy.random.default_rng(0).standard_normal(shape, dtype=numpy.float32).astype(dt)
    f = lambda: K.matmul(X, layout=layout)
    for _ in range(20): f()
    cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(300): f()
    host = (time.perf_counter() - t) / 300 * 1e6
    cupy.cuda.Device().synchronize()
    ev = throughput_seconds(lambda _: f(), [None]) * 1e6
    D = K.todense()
    g = (lambda: D @ X) if layout == "bsl" else (lambda: X @ D.T)
    for _ in range(20): g()
    cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(300): g()
    dhost = (time.perf_counter() - t) / 300 * 1e6
    cupy.cuda.Device().synchronize()
    dev = throughput_seconds(lambda _: g(), [None]) * 1e6
    print(f"== {pattern} {dtype} B={B} {layout}: host {host:.2f} us, events {ev:.2f} us; cupy dense host {dhost:.2f}, events {dev:.2f}", flush=True)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000): f()
    pr.disable(); cupy.cuda.Device().synchronize()
    pstats.Stats(pr).strip_dirs().sort_stats("tottime").print_stats(22)

for spec in sys.argv[1:]:
    p, dt, B, lay = spec.split(":")
    case(tuple(int(v) for v in p.split(",")), dt, int(B), lay)
