"""The gradients suite (kscupy.bench.gradients): its summary on the CPU, one row on a GPU."""
import pytest

from conftest import GPU_REASON, gpu_available
from kscupy.bench import cli, gradients


def _row(dtype, layout, ours, best, err=1.0):
    return {"suite": "values_grad", "dtype": dtype, "layout": layout,
            "seconds": {"values_grad": ours, "base_cupy_bmm": best, "base_dense": 9.0},
            "relerr": {"values_grad": err * 1e-7, "base_dense": 1e-7}}


def test_summary_per_dtype_and_layout():
    rows = [_row("float32", "bsl", 1.0, 2.0), _row("float32", "bsl", 1.0, 0.5, err=3.0),
            _row("float16", "bsf", 1.0, 1.5), {"suite": "fit", "planted": True}]
    summary = gradients.summarize(rows)
    assert set(summary) == {"float32|bsl", "float16|bsf"}
    entry = summary["float32|bsl"]
    assert entry["values_grad_median"] == pytest.approx(1.25) and entry["below_0.95"] == 1
    assert entry["err_over_dense_max"] == pytest.approx(3.0)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_one_row_against_the_definition(layout):
    if not gpu_available():
        pytest.skip(GPU_REASON)
    args = cli.parser().parse_args(["--suite", "gradients"])
    ceilings = {"bandwidth": 3e12, "sgemm": 5e13, "hgemm": 5e14, "dgemm": 5e13}
    row = gradients.gradient_row((2, 48, 96, 4), layout, "float32", 1000, args, ceilings)
    assert set(row["seconds"]) >= {"values_grad", "base_cupy_bmm", "base_dense"}
    assert all(err < 1e-5 for err in row["relerr"].values()), row["relerr"]


@pytest.mark.gpu
def test_fit_rows_on_few_steps():
    if not gpu_available():
        pytest.skip(GPU_REASON)
    rows = list(gradients.fit_rows(steps=3))
    assert [r["planted"] for r in rows] == [True] * 4 + [False]
    assert rows[0]["heldout_relerr"] < 1e-10          # from factorize of T @ I: exact
    assert rows[-1]["frobenius_relerr"] <= rows[-1]["factorize_relerr"]
