"""Dev: one interop.json from a bf16-only and a graph-only run at the same commit on the same
device: merge_two.py BF16_JSON GRAPH_JSON (writes benchmarks/results/interop.json)."""
import json, sys
bf16, graph = (json.load(open(p)) for p in sys.argv[1:3])
assert bf16["commit"] == graph["commit"] and bf16["device"] == graph["device"], \
    (bf16["commit"], graph["commit"], bf16["device"], graph["device"])
out = {k: v for k, v in bf16.items() if k not in ("graph", "graph_rows_run")}
out["command"] = graph["command"] + " && " + bf16["command"]
out["rows"] = [r for r in graph["rows"] if r.get("suite") == "graph"] + \
              [r for r in bf16["rows"] if r.get("suite") == "bf16"]
out["summary"] = dict(graph["summary"], **bf16["summary"])
out["seconds"] = graph.get("seconds", 0) + bf16.get("seconds", 0)
json.dump(out, open("benchmarks/results/interop.json", "w"), indent=1)
for k, v in out["summary"].items():
    print(k, {m: round(x, 3) if isinstance(x, float) else x for m, x in v.items()})
