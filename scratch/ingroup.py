"""Times of the tensor-core kernel in the in-group order (bsf, d = 1) beside bmm and
kernel_bsl, as engine-like rows for fit_costs.py."""
import dataclasses, json, sys, numpy, cupy
sys.path.insert(0, "benchmarks")
import kscupy as ks
from kscupy import costs
from timing import time_fn
rng = numpy.random.default_rng(11)
sides = [48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
pats = set()
while len(pats) < 16:
    b, c = rng.choice(sides, 2)
    a = int(rng.choice([1, 2, 4, 6, 16, 64]))
    if a * max(b, c) <= 16384:
        pats.add((a, int(b), int(c), 1))
pats = sorted(pats)
rows = []
for dtype, B in (("float32", 25088), ("float64", 8192), ("float16", 25088), ("complex64", 8192)):
    for pat in pats:
        K = ks.KSMatrix.random(pat, dtype=dtype, xp=cupy, seed=1)
        M, N = K.shape
        X = cupy.random.default_rng(0).standard_normal((B, N)).astype(dtype)
        s = {}
        for name in ("kernel", "kernel_bsl", "bmm"):
            s[name] = time_fn(lambda x: K.matmul(x, layout="bsf", backend=name), [X])
        s["base_cupy_bmm"] = s["bmm"]
        rows.append(dict(pattern=list(pat), layout="bsf", dtype=dtype, precision="default",
                         batch=B, seconds=s))
        print(dtype, pat, {k: round(v * 1e3, 3) for k, v in s.items()}, flush=True)
json.dump(dict(rates=dataclasses.asdict(costs.device_rates()), rows=rows),
          open(sys.argv[1], "w"), indent=1)
