"""Plots and summary tables for docs/performance.md from bench_patterns.py's JSON (no GPU needed).

    python3 benchmarks/plot_patterns.py benchmarks/results/patterns_grid_h200.json \
        benchmarks/results/patterns_grid_heldout_h200.json \
        --sweep benchmarks/results/patterns_batch_sweep_h200.json --out docs/img
"""
import argparse
import json
import pathlib

import matplotlib
import numpy

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LAYOUT_NAMES = {"bsl": "batch-size-last", "bsf": "batch-size-first"}


def load_rows(paths):
    rows, meta = [], None
    for path in paths:
        result = json.loads(pathlib.Path(path).read_text())
        meta = meta or result
        rows += result["rows"]
    return rows, meta


def speedup_vs_h(rows, out):
    """The paper's Figure 6a: speedup over the best baseline, grouped by h(b, c)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, layout in zip(axes, ("bsl", "bsf")):
        rs = [r for r in rows if r["layout"] == layout]
        hs = sorted({round(r["h"], 4) for r in rs})
        for key, color, shift in (("kernel_speedup", "tab:blue", -0.2), ("auto_speedup", "tab:orange", 0.2)):
            data = [[r[key] for r in rs if round(r["h"], 4) == h] for h in hs]
            ax.boxplot(data, positions=numpy.arange(len(hs)) + shift, widths=0.35, whis=(5, 95),
                       showfliers=False, patch_artist=True,
                       boxprops=dict(facecolor=color, alpha=0.5), medianprops=dict(color="k"))
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_xticks(numpy.arange(len(hs)), [f"{h:.4f}" for h in hs], rotation=60, fontsize=7)
        ax.set_yscale("log")
        ax.set_xlabel("h(b, c) = (b + c) / (b c)")
        ax.set_title(f"{LAYOUT_NAMES[layout]} ({len(rs)} patterns)")
    axes[0].set_ylabel("min(time BMM, time dense) / time")
    axes[0].legend([plt.Rectangle((0, 0), 1, 1, fc="tab:blue", alpha=0.5),
                    plt.Rectangle((0, 0), 1, 1, fc="tab:orange", alpha=0.5)],
                   ["fused kernel", "auto"], loc="upper left")
    fig.suptitle("Speedup over the best baseline, FP32, B = 25088")
    fig.tight_layout()
    fig.savefig(out / "speedup_vs_h.png", dpi=110)
    plt.close(fig)


def roofline_fraction(rows, out):
    """Fraction of the roofline floor reached per pattern, sorted by arithmetic intensity."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, layout in zip(axes, ("bsl", "bsf")):
        rs = sorted([r for r in rows if r["layout"] == layout],
                    key=lambda r: 2 * r["B"] * r["nnz"] / (4 * (r["B"] * (r["M"] + r["N"]) + r["nnz"])))
        intensity = [2 * r["B"] * r["nnz"] / (4 * (r["B"] * (r["M"] + r["N"]) + r["nnz"])) for r in rs]
        for key, label, marker in (("kernel_s", "fused kernel", "o"), ("bmm_s", "BMM", "s"),
                                   ("auto_s", "auto", "^")):
            ax.scatter(intensity, [r["floor_s"] / r[key] for r in rs], s=14, marker=marker,
                       label=label, alpha=0.7)
        ax.set_xscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / byte)")
        ax.set_title(LAYOUT_NAMES[layout])
        ax.set_ylim(0, 1.05)
    axes[0].set_ylabel("roofline floor / time")
    axes[0].legend()
    fig.suptitle("Fraction of the roofline floor (measured copy bandwidth and SGEMM rate), FP32")
    fig.tight_layout()
    fig.savefig(out / "roofline_fraction.png", dpi=110)
    plt.close(fig)


def batch_sweep(sweep, out):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, layout in zip(axes, ("bsl", "bsf")):
        patterns = sorted({tuple(r["pattern"]) for r in sweep})
        for p in patterns:
            rs = sorted([r for r in sweep if tuple(r["pattern"]) == p and r["layout"] == layout],
                        key=lambda r: r["B"])
            ax.plot([r["B"] for r in rs], [r["auto_speedup"] for r in rs], marker="o", label=str(p))
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size B")
        ax.set_title(LAYOUT_NAMES[layout])
    axes[0].set_ylabel("auto: min(time BMM, time dense) / time")
    axes[0].legend(fontsize=7)
    fig.suptitle("auto against the best baseline across batch sizes, FP32")
    fig.tight_layout()
    fig.savefig(out / "batch_sweep.png", dpi=110)
    plt.close(fig)


def table(rows):
    lines = ["| layout | patterns | auto / best median | auto min | auto < 0.95 | kernel / best median "
             "| kernel wins | floor fraction auto | kernel | BMM |", "|---" * 10 + "|"]
    for layout in ("bsl", "bsf"):
        rs = [r for r in rows if r["layout"] == layout]
        a = numpy.array([r["auto_speedup"] for r in rs])
        k = numpy.array([r["kernel_speedup"] for r in rs])
        med = lambda key: numpy.median([r["floor_s"] / r[key] for r in rs])  # noqa: E731
        lines.append(f"| {layout} | {len(rs)} | {numpy.median(a):.2f} | {a.min():.2f} | {(a < 0.95).sum()} "
                     f"| {numpy.median(k):.2f} | {(k > 1).sum()} | {med('auto_s'):.2f} | "
                     f"{med('kernel_s'):.2f} | {med('bmm_s'):.2f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("grid", nargs="+", help="JSON files of --part grid runs")
    parser.add_argument("--sweep", help="JSON file of a --part sweep run")
    parser.add_argument("--out", default="docs/img")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in args.grid:
        rows, _ = load_rows([path])
        print(f"{path}:\n{table(rows)}\n")
    rows, meta = load_rows(args.grid)
    print(f"all grid files together:\n{table(rows)}\n")
    speedup_vs_h(rows, out)
    roofline_fraction(rows, out)
    if args.sweep:
        sweep = json.loads(pathlib.Path(args.sweep).read_text())["batch_sweep"]
        batch_sweep(sweep, out)
        for B in sorted({r["B"] for r in sweep}):
            s = numpy.array([r["auto_speedup"] for r in sweep if r["B"] == B])
            print(f"B={B}: auto/best median {numpy.median(s):.2f} min {s.min():.2f} over {len(s)} cases")


if __name__ == "__main__":
    main()
