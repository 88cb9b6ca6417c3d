"""The tensor-core engine's speed-ups for docs/performance.md, from bench_patterns.py's
``--part engine`` JSON files (no GPU needed).

    python3 benchmarks/plot_engine.py benchmarks/results/engine.json \\
        benchmarks/results/engine_f16.json --out docs/img/engine_speedups.png

One panel per layout; per (dtype, precision, sample) one curve of the automatic choice's
speed-up (``auto``; ``auto_tf32`` for the TF32 rows, against the TF32 baselines) over the
best baseline of its row (``base_*`` timed in the same run), patterns sorted from slowest
to fastest, so the curve's middle is the median and its left end the worst row.
"""
import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LAYOUT_NAMES = {"bsl": "batch-size-last", "bsf": "batch-size-first"}


def speedups(rows):
    """{(layout, label): sorted speed-ups of auto over the best baseline}."""
    out = {}
    for r in rows:
        best = min(v for k, v in r["seconds"].items() if k.startswith("base_") and v)
        label = f"{r['dtype']} {r.get('precision', 'default')} {r.get('sample', 'default')}"
        lead = "auto_tf32" if r.get("precision") == "tf32" else "auto"
        out.setdefault((r["layout"], label), []).append(best / r["seconds"][lead])
    return {key: sorted(v) for key, v in out.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows, device = [], None
    for path in args.files:
        result = json.loads(pathlib.Path(path).read_text())
        device = device or result["device"]
        rows += [r for r in result["rows"] if r.get("suite", "patterns") == "patterns"]
    curves = speedups(rows)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, layout in zip(axes, ("bsl", "bsf")):
        for (lay, label), values in sorted(curves.items()):
            if lay == layout:
                ax.plot([(i + 0.5) / len(values) for i in range(len(values))], values,
                        label=label, lw=1.5)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.axhline(0.95, color="red", lw=0.6, ls=":")
        ax.set_yscale("log")
        ax.set_title(LAYOUT_NAMES[layout])
        ax.set_xlabel("fraction of patterns (sorted)")
    axes[0].set_ylabel("best baseline / auto (log)")   # auto_tf32 for the TF32 rows
    axes[1].legend(fontsize=8)
    fig.suptitle(f"auto against the best of PyTorch BMM, CuPy BMM and cuBLAS dense ({device})")
    fig.tight_layout()
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
