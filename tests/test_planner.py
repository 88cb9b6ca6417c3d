"""Chain planning on the CPU: merging against dense products, plan structure, and the
contract between the planner's kernel names and kernels_cu/ks_chain.cu (compiled with nvcc)."""
import shutil
import subprocess

import numpy
import pytest

import kscupy as ks
from conftest import dense_oracle
from kscupy import _kernels, planner, tuning

RATES = tuning.DeviceRates(bandwidth=4e12, flops32=6.7e13, flops64=3.4e13, name="test",
                           cuda_runtime=0)


def _dense(chain_factors):
    D = dense_oracle(chain_factors[0].values)
    for f in chain_factors[1:]:
        D = D @ dense_oracle(f.values)
    return D


@pytest.mark.parametrize("pair", [((1, 2, 2, 8), (2, 2, 2, 4)), ((4, 2, 2, 1), (2, 2, 2, 2)),
                                  ((1, 2, 2, 6), (2, 2, 2, 3)), ((1, 3, 2, 2), (2, 1, 1, 2))])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128])
def test_merge_equals_the_product(pair, dtype):
    left, right = (ks.KSMatrix.random(p, dtype=dtype, seed=i) for i, p in enumerate(pair))
    merged = planner.merge(left, right)
    assert merged is not None and merged.dtype == dtype
    assert merged.nnz <= left.nnz + right.nnz
    ref = dense_oracle(left.values) @ dense_oracle(right.values)
    tol = 1e-6 if dtype == numpy.float32 else 1e-13
    assert numpy.abs(merged.todense() - ref).max() <= tol * numpy.abs(ref).max()


def test_merge_of_views():
    left = ks.KSMatrix.random((2, 2, 2, 2), dtype=numpy.complex64, seed=1).H
    right = ks.KSMatrix.random((1, 2, 2, 4), dtype=numpy.complex64, seed=2).T
    merged = planner.merge(left, right)
    ref = dense_oracle(left.values) @ dense_oracle(right.values)
    assert numpy.abs(merged.todense() - ref).max() < 1e-5


def test_merge_refuses_what_would_add_work():
    big = (ks.KSMatrix.random((1, 4, 4, 4)), ks.KSMatrix.random((4, 4, 4, 1)))   # dense 16 x 16
    assert planner.merge(*big) is None
    wide = (ks.KSMatrix.random((1, 8, 2, 1)), ks.KSMatrix.random((1, 2, 8, 1)))  # low rank
    assert planner.merge(*wide) is None


def test_merge_all_keeps_the_dft():
    F = ks.dft(64, dtype=numpy.complex128)
    merged = planner.merge_all(list(F.factors))
    assert [tuple(f.pattern) for f in merged] == [(1, 4, 4, 16), (4, 4, 4, 4), (16, 4, 4, 1)]
    assert numpy.abs(_dense(merged) - _dense(list(F.factors))).max() < 1e-12


def test_super_pattern_and_spans():
    assert planner.super_pattern([ks.KSPattern(4, 2, 2, 6), ks.KSPattern(6, 2, 2, 4)]) == (2, 2)


@pytest.mark.parametrize("n, segments", [(256, 1), (1024, 1), (16384, 2)])
def test_dft_plans(n, segments):
    F = ks.dft(n, dtype=numpy.complex64)
    plan = planner.plan(F, "bsf", numpy.complex64, 2**26 // n, rates=RATES)
    fused = [s for s in plan.steps if isinstance(s, planner.FusedSegment)]
    assert len(fused) == segments == plan.launches, plan.describe()
    assert fused[0].src is not None                  # the digit reversal is folded
    assert sum(len(s.factors) for s in fused) == (len(F) + 1) // 2   # radix-4 stages
    for seg in fused:
        assert seg.smem_bytes(8) <= planner.SMEM_BUDGET
    if segments > 1:
        assert fused[0].gorder is not None           # tiles walk the reversed input in lines


def test_plan_modes():
    F = ks.dft(1024, dtype=numpy.complex64)
    never = planner.plan(F, "bsl", numpy.complex64, 4096, fuse="never", rates=RATES)
    assert isinstance(never.steps[0], planner.Gather)
    assert all(isinstance(s, planner.FactorStep) for s in never.steps[1:])
    assert never.launches == len(F) + 1
    always = planner.plan(F, "bsl", numpy.complex64, 4096, fuse="always", rates=RATES)
    assert always.launches == 1
    with pytest.raises(ValueError, match="fuse"):
        planner.plan(F, "bsl", numpy.complex64, 4096, fuse="sometimes", rates=RATES)


@pytest.mark.parametrize("patterns", [((1, 64, 256, 16), (64, 64, 64, 1)),
                                      ((1, 192, 48, 2), (2, 48, 192, 1))])
def test_big_blocks_stay_per_factor_under_auto(patterns):
    """Large blocks are fused only on request (backend="fused")."""
    C = ks.KSChain([ks.KSMatrix.random(p) for p in patterns])
    for layout in ("bsl", "bsf"):
        plan = planner.plan(C, layout, numpy.float32, 25088, rates=RATES)
        assert all(isinstance(s, planner.FactorStep) for s in plan.steps)
        forced = planner.plan(C, layout, numpy.float32, 25088, fuse="always", rates=RATES)
        assert forced.launches == 1


def test_output_permutation_becomes_a_scatter_table():
    rng = numpy.random.default_rng(0)
    base = ks.hadamard(16, dtype=numpy.float32)
    out = rng.permutation(16)
    C = ks.KSChain(base.factors, output_permutation=out)
    seg = planner.plan(C, "bsf", numpy.float32, 100, fuse="always", rates=RATES).steps[-1]
    assert isinstance(seg, planner.FusedSegment)
    assert (seg.dst[out] == numpy.arange(16)).all()      # y[dst[p]] = z[p]  <=>  y = z[out]


def test_fused_backend_needs_the_gpu():
    F = ks.dft(8)
    with pytest.raises(TypeError, match="GPU"):
        F.matmul(numpy.ones((8, 2), dtype=numpy.complex128), backend="fused")
    with pytest.raises(ValueError, match="backend"):
        ks.KSMatrix.random((1, 2, 2, 1)).matmul(numpy.ones((2, 1)), backend="fused")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64, numpy.complex64, numpy.complex128])
def test_planned_segments_compile_with_nvcc(tmp_path, dtype):
    """The instantiations the planner asks for exist in kernels_cu/ks_chain.cu."""
    chains = [ks.KSChain([ks.KSMatrix.random(p, dtype=dtype) for p in pats]) for pats in
              ([(1, 24, 6, 2), (2, 6, 24, 1)], [(1, 4, 4, 8), (4, 2, 2, 4)],
               [(1, 6, 2, 2), (2, 1, 3, 2), (2, 6, 5, 1)])]
    if numpy.dtype(dtype).kind == "c":
        chains.append(ks.dft(4096, dtype=dtype))
    names = set()
    for chain in chains:
        for layout in ("bsl", "bsf"):
            plan = planner.plan(chain, layout, dtype, 1000, fuse="always", rates=RATES)
            names |= {_kernels.segment_name(s, dtype) for s in plan.steps
                      if isinstance(s, planner.FusedSegment)}
    args = ("const S*, S*, const long long*, long long, long long, long long, long long, "
            "long long, const int*, const int*, const int*, int, int, int, long long")
    lines = ['#include "ks_chain.cu"', f"using S = {_kernels._SCALAR[numpy.dtype(dtype)]};"]
    lines += [f"template __global__ void {name}({args});" for name in sorted(names)]
    src = tmp_path / "chain.cu"
    src.write_text("\n".join(lines) + "\n")
    out = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-I", str(_kernels.source_dir()),
                          "--device-c", "-o", str(tmp_path / "k.o"), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
