"""Plot the DFT rows of a bench_fft.py result (issue #11's chains.json) into a bar chart.

    python3 benchmarks/plot_fft.py benchmarks/results/chains.json docs/img/fft_chains.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy  # noqa: E402

METHODS = [("auto", "kscupy dft (planned chain)"), ("base_cufft", "cupy.fft (cuFFT)"),
           ("base_bmm_chain", "radix-2 chain, bmm (cuBLAS) per factor")]


def main(src, dst):
    result = json.loads(open(src).read())
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
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
