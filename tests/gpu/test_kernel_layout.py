"""Python's copies of the kernels' layouts against the compiled kernels (``pytest -m gpu``).

kscupy/kernels/ks_matmul.py and ks_chain.py compute each launch's shared memory, thread count
and vector widths from a Python mirror of the kernel's layout. Each kernel family has a
layout probe (``ks_matmul_layout``, ``ks_chain_layout``) compiled from the same layout struct
the kernel uses; these tests launch the probes for every configuration the heuristic and
the planner produce on a spread of problems and compare, value by value. A launch with less
shared memory than the layout needs must stop (the kernels check ``%dynamic_smem_size``).
"""
import subprocess
import sys
import textwrap

import numpy
import pytest

import kscupy as ks
from conftest import DTYPES, gpu_available

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402

from kscupy.core import device as devices  # noqa: E402
from kscupy.engine import planner  # noqa: E402
from kscupy.kernels import ks_matmul, ks_mma, ks_rows, nvrtc  # noqa: E402
from kscupy.kernels.ks_chain import FusedSegment  # noqa: E402
from kscupy.core.problem import Problem  # noqa: E402



def _probe(filename, names):
    """Launch each probe once; returns {name: reported values}."""
    module = cupy.RawModule(code=(nvrtc.source_dir() / filename).read_text(),
                            options=("-std=c++17", f"-I{nvrtc.source_dir()}"),
                            name_expressions=sorted(names))
    out = {}
    for name in names:
        buf = cupy.full(8, -1, dtype=numpy.int64)
        module.get_function(name)((1,), (1,), (buf,))
        out[name] = tuple(int(v) for v in buf.get())
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_matmul_layout_matches_the_kernel(dtype):
    dtype = numpy.dtype(dtype)
    configs = set()
    for pattern in ((1, 1024, 1024, 1), (64, 2, 2, 64), (4, 64, 64, 1), (3, 5, 7, 2),
                    (1, 48, 192, 16), (16, 8, 8, 16)):
        for layout, contiguous, B in (("bsl", True, 4096), ("bsf", False, 4096),
                                      ("bsl", True, 1), ("bsf", False, 3)):
            problem = Problem(ks.KSPattern(*pattern), B, dtype, layout, contiguous, False)
            configs.update(ks_matmul.candidate_configs(problem))
    reported = _probe("ks_matmul.cu", {c.layout_probe_name(dtype) for c in configs})
    for config in configs:
        got = reported[config.layout_probe_name(dtype)][:4]
        assert got == config.layout(dtype.itemsize), (config, got)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_chain_layout_matches_the_kernel(dtype):
    dtype = numpy.dtype(dtype)
    device = devices.current()
    chains = [ks.KSChain([ks.KSMatrix.random(p, dtype=dtype, xp=cupy, seed=i)
                          for i, p in enumerate(pats)]) for pats in
              ([(1, 24, 6, 2), (2, 6, 24, 1)], [(1, 4, 4, 8), (4, 2, 2, 4)],
               [(1, 6, 2, 2), (2, 1, 3, 2), (2, 6, 5, 1)], [(2, 2, 2, 1), (1, 2, 2, 2)])]
    chains.append(ks.hadamard(256, dtype=dtype, xp=cupy))
    if dtype.kind == "c":
        chains.append(ks.dft(4096, dtype=dtype, xp=cupy))
    segments = []
    for chain in chains:
        for layout in ("bsl", "bsf"):
            for batch in (1, 1000):
                plan = planner.plan(chain.factor_chain, layout, dtype, batch, fuse="always",
                                    device=device, rows=False)
                segments += [s for s in plan.steps if isinstance(s, FusedSegment)]
    assert segments
    reported = _probe("ks_chain.cu", {s.layout_probe_name(dtype) for s in segments})
    for seg in segments:
        got = reported[seg.layout_probe_name(dtype)][:7]
        assert got == seg.layout(dtype.itemsize), (seg.describe(), got)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_rows_layout_matches_the_kernel(dtype):
    dtype = numpy.dtype(dtype)
    chains = [ks.hadamard(n, dtype=dtype, xp=cupy) for n in (2, 256, 4096)]
    chains.append(ks.KSChain([ks.KSMatrix.random(p, dtype=dtype, xp=cupy, seed=i) for i, p in
                              enumerate([(5, 3, 3, 7), (1, 7, 7, 15), (35, 3, 3, 1)])]))
    # stored blocks of a long vector: batch-size-first tiles on a cluster (where it has them)
    chains.append(ks.butterfly(4096, dtype=dtype, xp=cupy, seed=3))
    segments = []
    for chain in chains:
        factors = [K.factor for K in reversed(chain.factors)]
        for layout in ("bsl", "bsf"):
            for batch in (1, 1000):
                segments.append(ks_rows.make_row_segment(factors, dtype, layout, batch))
    reported = _probe("ks_rows.cu", {s.layout_probe_name(dtype) for s in segments})
    for seg in segments:
        got = reported[seg.layout_probe_name(dtype)][:3]
        assert got == seg.tile_layout(dtype.itemsize), (seg.describe(), got)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_mma_layout_matches_the_kernel(dtype):
    dtype = numpy.dtype(dtype)
    cases = set()
    for pattern in ((1, 1024, 1024, 1), (64, 2, 2, 64), (4, 64, 64, 1), (3, 5, 7, 2),
                    (1, 48, 192, 16), (16, 8, 8, 16)):
        for layout, contiguous, B in (("bsl", True, 4096), ("bsf", False, 4096),
                                      ("bsl", True, 1), ("bsf", False, 3)):
            for transposed in (False, True):
                problem = Problem(ks.KSPattern(*pattern), B, dtype, layout, contiguous,
                                  transposed)
                cases.update((c, transposed) for c in ks_mma.candidate_configs(problem))
    reported = _probe("ks_mma.cu", {c.layout_probe_name(dtype, t) for c, t in cases})
    for config, transposed in cases:
        got = reported[config.layout_probe_name(dtype, transposed)][:4]
        assert got == config.layout(dtype.itemsize, transposed), (config, transposed, got)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_mma_packed_weights_on_the_gpu(dtype):
    """ks_mma.packed_weights of a CuPy factor equals that of the same values on NumPy
    (tests/test_mma_config.py checks that one against its definition), for stored,
    transposed and adjoint views."""
    rng = numpy.random.default_rng(5)
    values = rng.standard_normal((3, 20, 12, 2))
    if numpy.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(values.shape)
    values = values.astype(dtype)
    config = ks_mma.MmaConfig(slots=4, bm=16, bn=32, bk=8, wm=1, wn=1, stages=2,
                              order=ks_mma.ORDER_GROUP)
    on_gpu, on_cpu = ks.KSMatrix(cupy.asarray(values)), ks.KSMatrix(values)
    for view in (lambda K: K, lambda K: K.T, lambda K: K.H):
        got = ks_mma.packed_weights(view(on_gpu).factor, config)
        assert isinstance(got, cupy.ndarray) and got.flags.c_contiguous
        assert numpy.array_equal(cupy.asnumpy(got),
                                 ks_mma.packed_weights(view(on_cpu).factor, config))


def test_a_launch_with_too_little_shared_memory_stops():
    """The kernel refuses a launch below its layout's shared memory (in a child process:
    the trap ends the CUDA context)."""
    script = textwrap.dedent("""
        import numpy, cupy, kscupy as ks
        from kscupy.kernels import ks_matmul, nvrtc
        from kscupy.kernels.operands import division_magic
        K = ks.KSMatrix.random((2, 8, 8, 2), dtype=numpy.float32, xp=cupy, seed=0)
        cfg = ks_matmul.KernelConfig(1, 8, 32, 8, 2, 4, 0)
        X = cupy.ones((32, 64), dtype=numpy.float32)
        Y = cupy.empty((32, 64), dtype=numpy.float32)
        smem = cfg.smem_bytes(4)
        fn = nvrtc.function("ks_matmul.cu", cfg.name(numpy.float32), smem, 0)
        i32, i64 = numpy.int32, numpy.int64
        args = (X, Y, K.factor.tiles, i32(4), i32(8), i32(8), i32(2), i64(64), i64(64), i64(1),
                i64(64), i64(1), i32(8), i32(1), i32(0), i32(1), i32(4), i64(8),
                numpy.uint64(division_magic(2)))
        fn((8,), (cfg.threads,), args, shared_mem=smem)
        cupy.cuda.runtime.deviceSynchronize()
        print("full launch ok", flush=True)
        fn((8,), (cfg.threads,), args, shared_mem=smem - 16)
        cupy.cuda.runtime.deviceSynchronize()
        print("short launch ran")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert "full launch ok" in run.stdout, run.stderr[-2000:]
    assert "short launch ran" not in run.stdout and run.returncode != 0
