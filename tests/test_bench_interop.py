"""The interop suite (kscupy.bench.interop): its summary on the CPU, graph rows on a GPU."""
import pytest

from conftest import GPU_REASON, gpu_available
from kscupy.bench import cli, interop
from kscupy.bench.baselines import Baselines


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


def _bf16_row(layout, auto, best_base):
    return {"suite": "bf16", "sample": "default", "pattern": [2, 48, 96, 4], "layout": layout,
            "dtype": "bfloat16", "precision": "default", "batch": interop.BF16_BATCH,
            "floor_s": 1.0, "seconds": {"auto": auto, "base_dense": best_base,
                                        "base_cupy_bmm": 2 * best_base},
            "relerr": {"auto": 1e-3, "base_dense": 2e-3}}


def test_bfloat16_rows_are_summarized_as_the_engine_suite_does():
    rows = [_bf16_row("bsl", 1.0, 2.0), _bf16_row("bsl", 1.0, 3.0), _bf16_row("bsf", 2.0, 1.0),
            _row(1, "bsl", 1.0, 3.0, 8.0)]
    summary = interop.summarize(rows)
    key = f"bfloat16|default|bsl|B={interop.BF16_BATCH}"
    assert summary[key]["auto_median"] == pytest.approx(2.5) and summary[key]["patterns"] == 2
    assert summary[f"bfloat16|default|bsf|B={interop.BF16_BATCH}"]["below_0.95"] == 1
    assert summary["B=1|bsl"]["patterns"] == 1


def test_the_bfloat16_summary_names_auto_on_framework_arrays():
    rows = [_bf16_row("bsl", 1.0, 2.0), _bf16_row("bsl", 1.0, 3.0)]
    rows[0]["seconds"]["auto_torch"], rows[1]["seconds"]["auto_torch"] = 1.0, 4.0
    entry = interop.summarize(rows)[f"bfloat16|default|bsl|B={interop.BF16_BATCH}"]
    assert entry["auto_median"] == pytest.approx(2.5)
    assert entry["auto_torch_median"] == pytest.approx((2.0 + 0.75) / 2)
    assert entry["auto_torch_min"] == pytest.approx(0.75)
    assert entry["auto_torch_below_0.95"] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_a_bfloat16_row_matches_the_oracle(layout):
    pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")
    if not gpu_available():
        pytest.skip(GPU_REASON)
    from kscupy.bench import engine
    args = cli.parser().parse_args(["--suite", "interop"])
    ceilings = {"bandwidth": 3e12, "sgemm": 5e13, "dgemm": 5e13, "hgemm": 7e14}
    row = engine.bench_row((2, 48, 96, 4), layout, "bfloat16", "default", "default", args,
                           ceilings, batch=600, suite="bf16")
    assert row["suite"] == "bf16" and {"auto", "base_dense"} <= set(row["seconds"])
    assert "base_cupy_bmm" not in row["seconds"]       # CuPy's batched matmul lacks bfloat16


class _ArraysAsTensors(Baselines):
    """A framework whose arrays are CuPy's own: the ``auto_<name>`` column without PyTorch."""
    name = "same"

    def tensor(self, X):
        return X


@pytest.mark.gpu
def test_auto_is_timed_on_a_frameworks_arrays_where_asked():
    pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")
    if not gpu_available():
        pytest.skip(GPU_REASON)
    from kscupy.bench import engine
    args = cli.parser().parse_args(["--suite", "interop"])
    ceilings = {"bandwidth": 3e12, "sgemm": 5e13, "dgemm": 5e13, "hgemm": 7e14}
    row = engine.bench_row((2, 48, 96, 4), "bsl", "bfloat16", "default", "default", args,
                           ceilings, batch=600, suite="bf16", baselines=_ArraysAsTensors(),
                           framework_operands=True)
    assert row["relerr"]["auto_same"] < 1e-2 and row["seconds"]["auto_same"] > 0
    assert all(err < 1e-2 for err in row["relerr"].values()), row["relerr"]


def test_interop_rows_makes_the_kinds_asked_for_and_says_which_it_left_out(tmp_path,
                                                                         monkeypatch):
    """``--interop-rows bf16`` makes the bfloat16 rows only (the rows stood in for: they
    run on a GPU), and the file says the graph rows were left out."""
    import json
    from kscupy.bench import cli, engine, interop
    from kscupy.core import arrays
    made = []
    monkeypatch.setattr(interop, "run_metadata", lambda: dict.fromkeys(
        ("gpu", "commit", "date", "command", "cupy", "kscupy"), "x"))
    monkeypatch.setattr(interop, "graph_row", lambda *a, **k: made.append("graph") or {})
    monkeypatch.setattr(engine, "measure_ceilings", lambda baselines: {})
    monkeypatch.setattr(engine, "bench_row", lambda *a, **k: made.append("bf16") or {})
    monkeypatch.setattr(engine, "finish", lambda result, out, seconds, summarize:
                        out.write_text(json.dumps(result)))
    monkeypatch.setattr(arrays, "BFLOAT16", object())          # as where ml_dtypes is
    out = tmp_path / "interop.json"
    args = cli.parser().parse_args(["--suite", "interop", "--interop-rows", "bf16",
                                    "--count", "2", "--out", str(out)])
    interop.main(args)
    assert made == ["bf16"] * 4                                  # 2 patterns, 2 layouts
    result = json.loads(out.read_text())
    assert result["graph"].startswith("not run") and "bf16" not in result
