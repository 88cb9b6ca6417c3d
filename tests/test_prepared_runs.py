"""KSOperator.matmul's cache of prepared runs (a GPU path), driven on the CPU through a
stand-in array module whose arrays are NumPy's."""
import types

import numpy

from kscupy import operator, tuning
from kscupy.kernels import nvrtc


class _Array(numpy.ndarray):
    """A NumPy array with CuPy's ``data.ptr``."""
    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


_XP = types.SimpleNamespace(ndarray=_Array,
                            cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
                                getDevice=lambda: 0)))


class _Counting(operator.KSOperator):
    """An operator on the stand-in module whose preparations are counted; each prepared
    run returns its preparation's number."""
    shape = (3, 3)
    dtype = numpy.dtype(numpy.float32)
    _xp = _XP

    def __init__(self):
        self.prepared, self.runs = 0, {}

    def _prepared_runs(self):
        return self.runs

    def _prepare(self, X, layout, backend):
        self.prepared += 1
        number = self.prepared
        return lambda X: number


def _operand():
    return numpy.zeros((3, 5), numpy.float32).view(_Array)


def test_a_repeated_product_reuses_its_run_until_the_decisions_change(monkeypatch):
    op, X = _Counting(), _operand()
    assert op.matmul(X) == 1 and op.matmul(X) == 1
    tuning.expire_prepared_runs()                       # a verdict, warmup's expiry
    assert op.matmul(X) == 2 and op.matmul(X) == 2
    monkeypatch.setattr(nvrtc, "compiles_finished", nvrtc.compiles_finished + 1)
    assert op.matmul(X) == 3
    assert len(op.runs) == 1                            # the stale runs are not kept
    assert op.matmul(X.T, layout="bsf") == 4 and len(op.runs) == 2
