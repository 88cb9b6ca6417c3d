"""The ``block_dense`` backend (cuBLAS's GEMMs on the dense matrix's diagonal blocks, ``d``
times bmm's arithmetic) against ``auto``, ``bmm`` and the tensor-core ``kernel``, float16
at B = 25088 in both layouts, on patterns with d = 2, 4 and 16 where float16 bsf ran
between 0.3 and 0.4 of the floor. The methods of a pattern are timed together
(:func:`kscupy.bench.timing.interleaved_seconds`), each result checked against float64.

    PYTHONPATH=$PWD python3 benchmarks/probe_block_dense.py --out probe_block_dense.json
"""
import argparse
import json

from kscupy.bench import engine
from kscupy.bench.timing import interleaved_seconds, run_metadata
from kscupy.core.problem import problem_of
from kscupy.engine import decide

PATTERNS = [(4, 192, 192, 4), (6, 384, 96, 4), (24, 128, 128, 4), (16, 96, 96, 4),
            (4, 256, 256, 4), (3, 768, 192, 4), (12, 96, 96, 16), (4, 256, 256, 16),
            (48, 128, 128, 4), (2, 192, 768, 4), (8, 64, 64, 16), (4, 128, 128, 2)]
METHODS = ("auto", "block_dense", "bmm", "kernel")
B = 25088


def row_of(pattern, layout, dtype):
    K, inputs = engine.operands(pattern, layout, dtype, B)
    ref = engine.oracle(K, inputs[0], layout)
    methods = {name: (lambda name: lambda x: K.matmul(x, layout=layout, backend=name))(name)
               for name in METHODS}
    relerr = {name: engine.relative_error(fn(inputs[0]), ref, layout)
              for name, fn in methods.items()}
    row = {"pattern": list(pattern), "layout": layout, "dtype": dtype, "batch": B,
           "seconds": interleaved_seconds(methods, inputs, budget_s=0.05), "relerr": relerr,
           "auto_choice": decide.choose(problem_of(K.factor, inputs[0], layout)).backend}
    del inputs, ref
    engine.release(K, engine.NONE)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--out", default="probe_block_dense.json")
    args = parser.parse_args()
    meta = run_metadata()
    result = {"device": meta["gpu"], "commit": meta["commit"], "command": meta["command"],
              "timing": "events, interleaved", "rows": []}
    for layout in ("bsf", "bsl"):
        for pattern in PATTERNS:
            row = row_of(pattern, layout, args.dtype)
            print(row["layout"], row["pattern"], row["auto_choice"],
                  {k: round(v * 1e6, 1) for k, v in row["seconds"].items()}, flush=True)
            result["rows"].append(row)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
