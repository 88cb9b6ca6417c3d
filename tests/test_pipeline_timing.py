"""How ``auto``'s close calls time their rivals (kscupy.engine.single.pipeline_times), on
the CPU: a stand-in for CuPy's stream and events keeps a host clock and a GPU queue, and a
run spends ``host`` seconds launching work that takes the GPU ``gpu`` seconds. A pipeline
of such calls costs ``max(host, gpu)`` a call, which is what the timing must report, for
host-bound and GPU-bound runs alike, with the host's own time beside it; and how the
verdict weighs the two (kscupy.engine.decide.settle)."""
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


@pytest.fixture
def timeline(monkeypatch):
    """A timeline that CuPy's stream and events and the host's clock follow."""
    timeline = _Timeline()
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(timeline))
    monkeypatch.setattr(single, "time", types.SimpleNamespace(perf_counter=lambda: timeline.host))
    return timeline


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
def test_a_close_call_times_what_a_pipeline_sees(timeline, host_us, gpu_us):
    calls = []

    def run(X):
        calls.append(X)
        timeline.launch(host_us * 1e-6, gpu_us * 1e-6)

    ((seconds, host_seconds),) = single.pipeline_times([run], "X")
    assert seconds == pytest.approx(max(host_us, gpu_us) * 1e-6, rel=1e-9)
    assert host_seconds == pytest.approx(host_us * 1e-6, rel=1e-9)
    assert single.pipeline_seconds([run], "X") == [pytest.approx(seconds, rel=1e-9)]
    assert calls and set(calls) == {"X"}


def test_a_kernel_with_less_host_time_beats_a_host_bound_call(timeline):
    """A kernel of 10 us host and 16 us GPU time against a cuBLAS call of 18 us host and
    6 us GPU time: in a pipeline the kernel is faster; timed from an idle GPU, the kernel's
    first launch would count in full and the cuBLAS call would look faster."""
    kernel = lambda X: timeline.launch(10e-6, 16e-6)      # noqa: E731
    cublas = lambda X: timeline.launch(18e-6, 6e-6)       # noqa: E731
    kernel_s, cublas_s = single.pipeline_seconds([kernel, cublas], "X")
    assert kernel_s < cublas_s


@pytest.mark.parametrize("times_us, choice", [
    # host-bound fastest; a rival 1% slower with less host time is the choice
    ([(16.7, 16.6), (16.8, 6.0)], 1),
    # ... and the least host time among those tied, not merely the second
    ([(16.7, 16.6), (17.0, 12.0), (17.2, 7.0)], 2),
    # a rival beyond HOST_TIE is not, however little host time it needs
    ([(16.0, 15.9), (17.6, 6.0)], 0),
    # a GPU-bound fastest stays, whatever its rivals' host time
    ([(100.0, 10.0), (101.0, 5.0)], 0),
    # the fastest need not come first
    ([(18.0, 6.0), (12.0, 11.9), (30.0, 3.0)], 1),
])
def test_a_host_bound_verdict_goes_to_a_tied_rival_of_less_host_time(times_us, choice):
    from kscupy.engine import decide
    seconds = [s * 1e-6 for s, _ in times_us]
    host_seconds = [h * 1e-6 for _, h in times_us]
    assert decide._fastest(seconds, host_seconds) == choice
    assert decide._fastest(seconds) == seconds.index(min(seconds))   # no host times known


@pytest.mark.parametrize("backends, times_us, choice", [
    # bmm and dense alike in time and host time: dense (a tensor's matmul hand-over)
    (["bmm", "dense"], [(14.2, 13.8), (14.3, 13.9)], 1),
    # ... also where dense is timed first, or is not the fastest of the tie
    (["dense", "bmm"], [(14.4, 13.9), (14.2, 13.8)], 0),
    # not dense needing more host time than HOST_TIE allows over the least
    (["bmm", "dense"], [(14.2, 12.0), (14.3, 13.9)], 0),
    # nor a dense call slower than the tie
    (["bmm", "dense"], [(14.2, 13.8), (15.2, 13.8)], 0),
    # nor dense beside a GPU-bound fastest
    (["bmm", "dense"], [(14.2, 6.0), (14.3, 13.9)], 0),
])
def test_a_host_bound_tie_in_host_time_too_goes_to_dense(backends, times_us, choice):
    """The close call times CuPy operands, where ``bmm`` and ``dense`` can tie; a 16-bit
    PyTorch tensor's product hands ``dense`` to PyTorch's matmul and ``bmm`` to a strided
    bmm that costs the host more, so a full tie goes to ``dense``."""
    from kscupy.engine import decide
    seconds = [s * 1e-6 for s, _ in times_us]
    host_seconds = [h * 1e-6 for _, h in times_us]
    assert decide._fastest(seconds, host_seconds, backends) == choice
    # with no dense among the names, the tied run of least host time, as without names
    assert decide._fastest(seconds, host_seconds, ["kernel", "bmm"]) == \
        decide._fastest(seconds, host_seconds)


def test_a_tied_gpu_bound_kernel_is_chosen_over_a_host_bound_call(timeline):
    """A cuBLAS call of 16.7 us host time (5 us of GPU time) against a kernel of 16.8 us of
    GPU time (6 us of host time): timed alike in a pipeline of CuPy products, but a caller
    with 5 us of host work of its own a call (a PyTorch tensor's) would wait 21.7 us a call
    on the cuBLAS call and still 16.8 on the kernel. The timings the close call gives make
    the kernel the verdict."""
    from kscupy.engine import decide
    cublas = lambda X: timeline.launch(16.7e-6, 5e-6)      # noqa: E731
    kernel = lambda X: timeline.launch(6e-6, 16.8e-6)      # noqa: E731
    seconds, host_seconds = zip(*single.pipeline_times([cublas, kernel], "X"))
    assert seconds[0] < seconds[1]
    assert decide._fastest(list(seconds), list(host_seconds)) == 1


def test_a_passing_disturbance_slows_a_round_of_each_rival_not_every_round_of_one(
        timeline, monkeypatch):
    """Rival A (6 us host, 16 us GPU a call) is faster than B (6 us host, 18 us GPU). While
    the first rounds run, something else holds the host (a background compile's thread):
    every launch takes 40 us more. Timed one after another, all of A's rounds would fall in
    that time and B would win; with the rivals' rounds taking turns, A's last round is
    undisturbed and A wins. (Without the turns, this test fails.)"""
    from kscupy.engine import decide
    monkeypatch.setattr(single, "CLOSE_CALL_ROUNDS", 3)
    monkeypatch.setattr(single, "CLOSE_CALL_CALLS", 4)
    disturbed = [17]                    # launches still to be slowed: A's warm-up and rounds

    def rival(gpu_us):
        def run(X):
            extra = 40e-6 if disturbed[0] > 0 else 0.0
            disturbed[0] -= 1
            timeline.launch(6e-6 + extra, gpu_us * 1e-6)
        return run
    seconds, host_seconds = zip(*single.pipeline_times([rival(16.0), rival(18.0)], "X"))
    assert seconds[0] == pytest.approx(16e-6, rel=1e-9)
    assert seconds[1] == pytest.approx(18e-6, rel=1e-9)
    assert decide._fastest(list(seconds), list(host_seconds)) == 0


def test_the_garbage_collector_waits_while_rivals_are_timed(timeline):
    """No collection during a close call's timing (a full one takes milliseconds in a
    process holding many objects); the collector's state is restored after, also where
    a run raises."""
    import gc
    seen = []

    def run(X):
        seen.append(gc.isenabled())
        timeline.launch(6e-6, 10e-6)
    assert gc.isenabled()
    single.pipeline_times([run, run], "X")
    assert seen and not any(seen) and gc.isenabled()

    def failing(X):
        raise RuntimeError("a run that fails")
    with pytest.raises(RuntimeError):
        single.pipeline_times([failing], "X")
    assert gc.isenabled()
    gc.disable()
    try:
        single.pipeline_times([run], "X")
        assert not gc.isenabled()           # left as the caller had it
    finally:
        gc.enable()
