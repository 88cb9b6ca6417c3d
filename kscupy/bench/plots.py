"""Plots of the suites' JSON files (no GPU needed; matplotlib, the ``bench`` extra).

    python -m kscupy bench --plot grid.json [grid2.json ...] --out DIR

:func:`plot_grid` (speed-up over the best baseline by h(b, c), fraction of the roofline
floor, the batch sweep), :func:`plot_chains` (the DFT rows against cuFFT, the whole-vector
chains' fractions of the bandwidth floor) and :func:`plot_engine` (the engine suite's
speed-ups, sorted).
"""
import json
import pathlib

import numpy


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt

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
    plt = _pyplot()
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
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, layout in zip(axes, ("bsl", "bsf")):
        # FLOP per byte of one float32 product: 2 B nnz over 4 (B (M + N) + nnz)
        def intensity_of(r):
            return 2 * r["B"] * r["nnz"] / (4 * (r["B"] * (r["M"] + r["N"]) + r["nnz"]))
        rs = sorted([r for r in rows if r["layout"] == layout], key=intensity_of)
        intensity = [intensity_of(r) for r in rs]
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
    plt = _pyplot()
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


def plot_grid(paths, out, sweep=None):
    """The grid suite's plots of the files ``paths`` (and of the sweep file ``sweep``) into
    the folder ``out``; prints the summary tables."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        rows, _ = load_rows([path])
        print(f"{path}:\n{table(rows)}\n")
    rows, meta = load_rows(paths)
    if rows:
        speedup_vs_h(rows, out)
        roofline_fraction(rows, out)
    if sweep:
        sweep = json.loads(pathlib.Path(sweep).read_text())["batch_sweep"]
        if sweep:
            batch_sweep(sweep, out)


# -- the chains suite ------------------------------------------------------------------------
DFT_METHODS = [("auto", "kscupy dft (planned chain)"), ("base_cufft", "cupy.fft (cuFFT)"),
               ("base_bmm_chain", "radix-2 chain, bmm (cuBLAS) per factor")]


def plot_dft(result, dst):
    """The DFT rows' times: kscupy, cuFFT and the bmm chain per n, against the floor."""
    plt = _pyplot()
    rows = [r for r in result["rows"] if r["transform"] == "dft"]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    x = numpy.arange(len(rows))
    width = 0.25
    for k, (key, label) in enumerate(DFT_METHODS):
        times = [r["seconds"].get(key, numpy.nan) * 1e3 for r in rows]
        ax.bar(x + (k - 1) * width, times, width, label=label)
    ax.plot(x, [r["floor_s"] * 1e3 for r in rows], "k_", markersize=40, mew=2,
            label="bandwidth floor")
    ax.set_yscale("log")
    ax.set_xticks(x, [f"n={r['n']}\nB={r['batch']}" for r in rows])
    ax.set_ylabel("ms (log scale)")
    ax.set_title(f"Batched complex64 DFT along rows (BSF) - {result['device']}")
    ax.legend(fontsize=8, markerscale=0.4)   # (the floor's marks are bar-wide)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    plt.close(fig)


def plot_floor_fractions(result, dst):
    """One panel per whole-vector transform (random butterflies, Hadamard) the result has:
    floor_s / auto for each n, a bar per (dtype, layout)."""
    plt = _pyplot()
    present = [t for t in ("butterfly", "hadamard")
               if any(r["transform"] == t for r in result["rows"])]
    if not present:
        return
    fig, axes = plt.subplots(1, len(present), figsize=(5.5 * len(present), 4.2), sharey=True,
                             squeeze=False)
    for ax, transform in zip(axes[0], present):
        rows = [r for r in result["rows"] if r["transform"] == transform]
        sizes = sorted({r["n"] for r in rows})
        kinds = sorted({(r["dtype"], r["layout"]) for r in rows})
        x = numpy.arange(len(sizes))
        width = 0.8 / len(kinds)
        for k, (dtype, layout) in enumerate(kinds):
            frac = {r["n"]: r["floor_s"] / r["seconds"]["auto"] for r in rows
                    if (r["dtype"], r["layout"]) == (dtype, layout)}
            ax.bar(x + (k - (len(kinds) - 1) / 2) * width,
                   [frac.get(n, numpy.nan) for n in sizes], width, label=f"{dtype} {layout}")
        ax.set_xticks(x, [f"n={n}" for n in sizes])
        ax.set_ylim(0, 1.25)   # (room for the legend above the bars)
        ax.set_title("random butterflies" if transform == "butterfly" else "Hadamard")
        ax.legend(fontsize=8, loc="upper center", ncol=3)
    axes[0][0].set_ylabel("fraction of the bandwidth floor (auto)")
    fig.suptitle(f"Whole-vector chains - {result['device']}")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    plt.close(fig)


def plot_chains(path, out):
    """The chains suite's plots of the file ``path`` into the folder ``out``."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result = json.loads(pathlib.Path(path).read_text())
    if any(r["transform"] == "dft" for r in result["rows"]):
        plot_dft(result, out / "fft_chains.png")
    plot_floor_fractions(result, out / "chains_floor.png")


# -- the engine suite ------------------------------------------------------------------------
def _engine_speedups(rows):
    """{(layout, label): sorted speed-ups of auto over the best baseline}."""
    out = {}
    for r in rows:
        best = min(v for k, v in r["seconds"].items() if k.startswith("base_") and v)
        label = f"{r['dtype']} {r.get('precision', 'default')} {r.get('sample', 'default')}"
        if r.get("emulated_arch"):
            label += f" {r['emulated_arch']} B={r['batch']}"
        lead = "auto_tf32" if r.get("precision") == "tf32" else "auto"
        out.setdefault((r["layout"], label), []).append(best / r["seconds"][lead])
    return {key: sorted(v) for key, v in out.items()}


def plot_engine(paths, dst):
    """One panel per layout; per (dtype, precision, sample) one curve of the automatic
    choice's speed-up over the best baseline of its row, patterns sorted from slowest to
    fastest, so the curve's middle is the median and its left end the worst row."""
    plt = _pyplot()
    rows, device = [], None
    for path in paths:
        result = json.loads(pathlib.Path(path).read_text())
        device = device or result["device"]
        rows += [r for r in result["rows"] if r.get("suite", "patterns") == "patterns"]
    curves = _engine_speedups(rows)
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
    fig.suptitle(f"auto against the best baseline of its row ({device})")
    fig.tight_layout()
    pathlib.Path(dst).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dst, dpi=110)
    plt.close(fig)
