"""The benchmark suites' timers (kscupy.bench.timing) on a GPU: the throughput of
back-to-back calls and the per-call latency measure the same work."""
import contextlib

import numpy
import pytest

from conftest import GPU_REASON, gpu_available


def _copy_of(elements, seed):
    """``(x, copy)``: random float32 ``x`` on the GPU and ``copy(s)``, which copies ``s``
    into a buffer of its size (bandwidth-bound work to time); skips without a GPU."""
    if not gpu_available():
        pytest.skip(GPU_REASON)
    import cupy
    x = cupy.random.default_rng(seed).standard_normal(elements, dtype=numpy.float32)
    y = cupy.empty_like(x)
    return x, lambda s: y.__setitem__(slice(None), s)


@pytest.mark.gpu
def test_throughput_and_latency_time_the_same_work():
    from kscupy.bench import timing
    x, copy = _copy_of(1 << 26, 0)                      # 256 MiB
    back_to_back = timing.throughput_seconds(copy, [x])
    per_call = timing.time_fn(copy, [x])
    # a copy this large is bandwidth-bound: both see it; launch gaps are a small part
    assert 0.7 < back_to_back / per_call < 1.3, (back_to_back, per_call)
    bandwidth = 2 * x.nbytes / back_to_back
    assert 1e11 < bandwidth < 2e13, bandwidth


@pytest.mark.gpu
def test_interleaved_runs_time_the_same_work_alike_and_enter_each_context():
    from kscupy.bench import timing
    x, copy = _copy_of(1 << 24, 1)                      # 64 MiB
    entered = []

    @contextlib.contextmanager
    def marked():
        entered.append(True)
        yield

    times = timing.interleaved_seconds({"a": copy, "b": copy}, [x], budget_s=0.05, rounds=5,
                                       contexts={"b": marked})
    assert 0.7 < times["a"] / times["b"] < 1.3, times
    assert len(entered) == 1 + 5        # the warm-up and calibration, then one per round
    one = timing.Interleaved(budget_s=0.05)(copy, [x])
    assert 0.7 < one["seconds"] / times["a"] < 1.3, (one, times)


@pytest.mark.gpu
def test_the_engine_rows_timer_gives_throughput_and_latency_of_each_method():
    from kscupy.bench import engine
    x, copy = _copy_of(1 << 24, 2)                      # 64 MiB
    times = engine.EventsAndCalls(budget_s=0.05).together({"a": copy, "b": copy}, [x])
    assert set(times) == {"seconds", "call_seconds"}
    for field in times.values():
        assert set(field) == {"a", "b"} and 0.7 < field["a"] / field["b"] < 1.3, times
    one = engine.EventsAndCalls(budget_s=0.05)(copy, [x])
    assert set(one) == {"seconds", "call_seconds"}
    assert 0.7 < one["seconds"] / one["call_seconds"] < 1.3, one


def test_host_seconds_counts_its_calls_and_drains_the_gpu_between_loops(monkeypatch):
    """host_seconds: ``warmup`` untimed calls (``calls`` by default), then ``loops`` timed
    loops of ``calls``, the GPU drained after the warm-up and after every loop (off the
    clock), the median loop's time per call."""
    import types
    from kscupy.bench import timing
    events = []
    device = types.SimpleNamespace(synchronize=lambda: events.append("sync"))
    monkeypatch.setattr(timing, "cupy", types.SimpleNamespace(
        cuda=types.SimpleNamespace(Device=lambda: device)))
    seconds = timing.host_seconds(lambda: events.append("call"), calls=4, loops=3, warmup=2)
    assert events == ["call"] * 2 + ["sync"] + (["call"] * 4 + ["sync"]) * 3
    assert 0 < seconds < 1e-3
    events.clear()
    timing.host_seconds(lambda: events.append("call"), calls=5)
    assert events == ["call"] * 5 + ["sync"] + ["call"] * 5 + ["sync"]
