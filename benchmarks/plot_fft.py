"""Plot a bench_fft.py result (issue #11's chains.json): the DFT rows' times against cuFFT and
the bmm chain, and, given a second output, the butterfly and Hadamard rows' fractions of
the bandwidth floor against the issue's targets.

    python3 benchmarks/plot_fft.py benchmarks/results/chains.json docs/img/fft_chains.png \
        docs/img/chains_floor.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy  # noqa: E402

METHODS = [("auto", "kscupy dft (planned chain)"), ("base_cufft", "cupy.fft (cuFFT)"),
           ("base_bmm_chain", "radix-2 chain, bmm (cuBLAS) per factor")]


def plot_dft(result, dst):
    """The DFT rows' times: kscupy, cuFFT and the bmm chain per n, against the floor."""
    rows = [r for r in result["rows"] if r["transform"] == "dft"]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    x = numpy.arange(len(rows))
    width = 0.25
    for k, (key, label) in enumerate(METHODS):
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


#: Issue 11's targets: the least fraction of the floor for n up to the given size.
TARGETS = {"butterfly": (0.6, 4096), "hadamard": (0.7, 8192)}


def plot_floor_fractions(result, dst):
    """One panel per transform of TARGETS the result has: floor_s / auto for each n, a bar
    per (dtype, layout)."""
    present = {t: v for t, v in TARGETS.items()
               if any(r["transform"] == t for r in result["rows"])}
    fig, axes = plt.subplots(1, len(present), figsize=(5.5 * len(present), 4.2), sharey=True,
                             squeeze=False)
    for ax, (transform, (target, n_max)) in zip(axes[0], present.items()):
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
        ax.axhline(target, color="k", lw=1.5, ls="--", label=f"target (n <= {n_max})")
        ax.set_xticks(x, [f"n={n}" for n in sizes])
        ax.set_ylim(0, 1.25)   # (room for the legend above the bars)
        ax.set_title("random butterflies" if transform == "butterfly" else "Hadamard")
        ax.legend(fontsize=8, loc="upper center", ncol=3)
    axes[0][0].set_ylabel("fraction of the bandwidth floor (auto)")
    fig.suptitle(f"Whole-vector chains, B·n = 2^26 - {result['device']}")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


def main(src, dst, floor_dst=None):
    result = json.loads(open(src).read())
    plot_dft(result, dst)
    if floor_dst:
        plot_floor_fractions(result, floor_dst)


if __name__ == "__main__":
    main(*sys.argv[1:4])
