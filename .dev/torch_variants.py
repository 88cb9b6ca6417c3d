"""Dev probe: where the torch path's extra host time goes (variants of K @ tensor)."""
import sys, time, gc
import cupy, numpy, torch
import kscupy as ks
from kscupy.core import arrays, foreign
from kscupy.bench.timing import throughput_seconds

def host_us(fn, calls=400):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls): fn()
    s = time.perf_counter() - t
    torch.cuda.synchronize()
    return s / calls * 1e6

def main(pattern, layout, B=25088, dtype="bfloat16"):
    dt = arrays.BFLOAT16 if dtype == "bfloat16" else numpy.dtype(dtype)
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=0)
    K = ks.KSMatrix(K.values.astype(dt))
    M, N = K.shape
    shape = (N, B) if layout == "bsl" else (B, N)
    X = cupy.random.default_rng(0).standard_normal(shape, dtype=numpy.float32).astype(dt)
    T = torch.from_dlpack(X)
    kept = []
    def v_full(): return K.matmul(T, layout=layout)
    def v_manual():
        t = foreign.take(T)
        with t.stream:
            return t.back(K.matmul(t.native, layout=layout))
    def v_noback():
        t = foreign.take(T)
        with t.stream:
            return K.matmul(t.native, layout=layout)
    def v_nostream():
        t = foreign.take(T)
        return t.back(K.matmul(t.native, layout=layout))
    def v_keep():
        t = foreign.take(T)
        with t.stream:
            r = t.back(K.matmul(t.native, layout=layout))
        kept.append(r)
        if len(kept) > 64: kept.clear()
        return r
    def v_capsule():
        v = cupy.from_dlpack(torch.utils.dlpack.to_dlpack(T))
        return torch.utils.dlpack.from_dlpack(K.matmul(v, layout=layout).__dlpack__(stream=-1))
    def v_cupy(): return K.matmul(X, layout=layout)
    def v_cupy_back(): return torch.utils.dlpack.from_dlpack(K.matmul(X, layout=layout).__dlpack__(stream=-1))
    def v_take_only(): return foreign.take(T)
    variants = dict(full=v_full, manual=v_manual, noback=v_noback, nostream=v_nostream, keep=v_keep,
                    capsule=v_capsule, cupy=v_cupy, cupy_back=v_cupy_back, take_only=v_take_only)
    print(f"== {pattern} {layout} {dtype} B={B}")
    for name, fn in variants.items():
        ev = throughput_seconds(lambda _: fn(), [None]) * 1e6
        print(f"  {name:10s} host {host_us(fn):6.1f}  events {ev:6.1f} us", flush=True)
    gc.disable()
    print(f"  full, gc off: host {host_us(v_full):6.1f} us"); gc.enable()

for spec in sys.argv[1:]:
    p, lay = spec.split(":")
    main(tuple(int(v) for v in p.split(",")), lay)
