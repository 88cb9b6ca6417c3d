"""kernels/nvrtc.py's bookkeeping, without a GPU: a fake loader stands in for NVRTC.

One compile per instantiation when threads race, and the background compiles that ``auto``
relies on (see the module's docstring): inside ``unless_compiled`` a missing kernel is
submitted once and StillCompiling raised until it is loaded; ``waiting`` and
``BACKGROUND = False`` wait instead; a failed compile raises in the next call.
"""
import threading
import time

import pytest

from kscupy.kernels import nvrtc


@pytest.fixture
def markers(monkeypatch, tmp_path):
    """The compiled-before markers in a temporary folder (the real ones sit beside CuPy's
    disk cache); returns the folder."""
    monkeypatch.setattr(nvrtc, "_marker", lambda key: str(tmp_path / "markers" / key[1]))
    return tmp_path / "markers"


@pytest.fixture
def fake_nvrtc(monkeypatch, markers):
    """Empty kernel tables, background compiles on, and a fake ``_load`` whose compiles
    block until ``release`` is set (``fail`` names compile errors). Yields the state."""
    monkeypatch.setattr(nvrtc, "_functions", {})
    monkeypatch.setattr(nvrtc, "_pending", {})
    monkeypatch.setattr(nvrtc, "BACKGROUND", True)
    state = {"calls": [], "release": threading.Event(), "fail": set()}

    def fake_load(filename, name, smem, device_id, prefer_shared):
        state["calls"].append(name)
        state["release"].wait(10)
        if name in state["fail"]:
            raise RuntimeError(f"compile error in {name}")
        return ("function", name)
    monkeypatch.setattr(nvrtc, "_load", fake_load)
    # the background thread sets the kernel's device (CuPy); the fake needs none
    monkeypatch.setattr(nvrtc, "_compile_in_background", lambda key: nvrtc.function(*key))
    yield state
    state["release"].set()
    nvrtc.finish_background_compiles()


def test_kernels_compile_once_when_threads_race(monkeypatch, markers):
    """nvrtc.function from many threads: each instantiation is loaded once (the others wait
    for it), different instantiations load at the same time."""
    monkeypatch.setattr(nvrtc, "_functions", {})
    calls, running, most = [], [0], [0]
    guard = threading.Lock()

    def fake_load(filename, name, smem, device_id, prefer_shared):
        with guard:
            calls.append(name)
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)                  # a compile that leaves the GIL free
        with guard:
            running[0] -= 1
        return ("function", name)
    monkeypatch.setattr(nvrtc, "_load", fake_load)
    names = [f"k<{i % 4}>" for i in range(16)]
    results = [None] * len(names)

    def ask(i):
        results[i] = nvrtc.function("ks_rows.cu", names[i])
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(calls) == sorted(set(names))            # each name loaded once
    assert results == [("function", n) for n in names]
    assert most[0] > 1                                    # and not one after the other
    assert nvrtc.kernels_loaded() == 4


def test_a_missing_kernel_compiles_in_the_background_once(fake_nvrtc):
    finished = nvrtc.compiles_finished
    for _ in range(3):                     # asked again while it compiles: not resubmitted
        with nvrtc.unless_compiled(), pytest.raises(nvrtc.StillCompiling) as raised:
            nvrtc.function("ks_mma.cu", "k<1>")
        assert raised.value.key[:2] == ("ks_mma.cu", "k<1>")
    time.sleep(0.05)
    assert fake_nvrtc["calls"] == ["k<1>"]
    assert nvrtc.kernels_loaded() == 0
    fake_nvrtc["release"].set()
    nvrtc.finish_background_compiles()
    assert nvrtc.compiles_finished == finished + 1        # prepared runs' keys move on
    with nvrtc.unless_compiled():
        assert nvrtc.function("ks_mma.cu", "k<1>") == ("function", "k<1>")
    assert nvrtc.function("ks_mma.cu", "k<1>") == ("function", "k<1>")
    assert fake_nvrtc["calls"] == ["k<1>"]


def test_outside_the_context_a_call_waits(fake_nvrtc):
    fake_nvrtc["release"].set()
    assert nvrtc.function("ks_mma.cu", "k<2>") == ("function", "k<2>")
    assert nvrtc._pending == {}


@pytest.mark.parametrize("how", ["waiting", "switched off"])
def test_waiting_and_the_switch_override_the_background(fake_nvrtc, monkeypatch, how):
    fake_nvrtc["release"].set()
    if how == "switched off":
        monkeypatch.setattr(nvrtc, "BACKGROUND", False)
        with nvrtc.unless_compiled():
            assert nvrtc.function("ks_rows.cu", "r<1>") == ("function", "r<1>")
    else:
        with nvrtc.unless_compiled(), nvrtc.waiting():
            assert nvrtc.function("ks_rows.cu", "r<1>") == ("function", "r<1>")
    assert nvrtc._pending == {}


def test_a_failed_background_compile_raises_its_error(fake_nvrtc):
    fake_nvrtc["fail"].add("bad<1>")
    with nvrtc.unless_compiled(), pytest.raises(nvrtc.StillCompiling):
        nvrtc.function("ks_chain.cu", "bad<1>")
    fake_nvrtc["release"].set()
    nvrtc.finish_background_compiles()
    with nvrtc.unless_compiled(), pytest.raises(RuntimeError, match="compile error in bad<1>"):
        nvrtc.function("ks_chain.cu", "bad<1>")


def test_the_context_is_per_thread(fake_nvrtc):
    """Another thread's ``unless_compiled`` does not make this thread's calls return early."""
    inside, done = threading.Event(), threading.Event()

    def hold():
        with nvrtc.unless_compiled():
            inside.set()
            done.wait(10)
    t = threading.Thread(target=hold)
    t.start()
    inside.wait(10)
    fake_nvrtc["release"].set()
    assert nvrtc.function("ks_rows.cu", "r<2>") == ("function", "r<2>")
    done.set()
    t.join()


def test_a_kernel_compiled_by_an_earlier_process_loads_in_the_caller(fake_nvrtc, markers):
    """A successful compile leaves a marker; with it, a later process (here: emptied tables)
    loads the kernel from CuPy's disk cache in the calling thread, background or not."""
    fake_nvrtc["release"].set()
    assert nvrtc.function("ks_mma.cu", "k<3>") == ("function", "k<3>")
    assert (markers / "k<3>").exists()
    nvrtc._functions.clear()
    with nvrtc.unless_compiled():
        assert nvrtc.function("ks_mma.cu", "k<3>") == ("function", "k<3>")
    assert nvrtc._pending == {} and fake_nvrtc["calls"] == ["k<3>", "k<3>"]


def test_compile_ahead_submits_once_and_only_what_is_missing(fake_nvrtc, markers, monkeypatch):
    nvrtc.compile_ahead("ks_direct.cu", "d<1>")
    nvrtc.compile_ahead("ks_direct.cu", "d<1>")          # already compiling
    fake_nvrtc["release"].set()
    nvrtc.finish_background_compiles()
    assert fake_nvrtc["calls"] == ["d<1>"] and nvrtc.kernels_loaded() == 1
    nvrtc.compile_ahead("ks_direct.cu", "d<1>")          # loaded
    nvrtc._functions.clear()
    nvrtc.compile_ahead("ks_direct.cu", "d<1>")          # compiled by an earlier process
    monkeypatch.setattr(nvrtc, "BACKGROUND", False)
    nvrtc.compile_ahead("ks_direct.cu", "d<2>")          # switched off
    nvrtc.finish_background_compiles()
    assert fake_nvrtc["calls"] == ["d<1>"]


def test_a_run_of_several_kernels_submits_them_all_at_once(fake_nvrtc):
    """prepare_all: every missing kernel of a run starts compiling in the first call (not
    one per call), StillCompiling is raised after them, and once all are loaded their
    results come back in order."""
    ask = [lambda name=name: nvrtc.function("transpose.cu", name) for name in ("t<1>", "m<2>")]
    with nvrtc.unless_compiled():
        with pytest.raises(nvrtc.StillCompiling):
            nvrtc.prepare_all(*ask)
    assert set(nvrtc._pending) == {("transpose.cu", n, 0, 0, False) for n in ("t<1>", "m<2>")}
    fake_nvrtc["release"].set()
    nvrtc.finish_background_compiles()
    with nvrtc.unless_compiled():
        assert nvrtc.prepare_all(*ask) == [("function", "t<1>"), ("function", "m<2>")]
