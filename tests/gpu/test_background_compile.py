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
from kscupy import costs, tuning  # noqa: E402
from kscupy.kernels import nvrtc  # noqa: E402
from kscupy.problem import problem_of  # noqa: E402
from test_kernel import check, oracle  # noqa: E402

#: A pattern and batch that auto runs on a kernel in both layouts (B = 64: the tensor-core
#: kernel in bsl, the small-batch kernel in bsf on an H200).
PATTERN, BATCH = (16, 64, 64, 4), 64


@pytest.fixture
def gate(monkeypatch):
    """Background compiles on, this process's kernels forgotten (so every one is missing),
    and each background compile held until the returned event is set."""
    monkeypatch.setattr(nvrtc, "BACKGROUND", True)
    monkeypatch.setattr(nvrtc, "_functions", {})
    monkeypatch.setattr(nvrtc, "_pending", {})
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
def test_direct_kernel_answers_until_the_chosen_one_is_compiled(poisoned, gate, rng, dtype,
                                                                 layout):
    K = ks.KSMatrix.random(PATTERN, dtype=dtype, xp=cupy, seed=3)
    M, N = K.shape
    X = cupy.asarray(random_array(rng, (N, BATCH) if layout == "bsl" else (BATCH, N), dtype))
    choice = tuning.choose(problem_of(K.factor, X, layout))
    assert choice.backend in ("kernel", "kernel_fma", "kernel_skinny"), choice
    ref = oracle(K.values, X, layout)
    for _ in range(2):                    # the first call, and one while it still compiles
        check(K.matmul(X, layout=layout), ref, dtype)
        assert _files_loaded() == {"ks_direct.cu"}
    gate.set()
    nvrtc.finish_background_compiles()
    check(K.matmul(X, layout=layout), ref, dtype)
    assert len(_files_loaded() - {"ks_direct.cu"}) == 1        # the chosen kernel's file
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
    monkeypatch.setattr(costs, "DIRECT_MAX_SECONDS", 0.0)
    K = ks.KSMatrix.random(PATTERN, dtype=numpy.float32, xp=cupy, seed=4)
    X = cupy.asarray(random_array(rng, (K.shape[1], BATCH), numpy.float32))
    check(K @ X, oracle(K.values, X, "bsl"), numpy.float32)
    assert "ks_direct.cu" not in _files_loaded() and nvrtc._pending == {}


def test_a_fresh_process_answers_and_exits_cleanly(tmp_path):
    """Empty caches, background on: the products are right, and the process waits at exit
    for the compiles it started (they land in the disk cache)."""
    code = ("import numpy, cupy, kscupy as ks; from kscupy.kernels import nvrtc; "
            f"K = ks.KSMatrix.random({PATTERN}, dtype=numpy.float32, xp=cupy, seed=5); "
            f"X = cupy.random.default_rng(0).standard_normal((K.shape[1], {BATCH}), dtype=numpy.float32); "
            "D = K.todense().get().astype(numpy.float64); "
            "ref = D @ X.get().astype(numpy.float64); "
            "Y = (K @ X).get(); err = numpy.linalg.norm(Y - ref) / numpy.linalg.norm(ref); "
            "assert err < 1e-5, err; assert nvrtc._pending, 'nothing compiled in the background'; "
            "print('ok')")
    env = dict(os.environ, KSCUPY_BACKGROUND_COMPILE="1", CUPY_CACHE_DIR=str(tmp_path / "cupy"),
               KSCUPY_CACHE_DIR=str(tmp_path / "kscupy"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert len(list((tmp_path / "cupy").glob("*.cubin"))) >= 2     # direct and the kernel
