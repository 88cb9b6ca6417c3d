# ks_mma_group.cu's 16-bit X ring: time leads 0 (registers), 1, 2 on fp16 bsf, B = 25088,
# the heuristic's tile; bsl's auto beside it. Run with PYTHONPATH at the tree under test.
import json, sys, cupy, numpy
import kscupy as ks
from kscupy.kernels import ks_mma
from kscupy.core.problem import problem_of
from kscupy.bench.engine import oracle, relative_error
from kscupy.bench.timing import time_fn
B = 25088
PATTERNS = [(4,256,256,16), (48,128,128,4), (1,512,512,32), (96,48,48,16), (12,96,96,16),
            (24,128,128,4), (2,192,768,4), (8,64,64,16), (1,1024,256,6)]
COMPILE = sys.argv[1:2] == ["--compile"]     # prepare (compile) only: cache warm-up
LEADS = [int(v) for v in sys.argv[2].split(",")] if COMPILE else (0, 1, 2)
out = []
for pattern in PATTERNS:
    rng = cupy.random.default_rng(1)
    K = ks.KSMatrix.random(pattern, dtype=numpy.float16, xp=cupy, seed=2)
    M, N = K.shape
    X = rng.standard_normal((B, N), dtype=numpy.float32).astype(numpy.float16)
    ref = oracle(K, X, "bsf")
    cfg = ks_mma.heuristic_config(problem_of(K.factor, X, "bsf"))
    row = {"pattern": pattern, "cfg": cfg.as_tuple()}
    if COMPILE:
        for lead in LEADS:
            ks_mma.X_LEAD_HALF = lead
            ks_mma.prepare(K.factor, X, "bsf", cfg)
        continue
    for lead in LEADS:
        ks_mma.X_LEAD_HALF = lead
        run = ks_mma.prepare(K.factor, X, "bsf", cfg)
        row[f"err{lead}"] = relative_error(run(X), ref, "bsf")
        row[f"lead{lead}_us"] = time_fn(run, [X]) * 1e6
    ks_mma.X_LEAD_HALF = 1
    XT = cupy.ascontiguousarray(X.T)
    K.matmul(XT, layout="bsl")
    row["bsl_auto_us"] = time_fn(lambda x: K.matmul(x, layout="bsl"), [XT]) * 1e6
    row["floor_us"] = (N + M) * B * 2 / 3.0e12 * 1e6
    out.append(row)
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
