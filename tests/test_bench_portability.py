"""The portability suite (kscupy.bench.portability): its options, its summary keys, the
emulation it switches on and off, and on a GPU one case's rows against the oracle."""
import os

import numpy
import pytest

from conftest import GPU_REASON, gpu_available
from kscupy.bench import cli, engine, portability
from kscupy.core import device
from kscupy.engine import registry


def _row(arch, batch, layout="bsl", auto=1.0, base=1.5):
    return {"suite": "patterns", "sample": "default", "pattern": [1, 4, 4, 1], "layout": layout,
            "dtype": "float32", "precision": "default", "batch": batch, "emulated_arch": arch,
            "floor_s": 0.5, "seconds": {"auto": auto, "base_cupy_bmm": base},
            "relerr": {"auto": 1e-7, "base_cupy_bmm": 1e-7}}


def test_summary_keys_name_the_architecture_and_a_batch_other_than_the_default():
    rows = [_row("sm_80", 25088), _row("sm_80", 25088, auto=3.0), _row("sm_89", 64),
            _row(None, 25088)]
    summary = engine.summarize(rows)
    assert set(summary) == {"float32|default|bsl|sm_80", "float32|default|bsl|B=64|sm_89",
                            "float32|default|bsl"}
    entry = summary["float32|default|bsl|sm_80"]
    assert entry["patterns"] == 2 and entry["below_0.95"] == 1
    assert entry["auto_median"] == pytest.approx(numpy.median([1.5, 0.5]))
    assert "kernel_floor_fraction" not in entry     # no kernel timed: no floor fraction


def test_options_default_to_the_issue_table_and_refuse_unknown_architectures():
    args = cli.parser().parse_args(["--suite", "portability"])
    portability.check_arguments(args, "does-not-exist.json")
    assert args.archs == ["sm_80", "sm_89"] and list(args.batches) == [25088, 64]
    assert args.dtypes == ["float32", "float16"]
    engine_args = cli.parser().parse_args(["--suite", "engine"])
    engine.check_arguments(engine_args, "does-not-exist.json")
    assert engine_args.dtypes == list(engine.DTYPES)
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--archs", "sm_90"])     # native, not emulated


def test_emulation_is_switched_on_inside_the_block_only(monkeypatch):
    monkeypatch.delenv(device.EMULATE_ARCH, raising=False)
    with portability.emulated("sm_89"):
        assert device.current().compute_capability == 89
        assert device.current().max_cluster == 1
    assert device.EMULATE_ARCH not in os.environ
    monkeypatch.setenv(device.EMULATE_ARCH, "80")
    with portability.emulated("sm_75"):
        assert device.current().compute_capability == 75
    assert os.environ[device.EMULATE_ARCH] == "80"


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_one_case_gives_a_row_per_architecture_with_a_right_answer(layout):
    if not gpu_available():
        pytest.skip(GPU_REASON)
    args = cli.parser().parse_args(["--suite", "portability"])
    ceilings = {"bandwidth": 3e12, "sgemm": 5e13, "hgemm": 5e14, "dgemm": 5e13}
    rows = portability.rows_of_case((2, 48, 96, 4), layout, "float16", 64,
                                    ["sm_80", "sm_89"], args, ceilings)
    assert [r["emulated_arch"] for r in rows] == ["sm_80", "sm_89"]
    for r in rows:
        assert r["relerr"]["auto"] < 2e-3, r["relerr"]
        assert r["seconds"]["auto"] > 0 and "base_cupy_bmm" in r["seconds"]
        with portability.emulated(r["emulated_arch"]):
            assert registry.get(r["auto_choice"]).runs_on(device.current())
