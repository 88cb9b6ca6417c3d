"""Declared structure (kscupy/structure.py): what the factories declare, and that it is
checked against the values, never trusted. Oracles are the definitions: the DFT matrix
exp(-2 pi i k j / n) and scipy's Hadamard matrix."""
import pickle

import numpy
import pytest
import scipy.linalg

import kscupy as ks
from kscupy.kernels import ks_rows


def _stage_oracle(pattern, sign, twiddled, scale):
    """Canonical values of a DFT stage straight from the formula, loop by loop."""
    a, r, _, d = pattern
    w = numpy.zeros((a, r, r, d), dtype=numpy.complex128)
    for i in range(a):
        for k in range(r):
            for l_ in range(r):
                for j in range(d):
                    phase = k * l_ / r + (l_ * j / (r * d) if twiddled else 0.0)
                    w[i, k, l_, j] = scale * numpy.exp(sign * 2j * numpy.pi * phase)
    return w


@pytest.mark.parametrize("pattern", [(1, 2, 2, 4), (3, 2, 2, 1), (2, 3, 3, 5), (1, 4, 4, 2)])
@pytest.mark.parametrize("sign, twiddled, scale", [(-1, True, 1.0), (1, True, 0.25),
                                                   (-1, False, 0.5)])
def test_stage_values_are_the_formula(pattern, sign, twiddled, scale):
    got = ks.DFTStage(sign, twiddled, scale).values(pattern)
    assert numpy.abs(got - _stage_oracle(pattern, sign, twiddled, scale)).max() < 1e-14


def test_stage_twiddles():
    t = ks.DFTStage(-1).twiddles(8)
    assert numpy.abs(t - numpy.exp(-1j * numpy.pi * numpy.arange(8) / 8)).max() < 1e-15
    assert numpy.abs(ks.DFTStage(1).twiddles(8, conjugated=True) - t).max() < 1e-15


@pytest.mark.parametrize("n", [8, 96, 1024])
@pytest.mark.parametrize("dtype", [numpy.complex64, numpy.complex128])
@pytest.mark.parametrize("inverse, norm", [(False, None), (True, None), (False, "ortho")])
def test_dft_declares_its_stages(n, dtype, inverse, norm):
    F = ks.dft(n, dtype=dtype, norm=norm, inverse=inverse)
    for K in F.factors:
        st = K.structure
        assert isinstance(st, ks.DFTStage) and st.twiddled and st.sign == (1 if inverse else -1)
    scales = numpy.prod([K.structure.scale for K in F.factors])
    expected = {(False, None): 1.0, (True, None): 1 / n, (False, "ortho"): n ** -0.5}
    assert scales == pytest.approx(expected[(inverse, norm)])
    # the chain is still the DFT
    k = numpy.arange(n)
    W = numpy.exp((1 if inverse else -1) * 2j * numpy.pi * numpy.outer(k, k) / n)
    tol = 1e-5 if dtype == numpy.complex64 else 1e-12
    assert numpy.abs(F.todense() - W * expected[(inverse, norm)]).max() < tol


@pytest.mark.parametrize("dtype", [numpy.float16, numpy.float32, numpy.float64, numpy.complex64])
@pytest.mark.parametrize("normalized", [False, True])
def test_hadamard_declares_its_stages(dtype, normalized):
    H = ks.hadamard(32, normalized=normalized, dtype=dtype)
    for K in H.factors:
        st = K.structure
        assert (st.sign, st.twiddled) == (-1, False)
        assert st.scale == pytest.approx(2 ** -0.5 if normalized else 1.0, rel=1e-15)
    ref = scipy.linalg.hadamard(32) / (32 ** 0.5 if normalized else 1)
    assert numpy.abs(H.todense() - ref).max() < 3e-3


def test_random_values_have_no_structure():
    K = ks.KSMatrix.random((4, 2, 2, 8), dtype=numpy.complex64, seed=0)
    assert K.structure is None
    assert ks_rows.stage_of(K.factor) == (ks_rows.STORED, False)


def test_a_declared_structure_is_checked():
    values = ks.DFTStage(-1).values((2, 2, 2, 4))
    K = ks.KSMatrix(values.copy(), structure=ks.DFTStage(-1))
    assert K.structure == ks.DFTStage(-1)
    for wrong in (ks.DFTStage(1), ks.DFTStage(-1, twiddled=False), ks.DFTStage(-1, scale=2.0)):
        with pytest.raises(ValueError, match="do not have the declared structure"):
            ks.KSMatrix(values.copy(), structure=wrong)
    off = values.copy()
    off[1, 0, 1, 3] *= 1 + 1e-6             # one entry off by far more than rounding
    with pytest.raises(ValueError, match="do not have the declared structure"):
        ks.KSMatrix(off, structure=ks.DFTStage(-1))
    # a twiddled stage with d > 1 has complex values: real ones never match it
    with pytest.raises(ValueError):
        ks.KSMatrix(values.real.copy(), structure=ks.DFTStage(-1))


def test_the_check_holds_without_ml_dtypes(monkeypatch):
    """Without the bfloat16 extra, float64 values are checked at float64's rounding (NumPy
    reads ``dtype == None`` as float64: kscupy must not compare with the missing dtype)."""
    from kscupy.core import arrays
    monkeypatch.setattr(arrays, "BFLOAT16", None)
    assert arrays.epsilon(numpy.complex128) == numpy.finfo(numpy.float64).eps
    assert not arrays.is_bfloat16(numpy.float64)
    values = ks.DFTStage(-1).values((2, 2, 2, 4))
    off = values.copy()
    off[1, 0, 1, 3] *= 1.02
    with pytest.raises(ValueError, match="do not have the declared structure"):
        ks.KSMatrix(off, structure=ks.DFTStage(-1))


def test_a_write_is_checked_again():
    F = ks.dft(16, dtype=numpy.complex64)
    K = F.factors[1]
    assert K.structure is not None and K.T.structure is not None
    w = K.values.copy()
    w[0, 1, 1, 0] += 0.5
    K.values = w
    assert K.structure is None and K.H.structure is None      # views share the verdict
    assert ks_rows.stage_of(K.factor) == (ks_rows.STORED, False)
    K.values = ks.DFTStage(-1).values(tuple(K.pattern)).astype(numpy.complex64)
    assert K.structure == ks.DFTStage(-1)                    # the values hold it again


def test_structure_survives_copies_and_conversions():
    K = ks.dft(32, dtype=numpy.complex128).factors[2]
    assert pickle.loads(pickle.dumps(K)).structure == K.structure
    assert K.astype(numpy.complex64).structure == K.structure
    assert K.factor.in_dtype(numpy.complex64).structure == K.structure
    assert K.T.structure == K.structure and K.conj().structure == K.structure


def test_stage_twiddles_follow_the_view():
    K = ks.dft(16, dtype=numpy.complex64).factors[0]           # (1, 2, 2, 8)
    t = numpy.exp(-1j * numpy.pi * numpy.arange(8) / 8)
    assert numpy.abs(K.factor.stage_twiddles() - t).max() < 1e-7
    assert numpy.abs(K.H.factor.stage_twiddles() - t.conj()).max() < 1e-7
    assert K.factor.stage_twiddles().dtype == numpy.complex64
    with pytest.raises(ValueError):
        ks.hadamard(4).factors[0].factor.stage_twiddles()        # untwiddled


def test_group_passes_counts_computed_weights():
    """A pass's registers: its E elements, stored blocks E·r values per factor, a twiddled
    stage d/DLO twiddles (complex: 2 registers each), plus the overhead."""
    pats = [ks.KSPattern(2**(9 - l), 2, 2, 2**l) for l in range(10)]   # DFT(1024), applied
    stored = [(ks_rows.STORED, False)] * 10
    twiddled = [(ks_rows.HADAMARD_STAGE, False)] + [(ks_rows.TWIDDLED_STAGE, False)] * 9
    over = ks_rows.REGISTER_OVERHEAD
    assert ks_rows.pass_registers([(2, 1, twiddled[0]), (2, 2, twiddled[1])], 2) == \
        2 * (4 + 0 + 2) + over
    assert ks_rows.pass_registers([(2, 4, stored[0]), (2, 8, stored[0])], 2) == \
        2 * (4 + 4 * 2 + 4 * 2) + over
    # E = 4 stored (2·(4 + 16) registers) fits 42 + overhead, E = 8 (2·(8 + 48)) does not
    assert ks_rows.group_passes(pats, 16, 40 + over, stored, 2) == (2, 2, 2, 2, 2)
    # twiddled: pass d = 1..8 needs 2·(16 + 0+2+4+8), d = 16..128 2·(16 + 1+2+4+8)
    assert ks_rows.group_passes(pats, 16, 62 + over, twiddled, 2) == (4, 4, 2)
    assert ks_rows.group_passes(pats, 16, 30 + over, twiddled, 2) == (3, 3, 3, 1)
