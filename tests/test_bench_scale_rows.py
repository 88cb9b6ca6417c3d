"""The scale suite's choice of rows (``--scale-rows``), on the CPU: the rows themselves
stood in for (they run on a GPU, tests/test_bench_scale.py)."""
import json

from kscupy.bench import cli, scale


def test_scale_rows_makes_the_kinds_asked_for_and_says_which_it_left_out(tmp_path,
                                                                       monkeypatch):
    made = []
    monkeypatch.setattr(scale, "run_metadata", lambda: dict.fromkeys(
        ("gpu", "commit", "date", "command", "cupy", "kscupy"), "x"))
    monkeypatch.setattr(scale, "fresh_copy_row", lambda name, rows: made.append(name) or
                        {"suite": "fresh_copy", "operator": name, "first_s": 2.0, "warm_s": 1.0})
    monkeypatch.setattr(scale, "copy_bandwidths", lambda: made.append("bandwidths"))
    row = {"suite": "out_of_core", "memory": "pinned", "streams": 2, "bytes": 1e9,
           "seconds": 1.0, "bandwidth_fraction": 0.8, "h2d_bandwidth": 5e10,
           "duplex_fraction": 0.9, "duplex_bandwidth": 4e10}
    monkeypatch.setattr(scale, "out_of_core_row", lambda *a: made.append("out_of_core") or row)
    monkeypatch.setattr(scale.multigpu, "dask_rows", lambda *a: made.append("dask") or [])
    out = tmp_path / "scale.json"
    args = cli.parser().parse_args(["--suite", "scale", "--scale-rows", "fresh_copy",
                                    "--out", str(out)])
    scale.main(args)
    assert made == list(scale.OPERATORS)
    result = json.loads(out.read_text())
    assert [r["operator"] for r in result["rows"]] == list(scale.OPERATORS)
    assert result["out_of_core"].startswith("not run") and result["dask"].startswith("not run")
    assert "fresh_copy" not in result
    made.clear()
    args = cli.parser().parse_args(["--suite", "scale", "--scale-rows", "out_of_core",
                                    "--streams", "2", "--out", str(out)])
    scale.main(args)
    assert made == ["bandwidths", "out_of_core", "out_of_core"]     # 2 streams, pageable
