"""kscupy on GPUs other than Hopper, seen from the CPU: the facts an emulated architecture
has (``KSCUPY_EMULATE_ARCH``) and what ``auto`` and the chain planner then ask for. Every
choice is made from the device's facts; these tests replace the facts and look at the
choices. (What the kernels compile to on each architecture: test_kernel_sources.py; the
GPU suite under emulation runs on a GPU.)"""
import dataclasses

import numpy
import pytest

import kscupy as ks
from kscupy.core import device
from kscupy.core.problem import Problem
from kscupy.engine import decide, planner, registry
from kscupy.engine.costs import constants
from kscupy.kernels import ks_mma, ks_pair, ks_rows

TENSOR_CORE_BACKENDS = {"kernel", "kernel_bsl", "kernel_tf32"}


@pytest.fixture(params=[75, 80, 86, 89, 90])
def emulated(request, monkeypatch):
    """The compute capability emulated, through the environment variable a user sets."""
    monkeypatch.setenv(device.EMULATE_ARCH, f"sm_{request.param}")
    return request.param


def test_emulated_facts_have_that_architectures_limits(emulated):
    facts = device.current()
    assert facts.compute_capability == emulated
    limits = device.EMULATED_LIMITS[emulated]
    assert facts.smem_per_sm == limits.get("smem_per_sm", device.H200.smem_per_sm)
    assert facts.smem_per_block == limits.get("smem_per_block", device.H200.smem_per_block)
    assert (facts.max_cluster > 1) == facts.tma == (emulated >= 90)
    assert facts.tensor_cores == (emulated >= 80)
    assert facts.emulated_on == device.H200.name
    # no device file's constants: the unknown device's (gpu.json's) price it
    assert constants.gpu(facts.name) == constants.gpu("an unknown GPU")
    assert constants.files_for(facts.name) == ["gpu.json"]
    assert constants.files_for(facts.emulated_on) == ["gpu.json", "gpu-h200.json"]


@pytest.mark.parametrize("value", ["70", "sm_95", "ampere", "8.0"])
def test_an_unknown_emulated_architecture_is_refused(monkeypatch, value):
    monkeypatch.setenv(device.EMULATE_ARCH, value)
    with pytest.raises(ValueError, match=device.EMULATE_ARCH):
        device.current()


def test_a_newer_architecture_than_the_device_is_not_emulated():
    with pytest.raises(ValueError, match="cannot emulate"):
        device.emulating(dataclasses.replace(device.H200, compute_capability=80), 90)


@pytest.mark.parametrize("dtype", [numpy.float16, numpy.float32, numpy.float64,
                                   numpy.complex64, numpy.complex128])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_auto_weighs_only_what_runs_on_the_device(emulated, dtype, layout):
    """Below sm_80 no tensor-core backend is a candidate, and each candidate's
    configuration fits the emulated device's shared memory."""
    facts = device.current()
    for pattern, batch in (((4, 256, 256, 4), 25088), ((1, 512, 512, 32), 64),
                           ((48, 128, 128, 4), 4096)):
        problem = Problem(ks.KSPattern(*pattern), batch, numpy.dtype(dtype), layout,
                          layout == "bsl", False)
        names = {b.name for b in decide.candidates(problem, facts)}
        assert names, problem
        assert bool(names & TENSOR_CORE_BACKENDS) == (emulated >= 80), names
        ranked = decide.ranked(problem, facts)
        assert all(numpy.isfinite(seconds) and seconds > 0 for seconds, _ in ranked)
        if "kernel" in names:
            config = ks_mma.heuristic_config(problem)
            itemsize = numpy.dtype(dtype).itemsize
            assert config.fits(itemsize, device=facts), (problem, config)
            if not facts.tma:           # the group kernel copies W by the TMA
                assert not config.lean_group(dtype)


def test_an_explicit_backend_names_the_architecture_it_needs(monkeypatch):
    monkeypatch.setenv(device.EMULATE_ARCH, "75")
    assert not registry.get("kernel").runs_on(device.current())
    assert registry.get("kernel_fma").runs_on(device.current())


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_chain_plans_use_clusters_and_pairs_only_where_they_run(emulated, layout):
    facts = device.current()
    chains = [ks.hadamard(4096, dtype=numpy.float32), ks.butterfly(1024, dtype=numpy.float32),
              ks.monarch(4096, dtype=numpy.float32)]
    for chain in chains:
        plan = planner.plan(chain.factor_chain, layout, numpy.float32, 65536, device=facts)
        for step in plan.steps:
            if isinstance(step, ks_rows.RowSegment):
                assert step.cluster == 1 or emulated >= 90, step.describe()
            assert not isinstance(step, ks_pair.PairSegment) or emulated >= 80
    pair = [ks.KSMatrix.random(p, dtype=numpy.float32).factor
            for p in ((32, 32, 32, 1), (1, 32, 32, 32))]
    assert (ks_pair.make_pair_segment(pair, numpy.float32, layout) is None) == (emulated < 80)


def test_info_says_what_runs_and_which_constants_price_it(emulated):
    from kscupy.__main__ import _model_lines
    text = "\n".join(_model_lines(device.current()))
    assert f"emulating sm_{emulated}" in text
    assert ("tensor-core kernels" in text) == (emulated >= 80)
    assert ("clusters" in text) == (emulated >= 90)
    assert "cost model: gpu.json: the generic constants" in text
