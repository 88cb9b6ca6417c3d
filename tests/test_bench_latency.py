"""bench_latency's verdicts against issue 10's targets, on synthetic results (no GPU)."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_latency  # noqa: E402


def small_batch_row(batch, layout, auto_speedup):
    """A row where ``auto`` is ``auto_speedup`` times faster than the best baseline (CuPy's
    BMM at 1 ms; dense is slower), on the GPU and on the host alike."""
    seconds = {"auto": 1e-3 / auto_speedup, "kernel": 1e-3, "base_cupy_bmm": 1e-3,
               "base_dense": 3e-3}
    return {"suite": bench_latency.SMALL_BATCH_SUITE, "batch": batch, "layout": layout,
            "seconds": seconds, "host_seconds": dict(seconds)}


def solver_row(n, auto, dense=None):
    times = {"auto": auto} if dense is None else {"auto": auto, "base_dense": dense}
    return {"suite": "solver", "solver": "cg", "operator": "K^H K + I", "n": n,
            "seconds_per_iter": times}


def test_rows_need_the_median_and_every_pattern():
    rows = ([small_batch_row(1, "bsl", s) for s in (3.0, 2.5, 2.2, 0.9)]        # one below 1.0x
            + [small_batch_row(1, "bsf", s) for s in (2.0, 2.1, 1.0)]
            + [small_batch_row(64, "bsl", s) for s in (1.4, 1.5, 1.6)]
            + [small_batch_row(64, "bsf", s) for s in (2.0, 1.6, 0.94)])      # one below 0.95x
    summary = bench_latency.summarize({"rows": rows})
    b1 = summary["B=1|bsl"]
    assert b1["patterns"] == 4 and b1["auto_median"] == pytest.approx(2.35)
    assert b1["auto_min"] == pytest.approx(0.9) and b1["below_1.0"] == 1
    assert b1["kernel_median"] == pytest.approx(1.0) and b1["auto_host_median"] == pytest.approx(2.35)
    assert summary["targets_met"] == {"B=1|bsl": False, "B=1|bsf": True, "B=64|bsl": True,
                                      "B=64|bsf": False}
    assert summary["B=64|bsf"]["below_0.95"] == 1 and summary["B=64|bsf"]["below_1.0"] == 1


def test_first_use_host_and_solver_verdicts():
    trials = [{"empty": {"work_s": w, "process_s": w + 1}, "warm": {"work_s": 0.2, "process_s": 1}}
              for w in (1.0, 1.4, 9.0)]                      # one slow trial: the median holds
    first_use = bench_latency.first_use_summary(trials)
    assert first_use["empty_cache_s"] == 1.4 and first_use["empty_cache_process_s"] == 2.4
    assert first_use["warm_cache_s"] == 0.2 and first_use["trials"] == trials
    rows = [solver_row(1024, 2.0, 1.0), solver_row(4096, 1.0, 2.0), solver_row(16384, 1.0, 3.0),
            solver_row(65536, 1.0)]                         # no dense baseline: not in the median
    result = {"rows": rows, "first_use": first_use, "host_overhead_us": 5.5}
    summary = bench_latency.summarize(result)
    assert summary["cg|K^H K + I"] == {"sizes": [1024, 4096, 16384], "speedup_median": 2.0,
                                       "met": True}
    assert summary["targets_met"] == {"first_use": True, "host_overhead": False,
                                      "cg|K^H K + I": True}
    result["first_use"] = {**first_use, "warm_cache_s": 0.31}
    assert bench_latency.summarize(result)["targets_met"]["first_use"] is False


def test_solver_without_any_dense_baseline_misses():
    summary = bench_latency.summarize({"rows": [solver_row(65536, 1.0)]})
    assert summary["cg|K^H K + I"] == {"sizes": [], "speedup_median": None, "met": False}


@pytest.mark.parametrize("signature, expected", [
    ("def solver(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None): pass",
     {"rtol": 0.0, "atol": 0.0}),
    ("def solver(A, b, x0=None, tol=1e-5, maxiter=None, atol=None): pass",
     {"tol": 0.0, "atol": 0.0}),
])
def test_zero_tolerances_follow_the_solver_signature(signature, expected):
    namespace = {}
    exec(signature, namespace)
    assert bench_latency.zero_tolerances(namespace["solver"]) == expected
