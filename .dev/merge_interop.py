"""Dev: a bf16-only interop run merged with the committed file's graph rows (kept, with their run named)."""
import json, sys
new = json.load(open(sys.argv[1]))
old = json.load(open("benchmarks/results/interop.json"))
out = {k: v for k, v in new.items() if k not in ("rows", "summary", "graph")}
out["rows"] = [r for r in new["rows"] if r.get("suite") == "bf16"] + \
              [r for r in old["rows"] if r.get("suite") == "graph"]
out["graph"] = (f"rows kept from graph_rows_run ({old['graph_rows_run']['commit']}, "
                f"{old['graph_rows_run']['device']}): this run made bf16 rows only")
out["graph_rows_run"] = old["graph_rows_run"]
out["summary"] = {k: v for k, v in new["summary"].items() if k.startswith("bfloat16")}
out["summary"].update({k: v for k, v in old["summary"].items() if not k.startswith("bfloat16")})
json.dump(out, open("benchmarks/results/interop.json", "w"), indent=1)
for k, v in out["summary"].items():
    if k.startswith("bfloat16"):
        print(k, {m: round(x, 3) if isinstance(x, float) else x for m, x in v.items()})
