"""Copies of a chain share its plan (kscupy.engine.planner.cached_plan's process table):
what names values and permutations travels with pickles and copies, and a write or other
permutations name something else. Planned for an H200's facts, on the CPU."""
import copy
import pickle

import numpy
import pytest

import kscupy as ks
from kscupy.engine import planner


def plan_of(C, batch=50000, layout="bsf"):
    return planner.cached_plan(C.factor_chain.pinned(), layout, C.dtype, batch, {})


@pytest.mark.parametrize("make", [lambda: ks.dft(1024, dtype=numpy.complex64),
                                  lambda: ks.butterfly(1024, dtype=numpy.float32, seed=0)])
@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_a_copy_finds_the_plan_of_the_chain_it_copies(make, how):
    C = make()
    first = plan_of(C)
    twin = {"pickle": lambda C: pickle.loads(pickle.dumps(C)), "deepcopy": copy.deepcopy,
            "copy": lambda C: C.copy()}[how](C)
    assert plan_of(twin) is first
    assert plan_of(twin.T, layout="bsl") is plan_of(C.T, layout="bsl")


def test_other_values_or_permutations_get_their_own_plan():
    C = ks.butterfly(256, dtype=numpy.float32, seed=1)
    first = plan_of(C)
    twin = pickle.loads(pickle.dumps(C))
    twin.factors[0].values = twin.factors[0].values * 2       # the copy's values move on
    assert plan_of(twin) is not first
    permuted = ks.KSChain(list(C.factors), input_permutation=numpy.arange(256)[::-1].copy())
    assert plan_of(permuted) is not first
    rebuilt = ks.KSChain([ks.KSMatrix(f.values) for f in C.factors])   # equal, not a copy
    assert plan_of(rebuilt) is not first


def test_names_travel_with_copies_and_change_with_writes():
    K = ks.KSMatrix.random((2, 4, 4, 2), dtype=numpy.float64, seed=2)
    name = K.factor.cache.values_id
    for twin in (pickle.loads(pickle.dumps(K)), copy.deepcopy(K), K.copy(), K.T.T):
        assert twin.factor.cache.values_id == name
    K.values = K.values + 1
    assert K.factor.cache.values_id != name
    assert ks.KSMatrix(K.values).factor.cache.values_id != K.factor.cache.values_id


def test_the_table_is_bounded(monkeypatch):
    monkeypatch.setattr(planner, "SHARED_PLANS", 3)
    chains = [ks.butterfly(64, dtype=numpy.float32, seed=s) for s in range(5)]
    for C in chains:
        plan_of(C)
    assert len(planner._SHARED) <= 3
    monkeypatch.setattr(planner, "SHARED_PLAN_BYTES", 1)     # nothing fits: nothing kept
    before = dict(planner._SHARED)
    plan_of(ks.butterfly(64, dtype=numpy.float32, seed=9))
    assert dict(planner._SHARED) == before



def test_a_plan_of_the_unpinned_chain_never_serves_later_values():
    """C.plan() plans the chain as it stands; a copy made before a write must not find a
    plan that reads the values written after it."""
    C = ks.KSChain([ks.KSMatrix.random((64, 64, 64, 1), dtype=numpy.float32, seed=0),
                    ks.KSMatrix.random((1, 64, 64, 64), dtype=numpy.float32, seed=1)])
    twin = pickle.loads(pickle.dumps(C))
    planner.cached_plan(C.factor_chain, "bsl", C.dtype, 64, {})
    C.factors[0].values = numpy.zeros((64, 64, 64, 1), numpy.float32)
    plan = planner.cached_plan(twin.factor_chain.pinned(), "bsl", twin.dtype, 64, {})
    held = [f for step in plan.steps for f in getattr(step, "factors", ())
            + ((step.factor,) if hasattr(step, "factor") else ())]
    assert held and all(numpy.any(f.tiles) for f in held)
