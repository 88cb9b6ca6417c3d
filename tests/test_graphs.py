"""Products captured in CUDA graphs (CuPy's stream capture) and replayed with new data in
the same buffers, against a float64 oracle from the definition; a product not prepared
before the capture is refused with the fix named."""
import os
import subprocess
import sys

import numpy
import pytest

import kscupy as ks
from conftest import GPU_REASON, dense_oracle, gpu_available, random_array, rel_err, to_numpy
from operator_kinds import operator_oracle

pytestmark = pytest.mark.gpu


@pytest.fixture
def cupy():
    if not gpu_available():
        pytest.skip(GPU_REASON)
    import cupy
    return cupy


def _operators(cupy):
    return {"matrix": ks.KSMatrix.random((4, 16, 16, 4), dtype=numpy.float32, xp=cupy, seed=1),
            "chain": ks.butterfly(256, dtype=numpy.float32, xp=cupy, seed=2),
            "dft": ks.dft(1024, dtype=numpy.complex64, xp=cupy)}


@pytest.mark.parametrize("name", ["matrix", "chain", "dft"])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_a_captured_product_and_axpy_replay_with_new_data(cupy, rng, name, layout):
    op = _operators(cupy)[name]
    M, N = op.shape
    B = 64
    shape = (N, B) if layout == "bsl" else (B, N)
    X = cupy.asarray(random_array(rng, shape, op.dtype))
    Z = cupy.asarray(random_array(rng, (M, B) if layout == "bsl" else (B, M), op.dtype))
    op.matmul(X, layout=layout)                 # prepared before the capture
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        2.0 * op.matmul(X, layout=layout) + Z   # ... and on the capturing stream, with the
        stream.synchronize()                    # axpy's CuPy kernel compiled and pooled
        stream.begin_capture()
        try:
            Y = op.matmul(X, layout=layout)
            out = 2.0 * Y + Z                   # an axpy after the product
        finally:
            graph = stream.end_capture()
    D = operator_oracle(op)
    _replay_with_new_data(cupy, rng, graph, stream, X, out,
                          lambda x: 2 * (D @ x if layout == "bsl" else x @ D.T) + to_numpy(Z))


def _replay_with_new_data(cupy, rng, graph, stream, X, out, oracle, replays=100, tol=1e-4):
    """Write new data into ``X`` and replay ``graph`` ``replays`` times, each result against
    ``oracle(x)``. The data is written on the graph's stream: a copy on another stream
    would race the replay."""
    for _ in range(replays):
        x = random_array(rng, X.shape, X.dtype)
        with stream:
            X[...] = cupy.asarray(x)
        graph.launch(stream)
        stream.synchronize()
        assert rel_err(out, oracle(x)) < tol


@pytest.mark.parametrize("backend", ["bmm", "block_dense", "dense"])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_cublas_backends_are_captured(cupy, rng, backend, layout):
    """cuBLAS's products (which CuPy's own bindings refuse to call during a capture) replay
    with new data."""
    op = ks.KSMatrix.random((3, 16, 8, 2), dtype=numpy.float32, xp=cupy, seed=4)
    M, N = op.shape
    X = cupy.asarray(random_array(rng, (N, 33) if layout == "bsl" else (33, N), op.dtype))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        op.matmul(X, layout=layout, backend=backend)
        stream.synchronize()
        stream.begin_capture()
        try:
            out = op.matmul(X, layout=layout, backend=backend)
        finally:
            graph = stream.end_capture()
    D = operator_oracle(op)
    _replay_with_new_data(cupy, rng, graph, stream, X, out,
                          lambda x: D @ x if layout == "bsl" else x @ D.T, replays=20)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_a_values_gradient_is_captured(cupy, rng, layout):
    """values_grad (cuBLAS's batched GEMMs, a transpose in bsf with d > 1, the sum of the
    batch's chunks) replays with a new operand."""
    K = ks.KSMatrix.random((2, 8, 4, 2), dtype=numpy.float32, xp=cupy, seed=5)
    M, N = K.shape
    B = 5000
    X = cupy.asarray(random_array(rng, (N, B) if layout == "bsl" else (B, N), K.dtype))
    G = cupy.asarray(random_array(rng, (M, B) if layout == "bsl" else (B, M), K.dtype))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        ks.values_grad(K, X, G, layout=layout)
        stream.synchronize()
        stream.begin_capture()
        try:
            out = ks.values_grad(K, X, G, layout=layout)
        finally:
            graph = stream.end_capture()
    g = to_numpy(G).astype(numpy.float64)
    if layout == "bsf":
        g = g.T

    def oracle(x):
        x = x.astype(numpy.float64).T if layout == "bsf" else x.astype(numpy.float64)
        return numpy.einsum("ikjn,iljn->iklj", g.reshape(2, 8, 2, B), x.reshape(2, 4, 2, B))
    _replay_with_new_data(cupy, rng, graph, stream, X, out, oracle, replays=10, tol=1e-5)


@pytest.mark.parametrize("name", ["bsf transposes", "chain", "dct"])
def test_the_memory_a_captured_product_allocates_stays_the_graphs(cupy, rng, name):
    """A captured product's copies and intermediates (bmm's transposes in bsf with d > 1, a
    chain's intermediates, the DCT's complex operand and product, from an operator that
    keeps no runs of its own) are not handed to arrays allocated after the capture: those
    keep their values through the replays, and each result is right;
    release_captured_memory lets go of them."""
    from kscupy.core import captured
    if name == "chain":
        op, backend, layout = ks.butterfly(256, dtype=numpy.float32, xp=cupy, seed=8), \
            "kernel", "bsl"             # factor by factor: seven intermediates
    elif name == "dct":
        op, backend, layout = ks.dct(64, dtype=numpy.float32, xp=cupy), "auto", "bsl"
    else:
        op, backend, layout = ks.KSMatrix.random((2, 16, 8, 3), dtype=numpy.float32, xp=cupy,
                                                 seed=9), "bmm", "bsf"
    M, N = op.shape
    X = cupy.asarray(random_array(rng, (N, 40) if layout == "bsl" else (40, N), op.dtype))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        op.matmul(X, layout=layout, backend=backend)
        stream.synchronize()
        held = captured.held_blocks()
        stream.begin_capture()
        try:
            Y = op.matmul(X, layout=layout, backend=backend)
        finally:
            graph = stream.end_capture()
        assert captured.held_blocks() > held
        # arrays of the operand's and the result's sizes, where the pool would put them
        others = [cupy.full(size, 7.0, numpy.float32) for size in (X.size, Y.size) * 8]
        stream.synchronize()
    D = operator_oracle(op)
    try:
        _replay_with_new_data(cupy, rng, graph, stream, X, Y,
                              lambda x: D @ x if layout == "bsl" else x @ D.T, replays=5)
        for other in others:
            assert bool((other == 7.0).all())
    finally:
        ks.release_captured_memory()
    assert captured.held_blocks() == 0


def test_new_values_inside_a_capture_are_refused_and_the_capture_stays_valid(cupy, rng):
    """A KSMatrix made, or values written, while a graph is captured: RuntimeError naming
    the fix, before anything is queued, so that the product captured after still replays."""
    op = ks.KSMatrix.random((2, 8, 8, 2), dtype=numpy.float32, xp=cupy, seed=10)
    w = cupy.asarray(random_array(rng, (2, 8, 8, 2), numpy.float32))
    X = cupy.asarray(random_array(rng, (op.shape[1], 7), numpy.float32))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        op @ X
        stream.synchronize()
        stream.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="before capturing"):
                ks.KSMatrix(w)
            with pytest.raises(RuntimeError, match="before capturing"):
                op.values = w
            Y = op @ X
        finally:
            graph = stream.end_capture()
    D = operator_oracle(op)
    _replay_with_new_data(cupy, rng, graph, stream, X, Y, lambda x: D @ x, replays=3)


def test_a_product_not_prepared_before_capture_is_refused(cupy, rng):
    op = ks.KSMatrix.random((2, 8, 8, 2), dtype=numpy.float32, xp=cupy, seed=3)
    X = cupy.asarray(random_array(rng, (op.shape[1], 7), numpy.float32))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="Run the product once before capturing"):
                op @ X
        finally:
            stream.end_capture()
    assert rel_err(op @ X, operator_oracle(op) @ to_numpy(X)) < 1e-5   # usable after


#: Run in a fresh process (a CuPy cache of its own, so that the kernel compiled below is not
#: on disk yet): a product captured in CUDA's global mode (PyTorch's default) while a
#: background compile runs, and loads its module, in another thread, then the same product
#: again (where the compile finished meanwhile, its kept run is stale by a kernel compiled
#: since, and is what a capture can run). Saves what the replay computed to argv[1].
CAPTURED_WHILE_COMPILING = """
import sys, time, numpy, cupy, kscupy as ks
from kscupy.kernels import ks_direct, nvrtc
K = ks.KSMatrix.random((2, 8, 8, 2), dtype=numpy.float32, xp=cupy, seed=6)
X = cupy.asarray(numpy.random.default_rng(7).standard_normal((K.shape[1], 5), numpy.float32))
stream = cupy.cuda.Stream(non_blocking=True)
with stream:
    warm = [K.matmul(X, backend="dense") for _ in range(2)]  # two results' blocks pooled
    del warm
    stream.synchronize()
    stream.begin_capture(mode=cupy.cuda.runtime.streamCaptureModeGlobal)
    try:
        Y = K.matmul(X, backend="dense")
        finished = nvrtc.compiles_finished
        ks_direct.compile_ahead(numpy.complex128, X.device.id)      # not asked for before
        # (waited for with a bound: on the H100 an unbounded wait here sometimes never
        # ended, for a reason not found yet; where the bound passes, "during" says so.
        # The compile took more than 8 s on an H200 among 12 pytest workers)
        deadline = time.time() + 20
        while nvrtc.compiles_finished == finished and time.time() < deadline:
            time.sleep(0.005)
        during = nvrtc.compiles_finished != finished
        Z = K.matmul(X, backend="dense")
    finally:
        graph = stream.end_capture()
    Y.fill(numpy.nan)
    Z.fill(numpy.nan)
    graph.launch(stream)
    stream.synchronize()
numpy.savez(sys.argv[1], values=K.values.get(), X=X.get(), Y=Y.get(), Z=Z.get())
print("compiled during the capture:", during)
"""


def test_a_capture_survives_a_background_compile_finishing_meanwhile(cupy, tmp_path):
    """A compile running in the background during a user's capture neither invalidates it
    (the module loads in CUDA's relaxed capture mode) nor refuses the products captured
    after it (see CAPTURED_WHILE_COMPILING)."""
    env = dict(os.environ, CUPY_CACHE_DIR=str(tmp_path / "cupy"),
               KSCUPY_CACHE_DIR=str(tmp_path / "ks"))
    saved = tmp_path / "replayed.npz"
    done = subprocess.run([sys.executable, "-c", CAPTURED_WHILE_COMPILING, str(saved)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    replayed = numpy.load(saved)
    expected = dense_oracle(replayed["values"]) @ replayed["X"].astype(numpy.float64)
    assert rel_err(replayed["Y"], expected) < 1e-5
    assert rel_err(replayed["Z"], expected) < 1e-5
    if "compiled during the capture: True" not in done.stdout:
        pytest.skip("the background compile did not finish within the capture's wait: the "
                    "products replayed right, but what the test is for did not happen")
