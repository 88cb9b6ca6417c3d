"""``auto`` does not wait for NVRTC (kscupy/kernels/nvrtc.py): while the kernel it chose
compiles in the background, the direct kernel answers, checked here against the float64
oracle; once the compile finishes the next call runs the chosen kernel.

The background compiles are held on an event (``gate``), so which kernel answers each call
is known. Run with ``pytest -m gpu``; the rest of the suite runs with the background off
(tests/conftest.py).
"""
import os
import subprocess
import sys
import threading

import numpy
import pytest

import kscupy as ks
from conftest import gpu_available, random_array

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402
from kscupy.core import device  # noqa: E402
from kscupy.engine import decide, execute, steps  # noqa: E402
from kscupy.kernels import nvrtc  # noqa: E402
from kscupy.core.problem import problem_of  # noqa: E402
from test_kernel import check, oracle  # noqa: E402

#: A pattern and batch that auto runs on a kernel in both layouts where it weighs kernels only
#: (B = 64: the tensor-core kernel in bsl, the small-batch kernel in bsf on an H200).
PATTERN, BATCH = (16, 64, 64, 4), 64
#: The source files of each kernel backend auto may choose here: all compiled by the first
#: call.
CHOSEN_FILES = {"kernel": {"ks_mma.cu"}, "kernel_bsl": {"ks_mma.cu", "transpose.cu"},
                "kernel_fma": {"ks_matmul.cu"}, "kernel_skinny": {"ks_skinny.cu"}}


@pytest.fixture
def kernels_only():
    """auto weighs the kernel backends only (the cuBLAS ones compile nothing, and which wins
    depends on the device's cost constants: an emulated device's pick cuBLAS here), its
    memoized decisions forgotten before and after."""
    weighed = decide.candidates
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide, "candidates", lambda *args, **kwargs: [
            b for b in weighed(*args, **kwargs) if b.name in CHOSEN_FILES])
        decide.forget_decisions()
        yield
    decide.forget_decisions()


@pytest.fixture
def gate(monkeypatch):
    """Background compiles on, this process's kernels forgotten (so every one is missing),
    and each background compile held until the returned event is set."""
    monkeypatch.setattr(nvrtc, "BACKGROUND", True)
    monkeypatch.setattr(nvrtc, "_functions", {})
    monkeypatch.setattr(nvrtc, "_pending", {})
    monkeypatch.setattr(nvrtc, "_compiled_before", lambda key: False)   # as if never compiled
    event = threading.Event()
    compile_in_background = nvrtc._compile_in_background

    def held(key):
        event.wait(60)
        compile_in_background(key)
    monkeypatch.setattr(nvrtc, "_compile_in_background", held)
    yield event
    event.set()
    nvrtc.finish_background_compiles()


def _files_loaded():
    return {key[0] for key in nvrtc._functions}


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.float64],
                         ids=lambda t: numpy.dtype(t).name)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_direct_kernel_answers_until_the_chosen_one_is_compiled(poisoned, gate, kernels_only,
                                                                 rng, dtype, layout):
    K = ks.KSMatrix.random(PATTERN, dtype=dtype, xp=cupy, seed=3)
    M, N = K.shape
    X = cupy.asarray(random_array(rng, (N, BATCH) if layout == "bsl" else (BATCH, N), dtype))
    problem = problem_of(K.factor, X, layout)
    # the choice, or on a close call (an emulated device's, at any length) every rival,
    # each compiled to be timed
    rivals = decide.close_call(problem, device.current()) or (decide.choose(problem),)
    assert all(r.backend in CHOSEN_FILES for r in rivals), rivals
    ref = oracle(K.values, X, layout)
    for _ in range(2):                    # the first call, and one while it still compiles
        check(K.matmul(X, layout=layout), ref, dtype)
        assert _files_loaded() == {"ks_direct.cu"}
    gate.set()
    nvrtc.finish_background_compiles()
    check(K.matmul(X, layout=layout), ref, dtype)
    assert _files_loaded() - {"ks_direct.cu"} == set().union(
        *(CHOSEN_FILES[r.backend] for r in rivals)), rivals
    loaded = len(nvrtc._functions)
    check(K @ X if layout == "bsl" else K.matmul(X, layout=layout), ref, dtype)
    assert len(nvrtc._functions) == loaded


def test_a_chain_runs_factor_by_factor_until_its_plan_is_compiled(poisoned, gate, rng):
    n = 256
    F = ks.dft(n, dtype=numpy.complex64, xp=cupy)
    v = cupy.asarray(random_array(rng, (n,), numpy.complex64))
    ref = numpy.fft.fft(cupy.asnumpy(v).astype(numpy.complex128))
    for _ in range(2):
        y = cupy.asnumpy(F @ v)
        assert numpy.linalg.norm(y - ref) <= 1e-5 * numpy.linalg.norm(ref)
        assert _files_loaded() == {"ks_direct.cu"}
    gate.set()
    nvrtc.finish_background_compiles()
    y = cupy.asnumpy(F @ v)
    assert numpy.linalg.norm(y - ref) <= 1e-5 * numpy.linalg.norm(ref)
    assert "ks_direct.cu" in _files_loaded() and len(_files_loaded()) >= 2


def test_a_long_direct_call_waits_for_the_kernel(poisoned, gate, rng, monkeypatch):
    """Where the model prices the direct kernel above DIRECT_MAX_SECONDS, auto waits."""
    monkeypatch.setattr(execute, "DIRECT_MAX_SECONDS", 0.0)
    K = ks.KSMatrix.random(PATTERN, dtype=numpy.float32, xp=cupy, seed=4)
    X = cupy.asarray(random_array(rng, (K.shape[1], BATCH), numpy.float32))
    # a close call (rivals priced within decide.band) compiles every rival to time
    # them
    problem = problem_of(K.factor, X, "bsl")
    rivals = decide.close_call(problem, device.current()) or (decide.choose(problem),)
    check(K @ X, oracle(K.values, X, "bsl"), numpy.float32)
    expected = set().union(*(CHOSEN_FILES.get(r.backend, set()) for r in rivals))
    assert _files_loaded() == expected, (rivals, _files_loaded())
    # (the KSMatrix asked for the direct kernel ahead; nothing else went to the background)
    assert {key[0] for key in nvrtc._pending} <= {"ks_direct.cu"}


def test_fresh_processes_answer_and_exit_cleanly(tmp_path):
    """Empty caches, background on: the products are right, and the process waits at exit
    for the compiles it started (they land in the disk cache). A second process on the same
    cache loads the kernels in the calling thread: nothing goes to the background."""
    code = ("import sys, numpy, cupy, kscupy as ks; from kscupy.kernels import nvrtc; "
            f"K = ks.KSMatrix.random({PATTERN}, dtype=numpy.float32, xp=cupy, seed=5); "
            f"X = cupy.random.default_rng(0).standard_normal((K.shape[1], {BATCH}), dtype=numpy.float32); "
            "D = K.todense().get().astype(numpy.float64); "
            "ref = D @ X.get().astype(numpy.float64); "
            "Y = (K @ X).get(); err = numpy.linalg.norm(Y - ref) / numpy.linalg.norm(ref); "
            "assert err < 1e-5, err; "
            "assert bool(nvrtc._pending) == (sys.argv[1] == 'empty'), nvrtc._pending; "
            # a second product: where auto times a close call, it compiles the rivals,
            # which the warm process then loads too
            "nvrtc.finish_background_compiles(); Y = (K @ X).get(); "
            "assert numpy.linalg.norm(Y - ref) / numpy.linalg.norm(ref) < 1e-5; "
            "print('ok')")
    env = dict(os.environ, KSCUPY_BACKGROUND_COMPILE="1", CUPY_CACHE_DIR=str(tmp_path / "cupy"),
               KSCUPY_CACHE_DIR=str(tmp_path / "kscupy"))
    for cache in ("empty", "warm"):
        out = subprocess.run([sys.executable, "-c", code, cache], capture_output=True,
                             text=True, env=env, timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "ok", (cache, out.stderr)
        assert len(list((tmp_path / "cupy").glob("*.cubin"))) >= 2   # direct and the kernel


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128],
                         ids=lambda t: numpy.dtype(t).name)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("B", [1, 3, 1000])
def test_direct_plan_folds_the_chain_permutations(poisoned, rng, dtype, layout, B):
    """steps.direct_plan: the chain's input gather in the first factor's reads, its output
    gather (as a scatter) in the last factor's writes, against the chain's float64 oracle."""
    from conftest import chain_oracle, gpu_chain
    patterns = [(2, 3, 5, 4), (1, 10, 6, 4), (3, 4, 2, 2)]      # 24 x 40, 40 x 24, 24 x 12
    n_out, n_in = 24, 12
    perms = {"output_permutation": cupy.asarray(rng.permutation(n_out)),
             "input_permutation": cupy.asarray(rng.permutation(n_in))}
    for given in ({}, perms, {"input_permutation": perms["input_permutation"]}):
        chain = gpu_chain(patterns, dtype, seed=7, **given)
        X = cupy.asarray(random_array(rng, (n_in, B) if layout == "bsl" else (B, n_in), dtype))
        Y = steps.direct_plan(chain.factor_chain).prepare(X, layout)(X)
        D = chain_oracle(chain)
        ref = D @ cupy.asnumpy(X) if layout == "bsl" else cupy.asnumpy(X) @ D.T
        err = numpy.linalg.norm(cupy.asnumpy(Y) - ref) / numpy.linalg.norm(ref)
        assert Y.dtype == dtype and err < (1e-5 if dtype == numpy.float32 else 1e-12), err
