"""Dev probe (next session): per-call host time of the first 600 repeated products under
KSCUPY_EMULATE_ARCH (f32 (1,1024,1024,1) B=64 bsl took 130 us a call over its first 300
calls emulated, 23 native), with a cProfile of the slowest stretch."""
import cProfile, pstats, sys, time
import cupy, numpy
import kscupy as ks
K = ks.KSMatrix.random((1, 1024, 1024, 1), dtype=numpy.float32, xp=cupy, seed=0)
X = cupy.random.default_rng(0).standard_normal((1024, 64), dtype=numpy.float32)
times = []
for i in range(600):
    t = time.perf_counter(); K @ X; times.append(time.perf_counter() - t)
cupy.cuda.Device().synchronize()
t = numpy.array(times) * 1e6
print("host us, per 50 calls:", [round(float(numpy.median(t[i:i + 50])), 1) for i in range(0, 600, 50)])
pr = cProfile.Profile(); pr.enable()
for _ in range(300): K @ X
pr.disable()
pstats.Stats(pr).strip_dirs().sort_stats("cumulative").print_stats(25)
