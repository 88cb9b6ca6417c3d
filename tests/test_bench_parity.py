"""The parity suite (kscupy.bench.parity): its floors, its summary (both layouts of a dtype
compared), its options, and on a GPU one row against the oracle."""
import numpy
import pytest

from conftest import GPU_REASON, gpu_available
from kscupy.bench import cli, engine, parity

CEILINGS = {"bandwidth": 3e12, "sgemm": 5e13, "tf32_gemm": 3.9e14, "hgemm": 7e14,
            "dgemm": 5.5e13}


def _row(dtype, layout, pattern, auto, base, sample="default", floor=1.0):
    return {"suite": "patterns", "sample": sample, "pattern": list(pattern), "layout": layout,
            "dtype": dtype, "precision": "default", "batch": engine.BATCH[dtype],
            "floor_s": floor, "seconds": {"auto": auto, "base_cupy_bmm": base},
            "relerr": {"auto": 1e-7, "base_cupy_bmm": 1e-7}}


def test_each_dtype_is_priced_at_its_tensor_core_rate():
    pattern, B = (2, 64, 32, 4), 8192
    nnz = 2 * 64 * 32 * 4
    M, N = 2 * 64 * 4, 2 * 32 * 4
    for dtype, rate, flops_per_mac in [("float16", 7e14, 2), ("float32", 1.3e14, 2),
                                       ("complex64", 1.3e14, 8), ("float64", 5.5e13, 2),
                                       ("complex128", 5.5e13, 8)]:
        itemsize = numpy.dtype(dtype).itemsize
        expected = max(itemsize * (B * (M + N) + nnz) / 3e12, flops_per_mac * B * nnz / rate)
        assert parity.floor_seconds(pattern, B, dtype, CEILINGS) == pytest.approx(expected), dtype
    # a compute-bound float32 row: three TF32 products per float32 one, not SGEMM's rate
    big = (1, 1024, 1024, 1)
    assert parity.floor_seconds(big, 25088, "float32", CEILINGS) == pytest.approx(
        2 * 25088 * 1024 * 1024 / 1.3e14)


def test_summary_compares_the_layouts_per_dtype_and_sample():
    p, q = (1, 8, 8, 2), (2, 4, 4, 1)
    rows = [_row("float16", "bsl", p, auto=1.0, base=3.0, floor=0.8),
            _row("float16", "bsl", q, auto=2.0, base=4.0, floor=0.5),
            _row("float16", "bsf", p, auto=2.0, base=3.0, floor=0.8),
            _row("float16", "bsf", q, auto=2.0, base=5.0, floor=0.5),
            _row("float32", "bsl", p, auto=1.0, base=1.0, sample="heldout"),
            _row("float32", "bsf", q, auto=1.0, base=1.0, sample="heldout")]
    summary = parity.summarize(rows)
    bsl, bsf = summary["float16|default|bsl"], summary["float16|default|bsf"]
    assert bsl["auto_median"] == pytest.approx(2.5)                  # 3/1 and 4/2
    assert bsf["auto_median"] == pytest.approx(2.0)                  # 3/2 and 5/2
    assert bsl["auto_floor_fraction"] == pytest.approx(numpy.median([0.8, 0.25]))
    compared = summary["float16|parity"]
    assert compared["patterns"] == 2
    assert compared["bsf_over_bsl"] == pytest.approx(2.0 / 2.5)
    assert compared["bsl_time_over_bsf_median"] == pytest.approx(numpy.median([0.5, 1.0]))
    # float32's held-out rows share no pattern between the layouts: no comparison
    assert "float32|parity|heldout" not in summary
    assert "float32|default|bsl|heldout" in summary


def test_options_default_to_every_dtype_and_both_samples():
    args = cli.parser().parse_args(["--suite", "parity"])
    parity.check_arguments(args, "does-not-exist.json")
    assert args.dtypes == list(parity.DTYPES) and args.count == 60
    assert args.samples == ["default", "heldout"]
    assert engine.BATCH["complex128"] == 8192
    too_many = cli.parser().parse_args(["--suite", "parity", "--count", "100000"])
    with pytest.raises(Exception, match="held-out sample"):
        parity.check_arguments(too_many, "does-not-exist.json")


def test_appending_to_a_file_without_the_parity_rates_is_refused(tmp_path):
    """An engine file without the TF32 GEMM's rate would fail at its first float32 row."""
    import json
    out = tmp_path / "engine.json"
    ceilings = {k: v for k, v in CEILINGS.items() if k != "tf32_gemm"}
    rows = [_row("float16", "bsl", (1, 8, 8, 2), 1.0, 2.0)]
    out.write_text(json.dumps({"ceilings": ceilings, "rows": rows}))
    args = cli.parser().parse_args(["--suite", "parity", "--append"])
    with pytest.raises(Exception, match="tf32_gemm"):
        parity.check_arguments(args, out)
    out.write_text(json.dumps({"ceilings": CEILINGS, "rows": rows}))
    parity.check_arguments(args, out)


def test_the_engine_suite_prices_complex128_at_the_dgemm_rate():
    pattern = (1, 1024, 1024, 1)
    floor = engine.floor_seconds(pattern, 8192, "complex128", "default", CEILINGS)
    assert floor == pytest.approx(8 * 8192 * 1024 * 1024 / CEILINGS["dgemm"])


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_one_row_has_a_right_answer_and_its_floor(layout):
    if not gpu_available():
        pytest.skip(GPU_REASON)
    args = cli.parser().parse_args(["--suite", "parity"])
    row = parity.parity_row((2, 48, 96, 4), layout, "complex128", "default", args, CEILINGS)
    assert row["relerr"]["auto"] < 1e-12, row["relerr"]
    assert row["seconds"]["auto"] > 0 and "base_cupy_bmm" in row["seconds"]
    assert row["floor_s"] == parity.floor_seconds((2, 48, 96, 4), 8192, "complex128", CEILINGS)


def test_results_are_opened_new_or_resumed_with_their_seed_and_ceilings(tmp_path, monkeypatch):
    """A new file gets the run's metadata, the measured ceilings, the drawn seed and the
    suite's fields; --append keeps the file's ceilings and seed and adds the command."""
    import json
    meta = dict.fromkeys(("gpu", "commit", "date", "cupy", "kscupy"), "x")
    monkeypatch.setattr(engine, "run_metadata", lambda: {**meta, "command": "first"})
    out = tmp_path / "parity.json"
    args = cli.parser().parse_args(["--suite", "parity", "--heldout-seed", "7"])
    result, ceilings = engine.open_results(args, out, measure=lambda b: CEILINGS,
                                           suite="parity")
    assert ceilings == CEILINGS and result["heldout_seed"] == 7
    assert result["suite"] == "parity" and result["command"] == "first"
    result["rows"] = [_row("float16", "bsl", (1, 8, 8, 2), 1.0, 2.0)]
    out.write_text(json.dumps(result))
    monkeypatch.setattr(engine, "run_metadata", lambda: {**meta, "command": "second"})
    again = cli.parser().parse_args(["--suite", "parity", "--append"])
    resumed, ceilings = engine.open_results(again, out, measure=lambda b: 1 / 0)
    assert ceilings == CEILINGS and resumed["heldout_seed"] == 7
    assert resumed["commands"] == ["second"] and len(resumed["rows"]) == 1
