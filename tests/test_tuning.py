"""CPU tests of the single-factor kernel's configuration heuristic, the cost model, the
``auto`` choice over the backend registry and the tuning cache."""
import dataclasses
import itertools
import json
import pathlib

import numpy
import pytest

import kscupy as ks
from kscupy import KSPattern
from kscupy.core import device
from kscupy.core.problem import Problem, batch_bucket
from kscupy.engine import decide, registry, single, tuning_cache
from kscupy.engine.costs import constants, gpu as gpu_costs
from kscupy.engine.registry import Choice
from kscupy.kernels.ks_matmul import (SMEM_LIMIT, KernelConfig, candidate_configs,
                                      heuristic_config)
from kscupy.kernels.ks_mma import MmaConfig

RATES = dataclasses.replace(device.H200, bandwidth=3e12, flops32=6e13, flops64=3e13,
                            name="x", memory=80 * 2**30)
#: The same rates named as a device the cost constants were fitted on.
FITTED = dataclasses.replace(RATES, name="NVIDIA H200")


def _problem(pattern, B=1000, dtype=numpy.float32, layout="bsl", contiguous=True, transposed=False):
    return Problem(KSPattern(*pattern), B, numpy.dtype(dtype), layout, contiguous, transposed)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64, numpy.complex64, numpy.complex128])
def test_heuristic_is_valid_everywhere(dtype):
    sizes = [1, 2, 3, 7, 16, 48, 100, 1024]
    for (a, b, c, d), B, (layout, contiguous) in itertools.product(
            itertools.product([1, 5, 4096], sizes, sizes, [1, 2, 3, 64, 4096]),
            [1, 3, 127, 100003], [("bsl", True), ("bsf", False), ("bsl", False)]):
        p = _problem((a, b, c, d), B, dtype, layout, contiguous)
        cfg = heuristic_config(p)
        assert 1 <= cfg.threads <= 1024, (p, cfg)
        assert cfg.smem_bytes(p.itemsize) <= SMEM_LIMIT, (p, cfg)
        assert cfg.bm % cfg.tm == 0 and cfg.bn % cfg.tn == 0
        assert cfg.tm * cfg.tn * p.itemsize <= 256 or cfg.tm * cfg.tn <= 4
        for cand in candidate_configs(p):
            assert cand.smem_bytes(p.itemsize) <= SMEM_LIMIT and cand.threads <= 1024


def test_heuristic_picks_the_layout_friendly_order():
    assert heuristic_config(_problem((1, 256, 256, 1), 25088)).order == 0
    assert heuristic_config(_problem((4, 64, 64, 16), 25088, layout="bsf",
                                            contiguous=False)).order == 1
    assert heuristic_config(_problem((4, 64, 64, 1), 25088, layout="bsf",
                                            contiguous=False)).order == 2
    # a batch of one in BSL is laid out like BSF: walk the features
    assert heuristic_config(_problem((4, 64, 64, 16), 1)).order == 1
    big = heuristic_config(_problem((1, 1024, 1024, 1), 25088))
    assert (big.bm, big.bn) == (128, 64)


def test_config_validation():
    with pytest.raises(ValueError, match="divide"):
        KernelConfig(1, 6, 32, 8, 4, 4, 0)
    with pytest.raises(ValueError, match="threads"):
        KernelConfig(32, 64, 64, 8, 1, 1, 1)
    with pytest.raises(ValueError, match="order"):
        KernelConfig(1, 8, 8, 8, 1, 1, 3)
    cfg = KernelConfig(1, 128, 128, 8, 8, 8, 0)
    assert cfg.threads == 256
    assert cfg.name(numpy.complex64) == "ks::ks_matmul<ks::cplx<float>, 1, 128, 128, 8, 8, 8, 0>"


def test_batch_buckets_and_keys():
    assert [batch_bucket(B) for B in (1, 2, 3, 4, 5, 1000)] == [1, 2, 4, 4, 8, 1024]
    k1 = _problem((2, 3, 4, 5), 1000).key()
    assert k1 != _problem((2, 3, 4, 5), 1000, transposed=True).key()
    assert k1 != _problem((2, 3, 4, 5), 1000, layout="bsf").key()
    assert k1 == _problem((2, 3, 4, 5), 999).key()


def test_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path / "c"))
    assert ks.engine.tuning_cache_path() == tmp_path / "c" / "tuning.json"
    p1, p2, p3 = (_problem((2, 64, 64, 2)), _problem((1, 128, 128, 1)),
                  _problem((4, 32, 32, 4), layout="bsf", contiguous=False))
    cfg = KernelConfig(1, 64, 128, 8, 4, 8, 0)
    tuning_cache.put(p1, RATES, Choice("kernel_fma", cfg), {"kernel_fma": 1e-3, "bmm": 2e-3})
    mma = MmaConfig(1, 128, 128, 32, 2, 4, 3, 0)
    tuning_cache.put(p2, RATES, Choice("kernel", mma), {"kernel": 1e-3})
    tuning_cache.put(p3, RATES, Choice("bmm"), {"bmm": 1e-3})
    data = json.loads((tmp_path / "c" / "tuning.json").read_text())
    assert data[tuning_cache.key(p1, RATES)]["config"] == [1, 64, 128, 8, 4, 8, 0]
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert tuning_cache.get(p1, RATES) is None
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path / "c"))
    tuning_cache._FILES.clear()                          # as a new process sees the file
    assert tuning_cache.get(p1, RATES) == Choice("kernel_fma", cfg)
    assert tuning_cache.get(p2, RATES) == Choice("kernel", mma)
    assert tuning_cache.get(p3, RATES) == Choice("bmm")
    assert tuning_cache.timings(p1, RATES) == {"kernel_fma": 1e-3, "bmm": 2e-3}
    assert tuning_cache.get(_problem((8, 8, 8, 8)), RATES) is None
    ks.engine.clear_tuning_cache()
    assert not (tmp_path / "c" / "tuning.json").exists()


def test_cache_ignores_corrupt_files(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path))
    p = _problem((2, 64, 64, 2))
    (tmp_path / "tuning.json").write_text("{not json")
    tuning_cache._FILES.clear()
    assert tuning_cache.get(p, RATES) is None
    (tmp_path / "tuning.json").write_text(json.dumps(
        {tuning_cache.key(p, RATES): {"backend": "kernel", "config": [1, 2]}}))
    tuning_cache._FILES.clear()
    assert tuning_cache.get(p, RATES) is None


def test_cache_dir_defaults_to_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("KSCUPY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert ks.engine.tuning_cache_path() == tmp_path / "kscupy" / "tuning.json"


def test_block_dense_is_weighed_for_several_rows_of_several_groups_it_can_keep():
    """With a = 1 it is dense and with d = 1 bmm, which auto weighs already; blocks beyond
    DENSE_CACHE_BYTES would be formed on every call. Its price grows with d (d times the
    arithmetic) where bmm's does not."""
    fits = registry.get("block_dense").fits
    assert fits(_problem((4, 64, 64, 4), 25088, numpy.float16, "bsf", False), RATES)
    for pattern in ((1, 64, 64, 4), (4, 64, 64, 1), (16, 512, 512, 64)):
        assert not fits(_problem(pattern, 25088, numpy.float16, "bsf", False), RATES), pattern
    seconds = lambda d: decide.seconds(  # noqa: E731
        _problem((4, 128, 128, d), 25088, numpy.float16, "bsf", False), "block_dense", FITTED)
    bmm = lambda d: decide.seconds(  # noqa: E731
        _problem((4, 128, 128, d), 25088, numpy.float16, "bsf", False), "bmm", FITTED)
    assert seconds(32) / seconds(2) > 2 * bmm(32) / bmm(2)


def test_cost_model_prefers_fusion_when_memory_bound():
    seconds = lambda p, be: decide.seconds(p, be, RATES)   # noqa: E731
    small_blocks = _problem((64, 2, 2, 64), 25088)
    assert seconds(small_blocks, "kernel") < seconds(small_blocks, "bmm")
    sparse = _problem((16, 64, 64, 16), 25088)       # density 1/256: dense does 256x the work
    assert seconds(sparse, "dense") > 10 * seconds(sparse, "kernel")
    # wider dtypes and complex arithmetic take longer
    for dtype in (numpy.float64, numpy.complex64):
        assert seconds(_problem((4, 64, 64, 4), 25088, dtype), "kernel") > \
            seconds(_problem((4, 64, 64, 4), 25088), "kernel")


def test_auto_is_priced_as_it_runs(tmp_path, monkeypatch):
    """The planner prices a factor under auto as the backend auto picks for it; that
    backend is one auto may use there (dense included; the small-batch kernel only for
    small batches), and the choice follows the problem: the fused kernel for tiny blocks
    and wide batches (memory-bound: every other method moves the batch more), the small-
    batch kernel at B = 1, which streams the weights once in one launch."""
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path))
    for pattern, B in (((1, 64, 64, 1), 25088), ((64, 2, 2, 64), 25088), ((1, 48, 48, 1), 1)):
        p = _problem(pattern, B)
        choice = decide.choose(p, RATES)
        candidates = [b.name for b in registry.REGISTRY.values()
                      if b.in_auto and b.precision == "default" and b.fits(p, RATES)]
        assert choice.backend in candidates and "dense" in candidates
        assert decide.seconds(p, "auto", RATES) == decide.seconds(p, choice.backend, RATES)
    assert decide.choose(_problem((64, 2, 2, 64), 25088), RATES).backend.startswith("kernel")
    assert decide.choose(_problem((1, 48, 48, 1), 1), RATES).backend == "kernel_skinny"
    assert decide.choose(_problem((1, 48, 48, 1), 25088), RATES).backend != "kernel_skinny"
    with pytest.raises(ValueError, match="no cost model"):
        decide.seconds(_problem((1, 4, 4, 1)), "einsum", RATES)


def test_auto_tf32_chooses_among_the_tf32_backends_only(tmp_path, monkeypatch):
    """The opt-in auto_tf32 weighs the backends of one TF32 product and nothing else; auto
    never weighs them; double precision has no TF32 backend; NumPy operands are refused."""
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path))
    tf32 = {b.name for b in registry.REGISTRY.values() if b.precision == "tf32"}
    assert tf32 == {"kernel_tf32", "bmm_tf32", "dense_tf32"}
    for pattern in ((1, 64, 64, 1), (64, 2, 2, 64), (4, 1024, 1024, 4), (8, 48, 48, 16)):
        for layout in ("bsl", "bsf"):
            p = _problem(pattern, 25088, layout=layout)
            choice = decide.choose(p, RATES, "tf32")
            assert choice.backend in tf32
            assert decide.seconds(p, "auto_tf32", RATES) == min(
                decide.seconds(p, name, RATES) for name in tf32
                if registry.get(name).fits(p, RATES))
            assert decide.choose(p, RATES).backend not in tf32
    with pytest.raises(TypeError, match="precision"):
        decide.choose(_problem((1, 8, 8, 1), 64, numpy.float64), RATES, "tf32")
    K = ks.KSMatrix.random((1, 8, 8, 1))
    assert "auto_tf32" in K.backends() and "auto_tf32" in ks.KSChain([K, K]).backends()
    for op in (K, ks.KSChain([K, K])):
        with pytest.raises(TypeError, match="GPU"):
            op.matmul(numpy.ones((8, 2), numpy.float32), backend="auto_tf32")


def test_paper_grid_has_627_patterns_and_sample_spans_it():
    from kscupy.bench.grid import paper_grid, stratified_sample
    grid = paper_grid()
    assert len(grid) == 627 and len(set(grid)) == 627
    sample = stratified_sample(grid, 60)
    assert len(sample) == 60 and set(sample) <= set(grid)
    hs = sorted(KSPattern(*p).h for p in sample)
    all_h = sorted(KSPattern(*p).h for p in grid)
    assert hs[0] == all_h[0] and hs[-1] == all_h[-1]


def test_device_constants_replace_the_shared_ones_for_their_device_only():
    """A device file (gpu-<word>.json) replaces gpu.json's constants for devices whose name
    holds its word, and only those it has; every other device prices with gpu.json's."""
    data = constants.DATA
    base = json.loads((data / "gpu.json").read_text())
    for path in sorted(data.glob("gpu-*.json")):
        doc = json.loads(path.read_text())
        word = doc["match"]
        named = dataclasses.replace(RATES, name=f"NVIDIA {word} 80GB HBM3")
        for text, (value, source) in doc["single"].items():
            key = tuple(text.split("/"))
            assert gpu_costs.single_constants(named, key) == tuple(value)
            assert gpu_costs.single_constants(RATES, key) == tuple(base["single"][text][0])
            assert source in doc["sources"]
        other = next(t for t in base["single"] if t not in doc["single"])
        assert gpu_costs.single_constants(named, tuple(other.split("/"))) == \
            tuple(base["single"][other][0])
    # and the model reads them: a complex64 batch-order product is priced differently
    p = _problem((4, 128, 128, 16), 8192, numpy.complex64)
    cfg = MmaConfig(1, 64, 64, 16, 2, 2, 3, 0)
    h100 = dataclasses.replace(RATES, name="NVIDIA H100 80GB HBM3")
    assert gpu_costs.mma_kernel_seconds(p, h100, cfg) != gpu_costs.mma_kernel_seconds(
        p, dataclasses.replace(h100, name="x"), cfg)


def test_every_constant_says_where_it_was_measured():
    """Each constant of the GPU model's files names a source, and each source the device,
    date and command of its measurement (or says it is an estimate); no constant is left
    out of the model (gpu.json names every one the formulas read)."""
    for path in sorted(constants.DATA.glob("gpu*.json")):
        doc = json.loads(path.read_text())
        for section in ("single", "model"):
            for name, (value, source) in doc.get(section, {}).items():
                assert source in doc["sources"], (path.name, name)
        for name, source in doc["sources"].items():
            assert set(source) >= {"device", "date", "command"}, (path.name, name)
            assert source["device"] or source.get("note"), (path.name, name)
    cpu = json.loads((constants.DATA / "cpu.json").read_text())
    assert set(cpu["source"]) >= {"device", "date", "command"}


def test_bmm_with_the_batch_along_the_gemm_rows_has_its_own_key():
    """group_gemm_variant: batch-size-first with d = 1 (the batch along the rows of each
    group's GEMM) is priced by the ``groups_rows`` keys, which a device may fit apart (the
    H100's float32, on probe_ingroup.py's rows); every other form keeps ``groups``."""
    rows = _problem((6, 64, 256, 1), 25088, layout="bsf", contiguous=False)
    assert gpu_costs.group_gemm_variant(rows) == "groups_rows"
    assert gpu_costs.group_gemm_variant(rows, "tf32") == "groups_rows_tf32"
    for other in (_problem((6, 64, 256, 1), 25088),
                  _problem((6, 64, 256, 4), 25088, layout="bsf", contiguous=False)):
        assert gpu_costs.group_gemm_variant(other) == "groups"
    for suffix in ("", "_complex", "_dmma", "_hmma", "_tf32"):     # every dtype has one
        assert gpu_costs.single_constants(RATES, ("bmm", "groups_rows" + suffix))
    h100 = dataclasses.replace(RATES, name="NVIDIA H100 80GB HBM3")
    key = ("bmm", "groups_rows")
    assert gpu_costs.single_constants(h100, key) != gpu_costs.single_constants(RATES, key)
    assert gpu_costs.bmm_seconds(rows, h100) != gpu_costs.bmm_seconds(
        rows, dataclasses.replace(h100, name="x"))


@pytest.mark.parametrize("results", ["ingroup_h100.json", "ingroup_h200_f32.json"])
def test_d1_batch_size_first_picks_match_the_measured_fastest_on_each_hopper(results):
    """Each Hopper's own float32 in-group and bmm-rows constants (gpu-h100.json,
    gpu-h200.json), replayed on the d = 1 batch-size-first rows timed on the GPU they were
    fitted on (probe_ingroup.py: kernel, kernel_bsl and bmm) by auto's rule
    (decide.close_call): the fastest measured of the model's best RIVALS priced within
    the band of the first (decide.band). The pick must be the fastest measured, within 5%.
    Rows whose model pick is a backend the file did not time (dense) are not judged, nor
    such a rival (the timing would weigh it too). With
    the shared constants 8 of the H200's 22 rows lose 1.15-1.34x (bmm where the kernel wins)."""
    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "results" / results
    data = json.loads(path.read_text())
    rates = device.from_record(data["rates"])
    rows = [r for r in data["rows"] if r["dtype"] == "float32"]
    judged = 0
    for row in rows:
        p = _problem(tuple(row["pattern"]), row["batch"], layout="bsf", contiguous=False)
        measured = {k: row["seconds"][k] for k in ("kernel", "kernel_bsl", "bmm")}
        ranked = [(t, b.name) for t, b in decide.ranked(p, rates, "default")]
        rivals = [name for t, name in ranked[:decide.RIVALS]
                  if t <= decide.band(ranked[0][0]) * ranked[0][0]]
        if rivals[0] not in measured:
            continue
        judged += 1
        pick = min((name for name in rivals if name in measured), key=measured.get)
        assert measured[pick] <= 1.05 * min(measured.values()), (row["pattern"], pick, measured)
    assert len(rows) >= 16 and judged >= len(rows) - 2


def test_whole_vector_load_store_path_follows_the_sms_not_the_dram():
    """rows_seconds: the load/store path of a whole-vector segment runs at a rate of the
    SMs (flops32), so a segment whose time is that path takes as long on a device with less
    DRAM bandwidth and the same SMs (the H100 against the H200), in both layouts; on the
    H200 the rate is the one fitted there, 2.5 (bsf) and 3.25 (bsl) times its bandwidth."""
    from kscupy.kernels.ks_rows import make_row_segment
    factors = [f.factor for f in ks.butterfly(1024, dtype=numpy.complex64, seed=1).factors]
    B, isz = 65536, 8
    h200 = dataclasses.replace(RATES, bandwidth=4.814e12, flops32=6.691e13)
    h100 = dataclasses.replace(h200, bandwidth=3.352e12)
    C = constants.gpu(h200.name)
    for layout, fitted in (("bsf", 2.5), ("bsl", 3.25)):
        seg = make_row_segment(factors, numpy.complex64, layout, B, device=h200)
        t200 = gpu_costs.rows_seconds(seg, B, numpy.complex64, h200, layout)
        t100 = gpu_costs.rows_seconds(seg, B, numpy.complex64, h100, layout)
        dram = 2 * isz * B * 1024 / h100.bandwidth
        if layout == "bsf":
            assert t100 > dram / C.rows_bandwidth            # the path sets the time
            assert t100 == pytest.approx(t200)
        else:                        # DRAM, then the path: only DRAM's part grows
            assert t100 - t200 == pytest.approx(dram - 2 * isz * B * 1024 / h200.bandwidth,
                                                rel=1e-6)
        # the path's rate on the H200 as fitted there, in bytes/s
        constant = C.rows_datapath if layout == "bsf" else C.rows_bsl_datapath
        assert constant * h200.flops32 == pytest.approx(fitted * h200.bandwidth, rel=2e-3)


class _Entry:
    """A registry backend as decide.ranked hands it out: a name and no tile configuration."""
    heuristic = None

    def __init__(self, name):
        self.name = name


@pytest.fixture
def close_call(tmp_path, monkeypatch):
    """auto's preparation on the GPU (single._prepare_auto), run on the CPU: the model's
    ranking, the device, the preparation of a choice and the GPU timing replaced. Returns
    (set_ranking, timings, prepare): ``set_ranking([(seconds, name), ...], measured)``;
    ``timings`` the list of run pairs timed; ``prepare(problem)`` auto's run for a problem
    (the name of the backend it runs)."""
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path))     # an empty tuning cache
    facts = {"device": FITTED}
    monkeypatch.setattr(device, "current", lambda: facts["device"])
    ranking, timings, measured = [], [], {}

    def set_ranking(rows, seconds=None):
        ranking[:] = [(s, _Entry(name)) for s, name in rows]
        measured.update(seconds or {})
    monkeypatch.setattr(decide, "ranked", lambda problem, device, precision: list(ranking))
    monkeypatch.setattr(single, "_prepared", lambda factor, X, layout, choice: choice.backend)

    def gpu_times(runs, X):         # (seconds, host seconds): none bound by the host
        timings.append(tuple(runs))
        return [(measured[run], 0.0) for run in runs]
    monkeypatch.setattr(single, "pipeline_times", gpu_times)

    def prepare(problem):
        a, b, c, d = problem.pattern
        factor = ks.KSMatrix.random((a, b, c, d)).factor
        X = numpy.empty((factor.shape[1], problem.batch), numpy.float32)
        return single._prepare_auto(factor, X, "bsl", "default")
    def unfitted():
        """Make the device one the constants were not fitted on."""
        facts["device"] = RATES
        decide.forget_decisions()
    prepare.unfitted = unfitted
    decide.forget_decisions()
    yield set_ranking, timings, prepare
    decide.forget_decisions()


def test_a_close_call_is_timed_once_and_the_faster_kept(close_call):
    set_ranking, timings, prepare = close_call
    p = _problem((128, 128, 128, 1), 25088)
    set_ranking([(2.6e-3, "kernel"), (2.9e-3, "bmm")], {"kernel": 2.55e-3, "bmm": 2.49e-3})
    assert prepare(p) == "bmm"
    assert timings == [("kernel", "bmm")]
    assert decide.choose(p).backend == "bmm"            # the planner prices what runs
    assert prepare(p) == "bmm" and len(timings) == 1


@pytest.mark.parametrize("rows", [
    [(2.6e-3, "kernel"), (2.6e-3 * decide.CLOSE_CALL * 1.01, "bmm")],       # not close
    [(2.6e-3, "kernel")]])                                                 # no rival
def test_clear_calls_keep_the_models_choice_untimed(close_call, rows):
    set_ranking, timings, prepare = close_call
    set_ranking(rows, {"kernel": 1.0, "bmm": 0.5})
    assert prepare(_problem((4, 64, 64, 4), 25088)) == "kernel"
    assert timings == []


@pytest.mark.parametrize("fitted", [True, False])
def test_close_calls_are_timed_however_short_on_any_device(close_call, fitted):
    """Products of a few microseconds are timed too, where the host's time per call is
    most of the time and the model prices it worst; the rule is the same on a device the
    constants were fitted on and on one priced by the generic constants."""
    set_ranking, timings, prepare = close_call
    if not fitted:
        prepare.unfitted()
    set_ranking([(8e-6, "kernel"), (8e-6 * decide.CLOSE_CALL * 0.99, "bmm")],
                {"kernel": 1.0, "bmm": 0.5})
    assert prepare(_problem((4, 64, 64, 4), 64)) == "bmm"
    assert timings == [("kernel", "bmm")]


def test_up_to_three_rivals_within_the_close_call_band_are_timed(close_call):
    """On a long product the model's best RIVALS are timed where each is priced within
    CLOSE_CALL of the first (the fastest measured runs); one beyond the band, or a fourth,
    is not."""
    set_ranking, timings, prepare = close_call
    four = [(1e-3, "kernel"), (1.2e-3, "bmm"), (1.9e-3, "dense"), (1.95e-3, "kernel_fma")]
    set_ranking(four, {"kernel": 3.0, "bmm": 2.0, "dense": 1.0, "kernel_fma": 0.5})
    assert prepare(_problem((1, 96, 96, 2), 25088)) == "dense"
    assert timings == [("kernel", "bmm", "dense")]
    set_ranking([(1e-3, "kernel"), (1.2e-3, "bmm"), (2.1e-3, "dense")])
    assert prepare(_problem((1, 96, 96, 4), 25088)) == "bmm"
    assert timings[-1] == ("kernel", "bmm")


@pytest.mark.parametrize("best_s, ratio, timed, runs", [
    # short: the band is SHORT_CLOSE_CALL (4x)
    (26e-6, 2.1, ("bmm", "block_dense", "kernel_skinny"), "kernel_skinny"),
    (26e-6, 3.9, ("bmm", "block_dense", "kernel_skinny"), "kernel_skinny"),
    (26e-6, 4.1, ("bmm", "block_dense"), "bmm"),
    (99e-6, 3.9, ("bmm", "block_dense", "kernel_skinny"), "kernel_skinny"),
    # from SHORT_PRODUCT_S (100 us) on: CLOSE_CALL (2x)
    (100e-6, 2.1, ("bmm", "block_dense"), "bmm"),
    (260e-6, 2.1, ("bmm", "block_dense"), "bmm")])
def test_a_short_product_times_rivals_of_a_wider_band(close_call, best_s, ratio, timed, runs):
    """Under SHORT_PRODUCT_S the model's prices err by 2x and more (a GEMM of fewer tiles
    than SMs), so a rival priced up to 4x the best is timed there, and on a longer product
    only up to 2x."""
    set_ranking, timings, prepare = close_call
    set_ranking([(best_s, "bmm"), (1.55 * best_s, "block_dense"),
                 (ratio * best_s, "kernel_skinny")],
                {"bmm": 49.0, "block_dense": 60.0, "kernel_skinny": 30.0})
    assert prepare(_problem((2, 192, 768, 4), 64)) == runs
    assert timings == [timed]


def test_the_band_is_4x_under_100_us_and_2x_from_there():
    assert decide.band(26e-6) == 4.0 and decide.band(99.9e-6) == 4.0
    assert decide.band(100e-6) == 2.0 and decide.band(2.6e-3) == 2.0


def test_a_settled_host_bound_tie_in_host_time_keeps_dense():
    """settle hands the rivals' names to the verdict: bmm and dense alike in time and host
    time (host-bound), the process's choice from then on is dense, whichever came first."""
    for order in (["bmm", "dense"], ["dense", "bmm"]):
        decide.forget_decisions()
        p = _problem((1, 96, 96, 2), 25088, dtype=numpy.float16)
        rivals = [Choice(name) for name in order]
        seconds = {"bmm": 14.2e-6, "dense": 14.3e-6}
        host = {"bmm": 13.8e-6, "dense": 13.9e-6}
        index = decide.settle(p, FITTED, "default", rivals, [seconds[n] for n in order],
                              [host[n] for n in order])
        assert order[index] == "dense"
        assert decide.choose(p, FITTED).backend == "dense"
    decide.forget_decisions()


def test_a_tuned_choice_is_not_timed_again(close_call):
    set_ranking, timings, prepare = close_call
    p = _problem((128, 128, 128, 1), 25088)
    set_ranking([(2.6e-3, "kernel"), (2.9e-3, "bmm")], {"kernel": 2.0, "bmm": 1.0})
    tuning_cache.put(p, FITTED, Choice("kernel"), {"kernel": 2.6e-3})
    assert prepare(p) == "kernel"
    assert timings == []


def test_a_kernel_still_compiling_settles_nothing(close_call, monkeypatch):
    set_ranking, timings, prepare = close_call
    p = _problem((128, 128, 128, 1), 25088)
    set_ranking([(2.6e-3, "kernel"), (2.9e-3, "bmm")], {"kernel": 2.0, "bmm": 1.0})

    def compiling(factor, X, layout, choice):
        raise ks.kernels.nvrtc.StillCompiling(("ks_mma.cu", "ks::ks_mma<...>", 0, 0, False))
    with monkeypatch.context() as m:
        m.setattr(single, "_prepared", compiling)
        with pytest.raises(ks.kernels.nvrtc.StillCompiling):
            prepare(p)
    assert timings == []
    assert prepare(p) == "bmm"


def test_every_rival_starts_compiling_in_the_first_call(close_call, monkeypatch):
    """While the first rival's kernel compiles, the others are prepared too (their compiles
    start in the same call), and the first StillCompiling is raised after them."""
    set_ranking, timings, prepare = close_call
    prepare.unfitted()
    set_ranking([(1e-5, "kernel"), (1.2e-5, "kernel_fma"), (1.5e-5, "kernel_skinny")],
                {"kernel": 1.0, "kernel_fma": 2.0, "kernel_skinny": 3.0})
    asked = []

    def compiling(factor, X, layout, choice):
        asked.append(choice.backend)
        raise ks.kernels.nvrtc.StillCompiling(("", choice.backend, 0, 0, False))
    monkeypatch.setattr(single, "_prepared", compiling)
    with ks.kernels.nvrtc.unless_compiled(), pytest.raises(ks.kernels.nvrtc.StillCompiling,
                                                           match="^kernel is compiling"):
        prepare(_problem((4, 64, 64, 4), 25088))
    assert asked == ["kernel", "kernel_fma", "kernel_skinny"] and timings == []


def test_a_deferred_close_call_compiles_both_and_is_timed_at_the_next_preparation(
        close_call, monkeypatch):
    """kscupy.warmup's pool: no timing beside the other products, both rivals prepared (their
    kernels compiled), the model's choice run, and the call left for a later preparation."""
    set_ranking, timings, prepare = close_call
    p = _problem((128, 128, 128, 1), 25088)
    set_ranking([(2.6e-3, "kernel"), (2.9e-3, "bmm")], {"kernel": 2.55e-3, "bmm": 2.49e-3})
    prepared_names = []

    def prepared(factor, X, layout, choice):
        prepared_names.append(choice.backend)
        return choice.backend
    monkeypatch.setattr(single, "_prepared", prepared)
    with decide.close_calls_deferred() as deferred:
        assert prepare(p) == "kernel"
        assert prepare(_problem((4, 64, 64, 4))) == "kernel"
    assert deferred == [p, _problem((4, 64, 64, 4))]
    assert prepared_names == ["kernel", "bmm", "kernel", "bmm"] and timings == []
    assert decide.choose(p).backend == "kernel"              # nothing settled yet
    assert prepare(p) == "bmm"                              # outside: timed, settled
    assert timings == [("kernel", "bmm")] and decide.choose(p).backend == "bmm"


def test_deferral_is_per_thread_and_nests(close_call):
    import threading
    set_ranking, timings, prepare = close_call
    set_ranking([(2.6e-3, "kernel"), (2.9e-3, "bmm")], {"kernel": 2.0, "bmm": 1.0})
    with decide.close_calls_deferred() as outer:
        with decide.close_calls_deferred() as inner:
            prepare(_problem((2, 64, 64, 4)))
        prepare(_problem((3, 64, 64, 4)))
        # another thread is not deferred: it times its close call
        other = threading.Thread(target=prepare, args=(_problem((5, 64, 64, 4)),))
        other.start()
        other.join()
    assert inner == [_problem((2, 64, 64, 4))] and outer == [_problem((3, 64, 64, 4))]
    assert timings == [("kernel", "bmm")]
    with decide.close_calls_deferred() as deferred:
        with decide.close_calls_timed():         # warmup's pass after its pool
            prepare(_problem((6, 64, 64, 4)))
    assert deferred == [] and len(timings) == 2


@pytest.mark.parametrize("model_right", [True, False])
def test_a_verdict_against_the_model_expires_what_was_built(close_call, model_right):
    """Chain plans and prepared runs priced with the model's choice are rebuilt once a
    close call finds the other candidate faster, and only then."""
    set_ranking, timings, prepare = close_call
    faster = {"kernel": 1.0, "bmm": 2.0} if model_right else {"kernel": 2.0, "bmm": 1.0}
    set_ranking([(2.6e-3, "kernel"), (2.9e-3, "bmm")], faster)
    epoch = decide.epoch
    prepare(_problem((7, 64, 64, 4)))
    assert decide.epoch == epoch + (0 if model_right else 1)


@pytest.fixture
def forgetting():
    """Decisions forgotten before and after the test."""
    decide.forget_decisions()
    yield
    decide.forget_decisions()


def test_expiring_prepared_runs_keeps_the_decisions_and_replans_chains(monkeypatch, forgetting):
    monkeypatch.setattr(device, "current", lambda: RATES)
    p = _problem((4, 64, 64, 4))
    choice = decide.choose(p)
    chain = ks.KSChain([ks.KSMatrix.random((1, 4, 4, 16), seed=1),
                        ks.KSMatrix.random((4, 4, 4, 4), seed=2)])
    plans = {}
    plan = ks.engine.plan(chain.factor_chain, "bsl", chain.dtype, 1000, plans)
    assert ks.engine.plan(chain.factor_chain, "bsl", chain.dtype, 1000, plans) is plan
    epoch = decide.epoch
    decide.expire_prepared_runs()
    assert decide.epoch == epoch + 1
    assert decide.choose(p) is choice                     # still memoized
    assert ks.engine.plan(chain.factor_chain, "bsl", chain.dtype, 1000, plans) is not plan
