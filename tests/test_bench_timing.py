"""The benchmark suites' timers (kscupy.bench.timing) on a GPU: the throughput of
back-to-back calls and the per-call latency measure the same work."""
import contextlib

import numpy
import pytest

from conftest import GPU_REASON, gpu_available


@pytest.mark.gpu
def test_throughput_and_latency_time_the_same_work():
    if not gpu_available():
        pytest.skip(GPU_REASON)
    import cupy
    from kscupy.bench import timing
    x = cupy.random.default_rng(0).standard_normal(1 << 26, dtype=numpy.float32)  # 256 MiB
    y = cupy.empty_like(x)
    copy = lambda s: y.__setitem__(slice(None), s)     # noqa: E731
    back_to_back = timing.throughput_seconds(copy, [x])
    per_call = timing.time_fn(copy, [x])
    # a copy this large is bandwidth-bound: both see it; launch gaps are a small part
    assert 0.7 < back_to_back / per_call < 1.3, (back_to_back, per_call)
    bandwidth = 2 * x.nbytes / back_to_back
    assert 1e11 < bandwidth < 2e13, bandwidth


@pytest.mark.gpu
def test_interleaved_runs_time_the_same_work_alike_and_enter_each_context():
    if not gpu_available():
        pytest.skip(GPU_REASON)
    import cupy
    from kscupy.bench import timing
    x = cupy.random.default_rng(1).standard_normal(1 << 24, dtype=numpy.float32)  # 64 MiB
    y = cupy.empty_like(x)
    copy = lambda s: y.__setitem__(slice(None), s)     # noqa: E731
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
