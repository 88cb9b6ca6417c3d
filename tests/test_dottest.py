"""kscupy.testing.dottest on every operator kind, backend and layout (NumPy; CuPy as `gpu`),
and on deliberately wrong adjoints, where it must fail."""
import numpy
import pytest

import kscupy as ks
from conftest import gpu_available, GPU_REASON
from operator_kinds import KIND_NAMES, operator_kinds

CPU_BACKENDS = ["bmm", "einsum", "dense", "sparse", "auto"]
BACKEND_PARAMS = ([pytest.param("numpy", b, id=f"numpy-{b}") for b in CPU_BACKENDS]
                  + [pytest.param("cupy", b, id=f"cupy-{b}", marks=pytest.mark.gpu)
                     for b in CPU_BACKENDS + ["kernel", "kernel_fma"]])


@pytest.mark.parametrize("module, backend", BACKEND_PARAMS)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
@pytest.mark.parametrize("kind", KIND_NAMES)
def test_dottest_passes(rng, module, backend, layout, dtype, kind):
    if module == "cupy" and not gpu_available():
        pytest.skip(GPU_REASON)
    xp = numpy if module == "numpy" else pytest.importorskip("cupy")
    op = operator_kinds(xp, rng, dtype)[kind]
    assert ks.testing.dottest(op, layout=layout, backend=backend, seed=int(rng.integers(2**31)))


class DenseOperator:
    """A dense matrix posing as a kscupy operator, with an adjoint we choose."""

    def __init__(self, D, adjoint):
        self.D, self._adjoint = D, adjoint
        self.shape, self.dtype = D.shape, D.dtype

    @property
    def H(self):
        return DenseOperator(self._adjoint, self.D)

    def matmul(self, X, *, layout="bsl", backend="auto"):
        return self.D @ X if layout == "bsl" else X @ self.D.T


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_dottest_fails_for_a_wrong_adjoint(rng, layout):
    D = rng.standard_normal((6, 4)) + 1j * rng.standard_normal((6, 4))
    assert ks.testing.dottest(DenseOperator(D, D.conj().T), layout=layout, seed=1)
    with pytest.raises(AssertionError, match=r"dot test failed.*difference"):
        ks.testing.dottest(DenseOperator(D, D.T), layout=layout, seed=1)   # conjugate missing
    real = D.real.astype(numpy.float32)
    perturbed = real.T.copy()
    perturbed[0, 0] += 0.5
    with pytest.raises(AssertionError, match="dot test failed"):
        ks.testing.dottest(DenseOperator(real, perturbed), layout=layout, seed=2)


def test_dottest_rejects_bad_input(rng):
    D = rng.standard_normal((6, 4))
    with pytest.raises(ValueError, match="layout"):
        ks.testing.dottest(DenseOperator(D, D.T), layout="rows")
    with pytest.raises(AssertionError, match="maps"):
        ks.testing.dottest(DenseOperator(D, D.T[:3]))      # adjoint of the wrong shape
