"""The prepared runs an operator keeps on the GPU (kscupy.engine.runs), driven on the CPU
with NumPy arrays that carry CuPy's ``data.ptr``: a repeated product reuses its run until
the decisions, the compiled kernels or the values change."""
import gc
import types
import weakref

import numpy

import kscupy as ks
from kscupy.engine import decide
from kscupy.engine.runs import MAX_PREPARED_RUNS, PreparedRuns
from kscupy.kernels.launcher import KernelRun
from kscupy.kernels import nvrtc


class _Array(numpy.ndarray):
    """A NumPy array with CuPy's ``data.ptr``."""
    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _runs(target):
    """The runs of ``target`` on device 0, outside any graph capture."""
    return PreparedRuns(target, lambda: 0, lambda: False)


def _operand(shape=(3, 5)):
    return numpy.zeros(shape, numpy.float32).view(_Array)


def _counting():
    """``prepare(X, layout, backend)`` whose runs return their preparation's number."""
    count = []

    def prepare(X, layout, backend):
        count.append(1)
        number = len(count)
        return lambda X: number
    return prepare


def _product(runs, X, layout, backend, prepare):
    """What KSOperator.matmul does with an operator's runs."""
    run = runs.get(X, layout, backend)
    if run is None:
        valid_for = runs.stamp()
        run = runs.keep(X, layout, backend, prepare(X, layout, backend), valid_for)
    return run(X)


def test_a_repeated_product_reuses_its_run_until_what_it_was_built_on_changes(monkeypatch):
    K = ks.KSMatrix.random((1, 3, 3, 1), dtype=numpy.float32, seed=0)
    runs, prepare, X = _runs(K.factor), _counting(), _operand()

    def product(X=X, layout="bsl", backend="auto"):
        return _product(runs, X, layout, backend, prepare)
    assert product() == 1 and product() == 1
    decide.expire_prepared_runs()                       # a verdict, warmup's expiry
    assert product() == 2 == product()
    monkeypatch.setattr(nvrtc, "compiles_finished", nvrtc.compiles_finished + 1)
    assert product() == 3                               # a kernel compiled since
    K.values = K.values * 2                             # new values
    assert product() == 4
    assert product(X.T, "bsf") == 5                     # another operand or layout ...
    assert product(backend="kernel") == 6               # ... or backend: a run of its own
    assert product() == 4


def test_a_close_call_settled_while_preparing_leaves_its_run_current():
    """A verdict against the model (decide.settle, inside the preparation) expires what was
    built before it, not the run that holds the verdict: the next product reuses it (one
    captured in a CUDA graph could not prepare again)."""
    K = ks.KSMatrix.random((1, 3, 3, 1), dtype=numpy.float32, seed=0)
    runs, counting, X = _runs(K.factor), _counting(), _operand()

    def settling(X, layout, backend):
        run = counting(X, layout, backend)
        decide.expire_prepared_runs()                   # what settle does on such a verdict
        return run
    assert _product(runs, X, "bsl", "auto", settling) == 1
    assert _product(runs, X, "bsl", "auto", settling) == 1


def test_while_a_graph_is_captured_a_run_stale_only_by_kernels_or_decisions_is_run(
        monkeypatch):
    """Nothing can be prepared inside a CUDA graph capture: a run kept before a kernel
    finished compiling or a decision changed computes the same product and is run there;
    one kept before its values were written is not (it holds the old values)."""
    K = ks.KSMatrix.random((1, 3, 3, 1), dtype=numpy.float32, seed=0)
    capturing = [False]
    runs = PreparedRuns(K.factor, lambda: 0, lambda: capturing[0])
    prepare, X = _counting(), _operand()

    def product():
        return _product(runs, X, "bsl", "auto", prepare)
    assert product() == 1
    monkeypatch.setattr(nvrtc, "compiles_finished", nvrtc.compiles_finished + 1)
    decide.expire_prepared_runs()
    capturing[0] = True
    assert product() == 1 == product()                  # stale, but the same values
    capturing[0] = False
    assert product() == 2                               # prepared anew outside a capture
    K.values = K.values * 2
    capturing[0] = True
    assert product() == 3                               # (the product refuses in a capture)


def test_a_replaced_run_lives_as_long_as_the_operator(monkeypatch):
    """A run replaced under its key (a kernel compiled since) is not dropped: a CUDA graph
    captured with it may still read what it alone holds."""
    K = ks.KSMatrix.random((1, 3, 3, 1), dtype=numpy.float32, seed=0)
    runs, X = _runs(K.factor), _operand()

    def run(X):
        return 1
    runs.keep(X, "bsl", "auto", run, runs.stamp())
    first = weakref.ref(run)
    del run
    monkeypatch.setattr(nvrtc, "compiles_finished", nvrtc.compiles_finished + 1)
    assert runs.get(X, "bsl", "auto") is None
    runs.keep(X, "bsl", "auto", lambda X: 2, runs.stamp())
    gc.collect()
    assert first() is not None and runs.get(X, "bsl", "auto")(X) == 2


def test_a_chains_runs_watch_every_factor():
    C = ks.KSChain([ks.KSMatrix.random((1, 3, 3, 1), seed=1),
                    ks.KSMatrix.random((1, 3, 3, 1), seed=2)])
    runs, prepare, X = _runs(C.factor_chain), _counting(), _operand()
    assert _product(runs, X, "bsl", "auto", prepare) == 1
    C.factors[1].values = C.factors[1].values + 1
    assert _product(runs, X, "bsl", "auto", prepare) == 2


def test_runs_are_bounded():
    K = ks.KSMatrix.random((1, 3, 3, 1), seed=0)
    runs, prepare = _runs(K.factor), _counting()
    for batch in range(1, MAX_PREPARED_RUNS + 2):
        _product(runs, _operand((3, batch)), "bsl", "auto", prepare)
    assert len(runs) <= MAX_PREPARED_RUNS


def _kernel_run(dtype=numpy.float32):
    """A KernelRun made without CuPy (its constructor imports CuPy)."""
    run = KernelRun.__new__(KernelRun)
    run.launch, run.y_shape, run.dtype, run.kept = (lambda x, y: None), (3, 5), \
        numpy.dtype(dtype), ()
    return run


def test_a_kernel_run_is_found_by_an_operands_description():
    """What a PyTorch tensor's repeated product looks up (foreign.tensor_product): the run
    kept for a CuPy operand of that shape, strides, dtype, alignment, layout, backend and
    device, where it is current, launches on pointers and has the operand's dtype."""
    K = ks.KSMatrix.random((1, 3, 3, 1), dtype=numpy.float32, seed=0)
    runs, X = _runs(K.factor), _operand()
    described = (X.shape, X.strides, X.dtype, X.data.ptr, "bsl", "auto", 0)
    assert runs.kernel_run(*described) is None
    run = _kernel_run()
    runs.keep(X, "bsl", "auto", run, runs.stamp())
    assert runs.kernel_run(*described) is run
    moved = described[:3] + (X.data.ptr + 4,) + described[4:]       # another alignment
    assert runs.kernel_run(*moved) is None
    for at, other in ((1, X.T.strides), (2, numpy.dtype(numpy.float64)), (4, "bsf"),
                      (5, "kernel"), (6, 1)):
        assert runs.kernel_run(*described[:at], other, *described[at + 1:]) is None
    decide.expire_prepared_runs()                                   # stale
    assert runs.kernel_run(*described) is None
    runs.keep(X, "bsl", "auto", lambda X: None, runs.stamp())       # not a launch on pointers
    assert runs.kernel_run(*described) is None
    runs.keep(X, "bsl", "auto", _kernel_run(numpy.float64), runs.stamp())    # converts
    assert runs.kernel_run(*described) is None
