"""CPU tests of the launch-configuration heuristic, the tuning cache and the kernel sources."""
import itertools
import json
import shutil
import subprocess

import numpy
import pytest

from kscupy import KSPattern, tuning
from kscupy._kernels import KernelConfig, source_dir

SMEM_LIMIT = 48 * 1024


def _problem(pattern, B=1000, dtype=numpy.float32, layout="bsl", contiguous=True, transposed=False):
    return tuning.Problem(KSPattern(*pattern), B, numpy.dtype(dtype), layout, contiguous, transposed)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64, numpy.complex64, numpy.complex128])
def test_heuristic_is_valid_everywhere(dtype):
    sizes = [1, 2, 3, 7, 16, 48, 100, 1024]
    for (a, b, c, d), B, (layout, contiguous) in itertools.product(
            itertools.product([1, 5, 4096], sizes, sizes, [1, 2, 3, 64, 4096]),
            [1, 3, 127, 100003], [("bsl", True), ("bsf", False), ("bsl", False)]):
        p = _problem((a, b, c, d), B, dtype, layout, contiguous)
        cfg = tuning.heuristic_config(p)
        assert 1 <= cfg.threads <= 1024, (p, cfg)
        assert cfg.smem_bytes(p.itemsize) <= SMEM_LIMIT, (p, cfg)
        assert cfg.bm % cfg.tm == 0 and cfg.bn % cfg.tn == 0
        assert cfg.tm * cfg.tn * p.itemsize <= 256 or cfg.tm * cfg.tn <= 4
        for cand in tuning.candidate_configs(p):
            assert cand.smem_bytes(p.itemsize) <= SMEM_LIMIT and cand.threads <= 1024


def test_heuristic_picks_the_layout_friendly_order():
    assert tuning.heuristic_config(_problem((1, 256, 256, 1), 25088)).order == 0
    assert tuning.heuristic_config(_problem((4, 64, 64, 16), 25088, layout="bsf",
                                            contiguous=False)).order == 1
    assert tuning.heuristic_config(_problem((4, 64, 64, 1), 25088, layout="bsf",
                                            contiguous=False)).order == 2
    # a batch of one in BSL is laid out like BSF: walk the features
    assert tuning.heuristic_config(_problem((4, 64, 64, 16), 1)).order == 1
    big = tuning.heuristic_config(_problem((1, 1024, 1024, 1), 25088))
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
    assert [_problem((1, 2, 2, 1), B).batch_bucket() for B in (1, 2, 3, 4, 5, 1000)] == \
        [1, 2, 4, 4, 8, 1024]
    k1 = _problem((2, 3, 4, 5), 1000).key()
    assert k1 != _problem((2, 3, 4, 5), 1000, transposed=True).key()
    assert k1 != _problem((2, 3, 4, 5), 1000, layout="bsf").key()
    assert k1 == _problem((2, 3, 4, 5), 999).key()


def test_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path / "c"))
    assert tuning.cache_path() == tmp_path / "c" / "tuning.json"
    cache = tuning._cache()
    cfg = KernelConfig(1, 64, 128, 8, 4, 8, 0)
    cache.put("gpu|cuda13000|key", tuning.Choice("kernel", cfg), {"kernel": 1e-3, "bmm": 2e-3})
    cache.put("gpu|cuda13000|other", tuning.Choice("bmm"), {"bmm": 1e-3})
    data = json.loads((tmp_path / "c" / "tuning.json").read_text())
    assert data["gpu|cuda13000|key"]["config"] == [1, 64, 128, 8, 4, 8, 0]
    fresh = tuning._TuningCache(tmp_path / "c" / "tuning.json")    # as a new process sees it
    assert fresh.get("gpu|cuda13000|key") == tuning.Choice("kernel", cfg)
    assert fresh.get("gpu|cuda13000|other") == tuning.Choice("bmm")
    assert fresh.get("missing") is None
    tuning.clear_cache()
    assert not (tmp_path / "c" / "tuning.json").exists()


def test_cache_ignores_corrupt_files(tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text("{not json")
    assert len(tuning._TuningCache(path)) == 0
    path.write_text(json.dumps({"k": {"backend": "kernel", "config": [1, 2]}}))
    assert tuning._TuningCache(path).get("k") is None


def test_cache_dir_defaults_to_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("KSCUPY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tuning.cache_path() == tmp_path / "kscupy" / "tuning.json"


def test_cost_model_prefers_fusion_when_memory_bound():
    rates = tuning.DeviceRates(bandwidth=3e12, flops32=6e13, flops64=3e13, name="x", cuda_runtime=0)
    small_blocks = _problem((64, 2, 2, 64), 25088)
    assert tuning.estimate_seconds(small_blocks, "kernel", rates) < \
        tuning.estimate_seconds(small_blocks, "bmm", rates)
    sparse = _problem((16, 64, 64, 16), 25088)       # density 1/256: dense does 256x the work
    assert tuning.estimate_seconds(sparse, "dense", rates) > \
        10 * tuning.estimate_seconds(sparse, "kernel", rates)
    # wider dtypes and complex arithmetic take longer
    for dtype in (numpy.float64, numpy.complex64):
        assert tuning.estimate_seconds(_problem((4, 64, 64, 4), 25088, dtype), "kernel", rates) > \
            tuning.estimate_seconds(_problem((4, 64, 64, 4), 25088), "kernel", rates)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("scalar", ["float", "double", "ks::cplx<float>", "ks::cplx<double>"])
def test_kernel_sources_compile_with_nvcc(tmp_path, scalar):
    """Every file in kernels_cu/ compiles (as NVRTC would see it: no host headers)."""
    order_cases = [(1, 128, 128, 8, 8, 8, 0), (8, 4, 32, 8, 2, 4, 1), (1, 2, 8, 2, 2, 4, 2)]
    lines = [f'#include "{path.name}"' for path in sorted(source_dir().glob("*.cu*"))]
    args = ("const S*, S*, const S*, int, int, int, int, long long, long long, long long, "
            "long long, long long, int, int, int, int, int, long long")
    lines.append(f"using S = {scalar};")
    for cfg in order_cases:
        lines.append(f"template __global__ void ks::ks_matmul<S, {', '.join(map(str, cfg))}>({args});")
    src = tmp_path / "instantiate.cu"
    src.write_text("\n".join(lines) + "\n")
    out = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-I", str(source_dir()),
                          "--device-c", "-o", str(tmp_path / "k.o"), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr


def test_paper_grid_has_627_patterns_and_sample_spans_it():
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
    from pattern_grid import paper_grid, stratified_sample
    grid = paper_grid()
    assert len(grid) == 627 and len(set(grid)) == 627
    sample = stratified_sample(grid, 60)
    assert len(sample) == 60 and set(sample) <= set(grid)
    hs = sorted(KSPattern(*p).h for p in sample)
    all_h = sorted(KSPattern(*p).h for p in grid)
    assert hs[0] == all_h[0] and hs[-1] == all_h[-1]
