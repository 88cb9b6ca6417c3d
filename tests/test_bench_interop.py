"""The interop suite (kscupy.bench.interop): its summary on the CPU, graph rows on a GPU."""
import pytest

from conftest import GPU_REASON, gpu_available
from kscupy.bench import cli, interop


def _row(B, layout, auto, dense, eager):
    return {"suite": "graph", "batch": B, "layout": layout,
            "seconds": {"auto": auto, "base_dense_graph": dense},
            "eager_seconds": {"auto": eager}}


def test_summary_per_batch_and_layout():
    rows = [_row(1, "bsl", 1.0, 3.0, 8.0), _row(1, "bsl", 1.0, 1.0, 2.0),
            _row(64, "bsf", 2.0, 3.0, 4.0)]
    failed = {"suite": "graph", "batch": 1, "layout": "bsl", "seconds": {"base_dense_graph": 1.0},
              "eager_seconds": {}, "errors": {"auto": "RuntimeError: ..."}}
    summary = interop.summarize(rows + [failed])
    assert set(summary) == {"B=1|bsl", "B=64|bsf"}
    assert summary["B=1|bsl"]["not_captured"] == 1 and summary["B=1|bsl"]["patterns"] == 2
    assert summary["B=1|bsl"]["auto_over_dense_graph_median"] == pytest.approx(2.0)
    assert summary["B=1|bsl"]["auto_over_dense_graph_min"] == pytest.approx(1.0)
    assert summary["B=1|bsl"]["replay_over_eager_median"] == pytest.approx(5.0)


def test_the_suite_is_offered():
    assert cli.parser().parse_args(["--suite", "interop"]).suite == "interop"


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("B", [1, 64])
def test_replayed_rows_match_the_dense_product(layout, B):
    if not gpu_available():
        pytest.skip(GPU_REASON)
    row = interop.graph_row((2, 48, 96, 4), layout, B)
    assert set(row["seconds"]) == {"auto", "base_dense_gemm", "base_dense_graph"}
    assert set(row["relerr"]) == {"auto", "base_dense_gemm"}
    assert all(err < 1e-5 for err in row["relerr"].values()), row["relerr"]
    assert all(s > 0 for s in row["seconds"].values())
