"""How ``auto``'s close calls time their rivals (kscupy.engine.single.pipeline_seconds), on
the CPU: a stand-in for CuPy's stream and events keeps a host clock and a GPU queue, and a
run spends ``host`` seconds launching work that takes the GPU ``gpu`` seconds. A pipeline
of such calls costs ``max(host, gpu)`` a call, which is what the timing must report, for
host-bound and GPU-bound runs alike."""
import sys
import types

import pytest

from kscupy.engine import single


class _Timeline:
    """The host's clock and the time the GPU's queue drains (seconds)."""

    def __init__(self):
        self.host = 0.0
        self.gpu_free = 0.0

    def launch(self, host, gpu):
        self.host += host
        self.gpu_free = max(self.gpu_free, self.host) + gpu

    def synchronize(self):
        self.host = max(self.host, self.gpu_free)


def _fake_cupy(timeline):
    """The parts of CuPy that pipeline_seconds uses, on ``timeline``."""

    class Event:
        def record(self, stream):
            # an event completes when the work queued before it is done
            self.at = max(timeline.host, timeline.gpu_free)

        def synchronize(self):
            timeline.synchronize()

    stream = types.SimpleNamespace(synchronize=timeline.synchronize)
    cuda = types.SimpleNamespace(
        Event=Event, get_current_stream=lambda: stream,
        get_elapsed_time=lambda start, stop: (stop.at - start.at) * 1e3)   # milliseconds
    return types.SimpleNamespace(cuda=cuda)


@pytest.mark.parametrize("host_us, gpu_us", [(18.0, 6.0), (10.0, 16.0), (10.0, 10.0),
                                             (3.0, 250.0)])
def test_a_close_call_times_what_a_pipeline_sees(monkeypatch, host_us, gpu_us):
    timeline = _Timeline()
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(timeline))
    calls = []

    def run(X):
        calls.append(X)
        timeline.launch(host_us * 1e-6, gpu_us * 1e-6)

    (seconds,) = single.pipeline_seconds([run], "X")
    assert seconds == pytest.approx(max(host_us, gpu_us) * 1e-6, rel=1e-9)
    assert calls and set(calls) == {"X"}


def test_a_kernel_with_less_host_time_beats_a_host_bound_call(monkeypatch):
    """A kernel of 10 us host and 16 us GPU time against a cuBLAS call of 18 us host and
    6 us GPU time: in a pipeline the kernel is faster; timed from an idle GPU, the kernel's
    first launch would count in full and the cuBLAS call would look faster."""
    timeline = _Timeline()
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(timeline))
    kernel = lambda X: timeline.launch(10e-6, 16e-6)      # noqa: E731
    cublas = lambda X: timeline.launch(18e-6, 6e-6)       # noqa: E731
    kernel_s, cublas_s = single.pipeline_seconds([kernel, cublas], "X")
    assert kernel_s < cublas_s
