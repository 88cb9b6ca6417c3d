"""``auto`` on NumPy: the CPU cost model's choice among the registry's CPU candidates, its
memo, the products it runs against the float64 oracle (operands in any storage), and the CSR
matrix the sparse backend keeps."""
import itertools

import numpy
import pytest

import kscupy as ks
from kscupy.engine import cpu_choice, registry, single
from kscupy.engine.costs import cpu as cpu_costs
from kscupy.core.problem import Problem, problem_of
from conftest import RTOL, dense_oracle, random_array, rel_err

CPU_CANDIDATES = sorted(name for name, b in registry.REGISTRY.items() if b.cpu_seconds)
DTYPES = [numpy.float16, numpy.float32, numpy.float64, numpy.complex64, numpy.complex128]
# small enough for an oracle, varied enough for the model to pick every candidate somewhere
# (einsum: single-row blocks, b = 1)
PATTERNS = [(1, 2, 2, 64), (64, 2, 2, 1), (8, 4, 4, 8), (4, 8, 2, 16), (1, 32, 32, 4),
            (2, 64, 64, 1), (1, 128, 32, 2), (16, 16, 16, 2), (1, 1, 64, 4)]
BATCHES = [1, 5, 64, 512]


def _problem(pattern, batch, dtype, layout):
    """A product on C-contiguous operands, as the single-factor path sees it."""
    return Problem(ks.KSPattern(*pattern), batch, numpy.dtype(dtype), layout,
                   layout == "bsl" or batch == 1, False)


def _products():
    return itertools.product(PATTERNS, BATCHES, ("bsl", "bsf"),
                             [numpy.float32, numpy.float64, numpy.complex64, numpy.complex128])


@pytest.fixture
def fresh_memo(monkeypatch):
    """An empty memo of choices for the test (and the process's memo untouched)."""
    monkeypatch.setattr(cpu_choice, "_MEMO", {})


def test_the_cpu_candidates_are_bmm_einsum_and_sparse():
    assert CPU_CANDIDATES == ["bmm", "einsum", "sparse"]


def test_the_model_prices_every_candidate_and_picks_one_of_them(fresh_memo):
    for (pattern, batch, layout, dtype) in _products():
        problem = _problem(pattern, batch, dtype, layout)
        seconds = {name: registry.get(name).cpu_seconds(problem) for name in CPU_CANDIDATES}
        assert all(0 < s < 1e3 for s in seconds.values()), (problem, seconds)
        assert cpu_choice.choose_cpu(problem) == min(seconds, key=seconds.get)


def test_float16_is_priced_as_float32():
    for pattern, batch, layout in itertools.product(PATTERNS, BATCHES, ("bsl", "bsf")):
        half = _problem(pattern, batch, numpy.float16, layout)
        single = _problem(pattern, batch, numpy.float32, layout)
        for name in CPU_CANDIDATES:
            assert cpu_costs.cpu_seconds(half, name) == cpu_costs.cpu_seconds(single, name)


def _picked_somewhere():
    """``{backend: (pattern, batch, layout, dtype)}``: a product of the sweep the model gives
    to each candidate (the smallest)."""
    picks = {}
    for pattern, batch, layout, dtype in sorted(
            _products(), key=lambda p: p[1] * ks.KSPattern(*p[0]).nnz):
        name = cpu_choice.choose_cpu(_problem(pattern, batch, dtype, layout))
        picks.setdefault(name, (pattern, batch, layout, dtype))
    return picks


@pytest.mark.parametrize("backend", CPU_CANDIDATES)
def test_auto_matches_the_oracle_where_the_model_picks_each_backend(rng, backend):
    picks = _picked_somewhere()
    assert backend in picks, f"the model picks {backend} nowhere in the sweep"
    pattern, batch, layout, dtype = picks[backend]
    K = ks.KSMatrix(random_array(rng, pattern, dtype))
    D = dense_oracle(K.values)
    M, N = K.shape
    X = random_array(rng, (N, batch) if layout == "bsl" else (batch, N), dtype)
    assert cpu_choice.choose_cpu(problem_of(K.factor, X, layout)) == backend
    Y = K.matmul(X, layout=layout)
    assert Y.dtype == dtype and Y.shape == ((M, batch) if layout == "bsl" else (batch, M))
    assert rel_err(Y, D @ X if layout == "bsl" else X @ D.T) < RTOL[numpy.dtype(dtype)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_auto_matches_the_oracle_in_every_dtype(rng, dtype, layout):
    for pattern in PATTERNS[:4]:
        K = ks.KSMatrix(random_array(rng, pattern, dtype))
        D = dense_oracle(K.values)
        N = K.shape[1]
        X = random_array(rng, (N, 9) if layout == "bsl" else (9, N), dtype)
        Y = K.matmul(X, layout=layout)
        assert Y.dtype == dtype
        assert rel_err(Y, D @ X if layout == "bsl" else X @ D.T) < RTOL[numpy.dtype(dtype)]


def test_operands_stored_as_the_other_layout_runs_it_transposed(rng, monkeypatch):
    """A bsf operand whose batch is contiguous is a bsl operand transposed (and the other way
    round): auto prices and runs the product in the layout the storage fits."""
    K = ks.KSMatrix(random_array(rng, (4, 8, 2, 16), numpy.float64))
    D = dense_oracle(K.values)
    M, N = K.shape
    seen = []
    choose = cpu_choice.choose_cpu_for
    monkeypatch.setattr(cpu_choice, "choose_cpu_for",
                        lambda f, X, layout: seen.append(layout) or choose(f, X, layout))
    Z = random_array(rng, (N, 6), numpy.float64)               # (N, B) in C order
    for X, layout, stored_as, expected in ((Z, "bsl", "bsl", D @ Z),
                                           (Z.T, "bsf", "bsl", Z.T @ D.T),
                                           (numpy.asfortranarray(Z), "bsl", "bsf", D @ Z),
                                           (numpy.ascontiguousarray(Z.T), "bsf", "bsf", Z.T @ D.T)):
        seen.clear()
        assert single._stored_in_other_layout(X, layout) == (layout != stored_as)
        assert rel_err(K.matmul(X, layout=layout), expected) < RTOL[numpy.dtype(numpy.float64)]
        assert seen == [stored_as]


def test_strided_operands_under_auto(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.complex128))
    D = dense_oracle(K.values)
    N = K.shape[1]
    big = random_array(rng, (N + 1, 11), numpy.complex128)
    for X in (big[:N, :10:2], big[1:, 1:6], big[N - 1::-1, 4::-1]):
        assert rel_err(K.matmul(X), D @ X) < 1e-12
        assert rel_err(K.matmul(X.T, layout="bsf"), X.T @ D.T) < 1e-12
    column = big[:N, :1]
    assert not single._stored_in_other_layout(column, "bsl")
    assert not single._stored_in_other_layout(column.T, "bsf")


def test_the_choice_is_memoized_per_problem(rng, fresh_memo, monkeypatch):
    calls = []
    model = cpu_costs.cpu_seconds
    monkeypatch.setattr(cpu_costs, "cpu_seconds", lambda p, a: calls.append((p, a)) or model(p, a))
    K = ks.KSMatrix(random_array(rng, (4, 8, 2, 16), numpy.float32))
    X = random_array(rng, (K.shape[1], 7), numpy.float32)
    for _ in range(3):
        K @ X
    assert len(calls) == len(CPU_CANDIDATES)           # priced once, not on every product
    K @ random_array(rng, (K.shape[1], 8), numpy.float32)
    assert len(calls) == 2 * len(CPU_CANDIDATES)       # another batch size is another problem


def test_a_chain_applies_every_factor_with_the_models_choice(rng, monkeypatch):
    C = ks.dft(64, dtype=numpy.complex128)
    X = random_array(rng, (5, 64), numpy.complex128)
    seen = []
    choose = cpu_choice.choose_cpu_for
    monkeypatch.setattr(cpu_choice, "choose_cpu_for",
                        lambda f, X, layout: seen.append(layout) or choose(f, X, layout))
    Y = C.matmul(X, layout="bsf")
    assert len(seen) == len(C.factors)
    assert rel_err(Y, numpy.fft.fft(X, axis=1)) < 1e-12


def test_a_bsf_chain_runs_in_batch_order_when_the_model_says_so(rng, monkeypatch):
    """dft's radix-2 steps cost less as bsl than as bsf by more than copying the batch once:
    the chain copies it and every factor runs as bsl."""
    C = ks.dft(1024, dtype=numpy.complex128)
    factors = [K.factor for K in reversed(C.factors)]
    assert not cpu_choice.chain_in_batch_order(factors, 1, numpy.complex128)
    B = next(B for B in (8, 16, 64, 256, 1024)
             if cpu_choice.chain_in_batch_order(factors, B, numpy.complex128))
    X = random_array(rng, (B, 1024), numpy.complex128)
    seen = []
    choose = cpu_choice.choose_cpu_for
    monkeypatch.setattr(cpu_choice, "choose_cpu_for",
                        lambda f, X, layout: seen.append(layout) or choose(f, X, layout))
    Y = C.matmul(X, layout="bsf")
    assert seen == ["bsl"] * len(C.factors)
    assert rel_err(Y, numpy.fft.fft(X, axis=1)) < 1e-12


def test_sparse_keeps_its_csr_matrix_until_clear_cache(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.complex64))
    D = dense_oracle(K.values)
    X = random_array(rng, (K.shape[1], 4), numpy.complex64)
    tol = RTOL[numpy.dtype(numpy.complex64)]
    assert rel_err(K.matmul(X, backend="sparse"), D @ X) < tol
    S = K.factor.cache[("csr", False, False)]
    numpy.testing.assert_array_equal(S.toarray(), D.astype(numpy.complex64))
    assert rel_err(K.matmul(X, backend="sparse"), D @ X) < tol
    assert K.factor.cache[("csr", False, False)] is S           # formed once
    Z = random_array(rng, (K.shape[0], 3), numpy.complex64)
    assert rel_err(K.H.matmul(Z, backend="sparse"), D.conj().T @ Z) < tol
    assert ("csr", True, True) in K.factor.cache                # views share the cache
    K.T.clear_cache()
    assert K.factor.cache == {}
    assert rel_err(K.matmul(X, backend="sparse"), D @ X) < tol


def test_a_close_call_is_settled_by_timing_both(rng, fresh_memo, monkeypatch):
    """When the model puts its two best backends within CPU_CLOSE_CALL, auto times both on
    the operand and keeps the faster (here, by fiat, the model's runner-up)."""
    K = ks.KSMatrix(random_array(rng, (4, 8, 2, 16), numpy.float64))
    X = random_array(rng, (K.shape[1], 9), numpy.float64)
    problem = problem_of(K.factor, X, "bsl")
    ranked = sorted(CPU_CANDIDATES, key=lambda name: registry.get(name).cpu_seconds(problem))
    monkeypatch.setattr(cpu_choice, "CPU_CLOSE_CALL", float("inf"))
    monkeypatch.setattr(cpu_choice, "CPU_MEASURE_MAX_SECONDS", float("inf"))
    timed = []
    monkeypatch.setattr(cpu_choice, "_faster_on", lambda names, f, X, layout, expected:
                        timed.extend(names) or names[1])
    assert cpu_choice.choose_cpu_for(K.factor, X, "bsl") == ranked[1]
    assert timed == ranked[:2]
    monkeypatch.undo()
    assert cpu_choice._faster_on(tuple(ranked[:2]), K.factor, X, "bsl", 1e-4) in ranked[:2]
    assert rel_err(K @ X, dense_oracle(K.values) @ X) < 1e-12
