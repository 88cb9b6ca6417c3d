"""The package's benchmark suites (``python -m kscupy bench``, :mod:`kscupy.bench`) with
PyTorch's BMM and dense products added as baselines where torch imports: how the project's
published figures are measured. Same arguments as ``python -m kscupy bench``.

    PYTHONPATH=$PWD python3 benchmarks/bench_suite.py --suite engine --dtypes float32 \\
        --out bench-results
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from kscupy.bench import cli  # noqa: E402
from torch_baselines import TORCH  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:], baselines=TORCH))
