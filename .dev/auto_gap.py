"""Dev probe: why `auto` on CuPy arrays reads 6-12% slower than the same run on PyTorch tensors
(auto_torch) and than `bmm`/`dense` named explicitly, in the interop and portability suites'
16-bit bsf rows (interop.json 4b09859: (1,1024,1024,1) auto 84.2 (choice bmm) vs bmm 75.3 vs
auto_torch 76.7; (1,512,512,2) auto 81.1 vs auto_torch 72.5 vs base_dense 74.4). Uses the
suite's own operands (several input copies) and timer; then one input; then auto after its
close call has settled (a second K)."""
import sys, numpy, torch
from kscupy.bench import engine
from kscupy.engine import runs as runs_module
from kscupy.kernels import nvrtc

# count re-preparations during timing: a stamp that changes mid-timing (a background compile
# finishing, a close call settling) re-prepares auto's run, re-timing its rivals
kept = {"n": 0}
_keep = runs_module.PreparedRuns.keep
def counting_keep(self, *a, **k):
    kept["n"] += 1
    return _keep(self, *a, **k)
runs_module.PreparedRuns.keep = counting_keep
from kscupy.bench.timing import interleaved_seconds
from kscupy.core import arrays
from kscupy.engine import decide
from kscupy.core.problem import problem_of
for spec in sys.argv[1:] or ["1,512,512,2:bfloat16", "1,1024,1024,1:bfloat16", "1,256,1024,3:float16"]:
    p, dname = spec.split(":")
    pattern = tuple(int(v) for v in p.split(","))
    dtype = arrays.BFLOAT16 if dname == "bfloat16" else numpy.dtype(dname)
    K, inputs = engine.operands(pattern, "bsf", dtype, 25088)
    K.matmul(inputs[0], layout="bsf")
    choice = decide.choose(problem_of(K.factor, inputs[0], "bsf")).backend
    tensors = {id(x): torch.from_dlpack(x) for x in inputs}
    D = K.todense()
    m = {"auto": lambda x: K.matmul(x, layout="bsf"),
         "auto_torch": lambda x: K.matmul(tensors[id(x)], layout="bsf"),
         "named " + choice: lambda x: K.matmul(x, layout="bsf", backend=choice),
         "base_dense": lambda x: x @ D.T}
    for f in m.values():
        f(inputs[0])
    print(pattern, dname, "choice", choice, "copies", len(inputs), flush=True)
    kept["n"] = 0; c0 = nvrtc.compiles_finished; e0 = decide.epoch
    print("  suite inputs:", {k: round(v * 1e6, 1) for k, v in interleaved_seconds(m, inputs, rounds=7).items()},
          "re-prepared", kept["n"], "compiles finished", nvrtc.compiles_finished - c0, "epoch moved", decide.epoch - e0, flush=True)
    print("  one input:   ", {k: round(v * 1e6, 1) for k, v in interleaved_seconds(m, inputs[:1], rounds=7).items()}, flush=True)
    r = engine.EVENTS_AND_CALLS.together(m, inputs)
    print("  suite timer: ", {k: round(v * 1e6, 1) for k, v in r["seconds"].items()}, flush=True)
