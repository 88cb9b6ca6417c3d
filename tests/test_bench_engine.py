"""The engine suite's second timing of rows that read as misses, with a scripted timer (no
GPU)."""
import contextlib

import pytest

from kscupy.bench import engine


def scripted_timer(times):
    """A timer for ``engine.bench_row`` that returns, per method, the next of its times."""
    queues = {name: list(ts) for name, ts in times.items()}

    def timer(fn, inputs):
        return {"seconds": queues[fn].pop(0)}
    return timer


def row_timed(first, second):
    """A default-precision row timed once by ``first`` (``{method: seconds}``), then passed
    to ``retime_misses`` with ``second`` as the next times."""
    methods = {name: name for name in first}           # the timer keys on the name
    row = {"precision": "default", "seconds": dict(first)}
    timer = scripted_timer({name: [second[name]] for name in first})
    engine.retime_misses(row, methods, [None], timer)
    return row


def test_a_row_at_or_above_the_line_is_timed_once():
    first = {"auto": 1.0, "kernel": 1.0, "base_cupy_bmm": 0.96, "base_dense": 2.0}
    row = row_timed(first, {name: 0.1 for name in first})
    assert row["seconds"] == first
    assert "first_seconds" not in row


def test_a_miss_is_timed_again_and_every_method_keeps_its_faster_time():
    first = {"auto": 2.0, "kernel": 1.0, "base_cupy_bmm": 1.0, "base_dense": 3.0}
    second = {"auto": 0.9, "kernel": 1.2, "base_cupy_bmm": 0.8, "base_dense": 3.5}
    row = row_timed(first, second)
    assert row["first_seconds"] == first
    # the baseline gains from the second chance as much as auto does
    assert row["seconds"] == {"auto": 0.9, "kernel": 1.0, "base_cupy_bmm": 0.8,
                              "base_dense": 3.0}
    assert engine.lead_ratio(row) == 0.8 / 0.9


def test_the_tf32_rows_lead_with_their_own_choice():
    row = {"precision": "tf32", "seconds": {"auto_tf32": 2.0, "base_dense_tf32": 1.0}}
    assert engine.lead_ratio(row) == 0.5


def test_a_chain_row_names_its_lead_and_rows_without_baselines_are_left_alone():
    """bench_fft's rows have no precision (lead "auto"); its butterfly and Hadamard rows
    have a floor and no baseline."""
    row = {"seconds": {"auto": 2.0, "base_per_factor": 1.0}}
    timer = scripted_timer({"auto": [0.9], "base_per_factor": [1.1]})
    engine.retime_misses(row, {"auto": "auto", "base_per_factor": "base_per_factor"}, [None],
                         timer, lead="auto")
    assert row["seconds"] == {"auto": 0.9, "base_per_factor": 1.0}
    alone = {"seconds": {"auto": 2.0}}
    engine.retime_misses(alone, {"auto": "auto"}, [None], scripted_timer({"auto": []}),
                         lead="auto")
    assert alone == {"seconds": {"auto": 2.0}}


def test_every_field_of_the_timer_keeps_its_faster_value_and_its_first():
    """bench_latency's timer gives host_seconds beside seconds."""
    row = {"precision": "default",
           "seconds": {"auto": 2.0, "base_dense": 1.0},
           "host_seconds": {"auto": 3.0, "base_dense": 1.0}}
    again = {"auto": {"seconds": 0.9, "host_seconds": 3.5},
             "base_dense": {"seconds": 1.2, "host_seconds": 0.5}}
    engine.retime_misses(row, {"auto": "auto", "base_dense": "base_dense"}, [None],
                         lambda fn, inputs: again[fn])
    assert row["seconds"] == {"auto": 0.9, "base_dense": 1.0}
    assert row["host_seconds"] == {"auto": 3.0, "base_dense": 0.5}
    assert row["first_host_seconds"] == {"auto": 3.0, "base_dense": 1.0}


class TogetherTimer:
    """A timer that times methods together (as ``timing.Interleaved``), recording its calls."""

    def __init__(self, times):
        self.times, self.calls = times, []

    def together(self, methods, inputs, contexts=None):
        self.calls.append((list(methods), contexts))
        return {"seconds": {name: self.times[name] for name in methods}}


def test_a_timer_of_methods_together_gets_them_all_at_once_with_their_contexts():
    timer = TogetherTimer({"auto@sm_80": 0.5, "base_dense": 1.5})
    contexts = {"auto@sm_80": contextlib.nullcontext}
    row = {"precision": "default", "seconds": {"auto@sm_80": 2.0, "base_dense": 1.0}}
    engine.retime_misses(row, {"auto@sm_80": None, "base_dense": None}, [None], timer,
                         "auto@sm_80", contexts)
    assert timer.calls == [(["auto@sm_80", "base_dense"], contexts)]
    assert row["seconds"] == {"auto@sm_80": 0.5, "base_dense": 1.0}
    assert row["first_seconds"] == {"auto@sm_80": 2.0, "base_dense": 1.0}


def test_contexts_need_a_timer_of_methods_together():
    with pytest.raises(ValueError, match="together"):
        engine.timed({"auto": "auto"}, [None], scripted_timer({"auto": [1.0]}),
                      {"auto": contextlib.nullcontext})


class _DenseOnly:
    """A caller's baselines with a dense product only (records the precision asked for)."""
    name = "framework"
    asked = []

    def bmm(self, blocks, layout, tf32=False):
        return None

    def dense(self, D, layout, tf32=False):
        self.asked.append(tf32)
        return lambda x: ("framework dense", D.shape, layout)


@pytest.mark.parametrize("precision", ["default", "tf32"])
def test_a_callers_dense_product_joins_the_baselines_at_every_precision(precision):
    """The strongest dense product a user has is their framework's own where one is given
    (the same GEMM, issued with less host time than CuPy's matmul for short products):
    it stands beside CuPy's dense product at default precision, and alone with TF32."""
    import numpy
    import kscupy as ks
    from kscupy.bench import cli
    K = ks.KSMatrix.random((2, 3, 4, 2), dtype=numpy.float32, seed=1)
    args = cli.parser().parse_args(["--suite", "engine"])
    baselines = _DenseOnly()
    baselines.asked = []
    methods = engine.baseline_methods(K, "bsf", precision, 8, args, baselines)
    name = "base_framework_dense" if precision == "default" else "base_dense_tf32"
    assert methods[name](None) == ("framework dense", K.shape, "bsf")
    assert baselines.asked == [precision == "tf32"]
    assert ("base_dense" in methods) == (precision == "default")
