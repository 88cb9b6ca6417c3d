"""kscupy.fit: planted chains recovered through every kind of target, a dense target
improved beyond factorize, the optimisers' stops, and clear errors for bad requests.
Errors are measured against the planted or dense target directly (never through fit)."""
import numpy
import pytest
import scipy.sparse.linalg

import kscupy as ks
from conftest import to_numpy


def relerr(C, D):
    C, D = to_numpy(C.todense()), to_numpy(D)
    return float(numpy.linalg.norm(C - D) / numpy.linalg.norm(D))


def gaussian_kernel(n, xp, seed=0):
    x = numpy.sort(numpy.random.default_rng(seed).uniform(0, 1, n))
    return xp.asarray(numpy.exp(-((x[:, None] - x[None, :]) ** 2) / (2 * 0.05 ** 2)))


@pytest.mark.parametrize("kind", ["function", "array", "operator", "linear_operator"])
def test_a_planted_chain_is_recovered_through_each_kind_of_target(xp, kind):
    planted = ks.butterfly(32, dtype=numpy.float64, xp=xp, seed=3)
    D = planted.todense()
    target = {"function": lambda P: planted @ P, "array": D, "operator": planted,
              "linear_operator": ks.aslinearoperator(planted)}[kind]
    result = ks.fit(target, "butterfly", shape=(32, 32), xp=xp, seed=4)
    assert relerr(result.chain, D) < 1e-10
    assert result.heldout_relerr < 1e-10 and result.start == "factorize"


@pytest.mark.parametrize("planted", ["butterfly", "monarch"])
def test_lbfgs_from_a_random_start_recovers_a_planted_chain(planted):
    C = ks.butterfly(16, dtype=numpy.float64, seed=5) if planted == "butterfly" \
        else ks.monarch(16, blocks=4, dtype=numpy.float64, seed=5)
    result = ks.fit(lambda P: C @ P, C.patterns, shape=C.shape, start="random", seed=6,
                    steps=4000)
    assert result.start == "random" and result.start_relerr > 0.5
    assert result.heldout_relerr < 1e-6, (result.stopped, result.steps)
    assert relerr(result.chain, C.todense()) < 1e-6


def test_fit_from_factorize_lowers_the_error_of_a_dense_target(xp):
    D = gaussian_kernel(128, xp)
    patterns = ks.butterfly(128).patterns
    before = relerr(ks.factorize(D, patterns), D)
    result = ks.fit(D, patterns, steps=200, seed=7)
    after = relerr(result.chain, D)
    assert result.start == "factorize"
    assert result.start_relerr == pytest.approx(before, rel=0.2)
    assert after < before * (1 - 1e-4), (before, after)
    assert result.history == sorted(result.history, reverse=True)   # L-BFGS descends


def test_adam_lowers_the_loss_and_complex_targets_fit(xp):
    planted = ks.monarch(16, blocks=4, dtype=numpy.complex128, xp=xp, seed=8)
    result = ks.fit(lambda P: planted @ P, planted.patterns, shape=(16, 16), xp=xp,
                    start="random", optimizer="adam", steps=300, lr=3e-2, seed=9)
    assert result.chain.dtype == numpy.complex128
    assert numpy.mean(result.history[-20:]) < 0.1 * numpy.mean(result.history[:20])


def test_stops_are_reported():
    planted = ks.butterfly(16, dtype=numpy.float64, seed=1)
    tol = ks.fit(planted, "butterfly", seed=1, start="random", tol=1e-3)
    assert tol.stopped == "tol" and tol.history[-1] <= 1e-3
    steps = ks.fit(planted, "butterfly", seed=1, start="random", steps=5, tol=0)
    assert steps.stopped == "steps" and steps.steps == 5
    patience = ks.fit(planted, "butterfly", seed=1, start="random", optimizer="adam",
                      lr=1e-9, patience=20, check_every=5, steps=1000, tol=0)
    assert patience.stopped == "patience" and patience.steps < 1000


def test_structured_factors_stay_fixed():
    """A DFT chain's stages are declared structured: fitting one is refused by name."""
    F = ks.dft(16, dtype=numpy.complex128)
    with pytest.raises(ValueError, match="nothing to fit"):
        ks.fit(F, F.patterns, start=F)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(target=lambda P: P, patterns="butterfly"), TypeError, "shape=\\(M, N\\)"),
    (dict(target="a", patterns="butterfly"), TypeError, "target must be"),
    (dict(target=numpy.eye(8), patterns="butterfly", optimizer="sgd"), ValueError, "optimizer"),
    (dict(target=numpy.eye(8), patterns="butterfly", start="ones"), ValueError, "start"),
    (dict(target=numpy.eye(8), patterns="butterfly", probes="all"), ValueError, "probes"),
    (dict(target=numpy.ones((2, 8, 8)), patterns="butterfly"), ValueError, "2-D"),
    (dict(target=lambda P: P[:4], patterns="butterfly", shape=(8, 8)), ValueError,
     "maps probes of shape"),
    (dict(target=numpy.eye(8), patterns=[(1, 2, 2, 2)]), ValueError,
     "give a chain of shape \\(4, 4\\), but the target has shape \\(8, 8\\)"),
])
def test_bad_requests_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        ks.fit(**kwargs)


def test_progress_bar_and_result_fields(capsys):
    pytest.importorskip("tqdm")
    result = ks.fit(numpy.eye(8), "butterfly", steps=3, progress=True, seed=0)
    assert result.seconds > 0 and len(result.history) == result.steps
    assert "fit" in capsys.readouterr().err


def _planted():
    return ks.butterfly(16, dtype=numpy.float64, seed=0)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(steps=0), ValueError, "steps"), (dict(steps=2.5), TypeError, "steps"),
    (dict(check_every=0), ValueError, "check_every"), (dict(heldout=0), ValueError, "heldout"),
    (dict(batch=0), ValueError, "batch"), (dict(patience=-1), ValueError, "patience"),
    (dict(lr=-1.0), ValueError, "lr"), (dict(tol=float("nan")), ValueError, "tol"),
    (dict(lr="big"), TypeError, "lr"), (dict(xp="numpy"), TypeError, "xp"),
    (dict(dtype=numpy.float16), TypeError, "float16"),
    (dict(shape=(3, 3)), ValueError, "shape is for function targets"),
    (dict(probes="identity", start="random"), None, None),
])
def test_numeric_and_module_arguments_are_checked(kwargs, error, match):
    if error is None:                                   # accepted: a small dense target
        assert ks.fit(_planted().todense(), "butterfly", steps=2, seed=0, **kwargs).steps == 2
        return
    with pytest.raises(error, match=match):
        ks.fit(_planted().todense(), "butterfly", seed=0, **kwargs)


def test_a_complex_target_is_not_fitted_by_a_real_chain():
    T = _planted().todense() + 1j * numpy.random.default_rng(5).standard_normal((16, 16))
    with pytest.raises(TypeError, match="complex"):
        ks.fit(T, "butterfly", dtype=numpy.float64)
    assert ks.fit(T, "butterfly", steps=2).chain.dtype == numpy.complex128


@pytest.mark.parametrize("value, match", [(numpy.nan, "non-finite"), (0.0, "zero")])
def test_non_finite_or_zero_targets_are_refused(value, match):
    D = _planted().todense()
    if value == 0.0:
        D[...] = 0.0
    else:
        D[0, 0] = value
    with pytest.raises(ValueError, match=match):
        ks.fit(D, "butterfly", start="random")


def test_identity_probes_beyond_the_limit_are_refused(monkeypatch):
    from kscupy import fitting
    monkeypatch.setattr(fitting, "DENSE_PROBE_LIMIT", 8)
    C = _planted()
    with pytest.raises(ValueError, match="probes='gaussian'"):
        ks.fit(lambda P: C @ P, "butterfly", shape=(16, 16), start="random", probes="identity")


def test_a_start_chain_brings_its_patterns_and_permutations():
    rng = numpy.random.default_rng(1)
    C = ks.KSChain(list(_planted().factors), input_permutation=rng.permutation(16))
    D = C.todense()
    start = ks.KSChain([f * 1.01 for f in C.factors], input_permutation=C.input_permutation)
    result = ks.fit(D, None, start=start, steps=20)
    assert result.start == "given"
    numpy.testing.assert_array_equal(result.chain.input_permutation, C.input_permutation)
    with pytest.raises(ValueError, match="patterns"):
        ks.fit(D, [(1, 4, 4, 4)] * 2, start=start)
    with pytest.raises(ValueError, match="own permutations"):
        ks.fit(D, None, start=start, input_permutation=numpy.arange(16))
    with pytest.raises(ValueError, match="shape"):
        ks.fit(D[:8, :8], None, start=start)
    with pytest.raises(TypeError, match="patterns must be"):
        ks.fit(D, None)


def test_a_random_start_has_the_targets_gain():
    C = ks.butterfly(256, dtype=numpy.float64, seed=2)
    result = ks.fit(lambda P: C @ P, C.patterns, shape=C.shape, start="random", steps=1,
                    seed=3)
    assert 0.9 < result.start_relerr < 2.0       # same size, unrelated: about sqrt(2)


# --- found by a bad-input audit: scales, stops and argument checks -----------------------

def _butterfly_target(scale=1.0, dtype=numpy.float64):
    return (ks.butterfly(16, dtype=numpy.float64, seed=0).todense() * scale).astype(dtype)


def test_adam_keeps_values_that_met_tol():
    """An exact start meets tol at the first step: Adam stops there, before an update."""
    r = ks.fit(_butterfly_target(), "butterfly", optimizer="adam", seed=0)
    assert r.stopped == "tol" and r.heldout_relerr <= 1e-12


@pytest.mark.parametrize("scale, dtype", [(1e-17, numpy.float32), (1e19, numpy.float32),
                                          (1e-180, numpy.float64), (1e180, numpy.float64)])
def test_targets_of_any_scale_fit_as_at_scale_one(scale, dtype):
    """Norms and losses divide by the largest entry before squaring: tiny or huge targets
    neither underflow to a zero loss nor overflow to a false "non-finite" error."""
    r = ks.fit(_butterfly_target(scale, dtype), "butterfly", seed=0, steps=5)
    tol = 1e-5 if dtype == numpy.float32 else 1e-12
    assert 0 <= r.start_relerr < tol and r.heldout_relerr < tol


def test_a_scaled_target_starts_from_balanced_factors():
    """factorize puts the target's scale in one factor; the fit's start spreads it evenly
    (the same product), so that a scaled target improves as the unscaled one does."""
    T = numpy.random.default_rng(1).standard_normal((16, 16))
    r = ks.fit(T * 1e-12, "butterfly", seed=0, steps=30)
    norms = [numpy.linalg.norm(f.values) for f in r.chain.factors]
    assert max(norms) / min(norms) < 1e3
    assert r.heldout_relerr < r.start_relerr


def test_the_evaluations_budget_stops_as_steps(monkeypatch):
    """L-BFGS-B's evaluation budget (status 1) is reported as "steps", not "stalled"."""
    import scipy.optimize
    from kscupy import fitting

    def minimize(fun, x0, **kwargs):
        assert kwargs["options"]["maxfun"] == fitting.LINE_SEARCH_EVALUATIONS * 7
        return scipy.optimize.OptimizeResult(x=x0, status=1)
    monkeypatch.setattr(scipy.optimize, "minimize", minimize)
    r = ks.fit(numpy.random.default_rng(2).standard_normal((16, 16)), "butterfly", steps=7,
               seed=0)
    assert r.stopped == "steps"


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(seed=-1), ValueError, "seed must be None or a non-negative integer"),
    (dict(seed="x"), ValueError, "seed must be None"),
    (dict(progress="no"), TypeError, "progress must be True or False"),
    (dict(patterns=(1, 16, 16, 1)), TypeError, r"wrap the single pattern"),
    (dict(patterns=[]), ValueError, "patterns is empty"),
    (dict(input_permutation=numpy.arange(8)), ValueError, r"input permutation must be .*\(16,\)"),
    (dict(output_permutation=numpy.arange(20)), ValueError, "output permutation"),
    (dict(input_permutation=numpy.zeros(16, int)), ValueError, "not a permutation"),
    (dict(patterns=[(1, 12, 12, 1)]), ValueError, "give a chain of shape"),
])
def test_bad_fit_arguments_are_named(kwargs, error, match):
    args = dict(patterns="butterfly") | kwargs
    patterns = args.pop("patterns")
    with pytest.raises(error, match=match):
        ks.fit(_butterfly_target(), patterns, **args)


def test_a_target_returning_complex_values_for_a_real_fit_is_refused():
    Dc = _butterfly_target() * (1 + 1j)
    op = scipy.sparse.linalg.LinearOperator((16, 16), matvec=lambda v: Dc @ v, matmat=lambda V: Dc @ V,
                             dtype=numpy.float64)
    with pytest.raises(TypeError, match="returns complex values"):
        ks.fit(op, "butterfly", start="random", seed=0)
