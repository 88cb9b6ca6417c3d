"""Plot benchmarks/results/fft_*.json (bench_fft.py) into docs/img/fft_chains.png.

    python3 benchmarks/plot_fft.py benchmarks/results/fft_h200.json docs/img/fft_chains.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy  # noqa: E402

METHODS = [("fused", "kscupy chain (planned, fused)"), ("cufft", "cupy.fft (cuFFT)"),
           ("per_factor_kernel", "per factor, single-factor kernel"),
           ("per_factor_bmm", "per factor, CuPy BMM"), ("dense_gemm", "dense DFT GEMM")]


def main(src, dst):
    result = json.loads(open(src).read())
    rows = result["dft"]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    x = numpy.arange(len(rows))
    width = 0.16
    for k, (key, label) in enumerate(METHODS):
        times = [r.get(f"{key}_s", numpy.nan) * 1e3 for r in rows]
        ax.bar(x + (k - 2) * width, times, width, label=label)
    ax.plot(x, [r["floor_s"] * 1e3 for r in rows], "k_", markersize=40, mew=2,
            label="bandwidth floor")
    ax.set_yscale("log")
    ax.set_xticks(x, [f"n={r['n']}\nB={r['B']}" for r in rows])
    ax.set_ylabel("ms (log scale)")
    ax.set_title(f"Batched complex64 DFT, 2^26 elements, rows (BSF) - {result['gpu']}")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
