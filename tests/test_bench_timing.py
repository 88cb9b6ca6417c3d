"""The benchmark suites' timers (kscupy.bench.timing) on a GPU: the throughput of
back-to-back calls and the per-call latency measure the same work."""
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
