"""The CUDA sources compile as kscupy compiles them at run time (NVRTC, same options), for
every instantiation the Python side asks for. NVRTC needs no GPU: this runs in CI.

Each ``test_*_compile`` below names a family's instantiations as kscupy would ask for them
on the current device (an H200's facts without a GPU) and compiles them for sm_90 (to PTX).
:func:`test_other_architectures_compile` runs the same tests as a device of each other
architecture would (its facts: :func:`facts_of`), so families that architecture does not
run ask for nothing, and compiles a sample of what they ask for on to machine code for that
architecture, where ptxas refuses any instruction it lacks.
"""
import concurrent.futures
import dataclasses
import hashlib

import numpy
import pytest

import kscupy as ks
from kscupy.core import device
from kscupy.engine import planner, registry
from kscupy.kernels import (ks_direct, ks_matmul, ks_mma, ks_pair, ks_rows, ks_skinny,
                            ks_values_grad, nvrtc, transpose)
from kscupy.kernels.ks_chain import FusedSegment
from kscupy.core.problem import Problem
from nvrtc_program import LIBRARY, compile_source, supported_archs

pytestmark = pytest.mark.skipif(LIBRARY is None, reason="NVRTC is not installed (the test "
                                "extra installs nvidia-cuda-nvrtc-cu12 on Linux x86-64)")

DTYPES = [numpy.float16, numpy.float32, numpy.float64, numpy.complex64, numpy.complex128]

#: The architecture every instantiation is compiled for, and the others, each compiled for a
#: sample (those this NVRTC knows; CuPy supports each).
NATIVE = 90
OTHER_ARCHS = [cc for cc in (75, 80, 86, 89, 100, 120)
               if LIBRARY is not None and cc in supported_archs()]
#: Instantiations compiled per kernel and dtype or precision (its first template argument,
#: and ks_mma's second, its precision) on the other architectures: their code paths differ
#: by those, and by ``__CUDA_ARCH__``, more than by tile sizes.
SAMPLE = 1
_PATH_ARGUMENTS = {"ks::ks_mma": 2}


def facts_of(cc: int) -> device.DeviceFacts:
    """What kscupy reads off a device of compute capability ``cc``: an emulated one's limits
    (kscupy.core.device.EMULATED_LIMITS), or for Blackwell Hopper's features with the
    portable cluster size kscupy uses after Hopper."""
    if cc in device.EMULATED_LIMITS:
        return device.emulating(device.H200, cc)
    return dataclasses.replace(device.H200, name=f"sm_{cc}", compute_capability=cc,
                               max_cluster=8)


def rates() -> device.DeviceFacts:
    """The current device's facts with round rates, so that plans do not depend on them."""
    return dataclasses.replace(device.current(), bandwidth=4e12, flops32=6.7e13,
                               flops64=3.4e13, name="test", memory=80 * 2**30)


_collected = None      # {file: names} while test_other_architectures_compile collects


def _compile(filename, names):
    if _collected is not None:
        _collected.setdefault(filename, set()).update(names)
        return
    _compile_for(filename, names, f"compute_{NATIVE}")


def _compile_for(filename, names, arch, parts=2):
    """Compile ``names`` of ``filename`` for ``arch`` in ``parts`` programs at once (CI has
    two cores); a failure names the file, the architecture and NVRTC's errors."""
    source = (nvrtc.source_dir() / filename).read_text()
    names = sorted(names)
    chunks = [names[i::parts] for i in range(parts) if names[i::parts]]
    with concurrent.futures.ThreadPoolExecutor(len(chunks)) as pool:
        results = list(pool.map(
            lambda chunk: compile_source(source, chunk, nvrtc.source_dir(), arch), chunks))
    for ok, log in results:
        assert ok, f"{filename} for {arch}:\n{log[-4000:]}"


def _needs(available: bool, what: str):
    if not available:
        pytest.skip(f"{what} does not run on sm_{device.current().compute_capability}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_instantiations_compile(dtype):
    """ks_matmul in each ORDER, and the configurations the heuristic picks on a spread of
    problems, with their layout probes."""
    configs = {ks_matmul.KernelConfig(1, 128, 128, 8, 8, 8, 0),
               ks_matmul.KernelConfig(8, 4, 32, 8, 2, 4, 1),
               ks_matmul.KernelConfig(1, 2, 8, 2, 2, 4, 2)}
    for pattern in ((1, 1024, 1024, 1), (64, 2, 2, 64), (4, 64, 64, 1), (3, 5, 7, 2)):
        for layout, contiguous, B in (("bsl", True, 4096), ("bsf", False, 4096), ("bsl", True, 1)):
            problem = Problem(ks.KSPattern(*pattern), B, numpy.dtype(dtype), layout, contiguous,
                              False)
            configs.add(ks_matmul.heuristic_config(problem))
    names = {cfg.name(dtype) for cfg in configs}
    names |= {cfg.layout_probe_name(dtype) for cfg in configs}
    _compile("ks_matmul.cu", names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mma_instantiations_compile(dtype):
    """ks_mma in each ORDER (the group order with register-staged vector copies), both
    weight orientations and packed weights (the group order's transposed views and every
    dtype but float32), float64's 48-row warp pieces, vector and scalar copies, each precision the dtype supports and a
    two-blocks-per-SM bound, with layout probes (a few instantiations: each takes NVRTC
    about 0.3 s; the GPU suite compiles every candidate)."""
    _needs(registry.get("kernel").runs_on(device.current()), "ks_mma")
    names = set()
    vector = max(1, 16 // numpy.dtype(dtype).itemsize)
    precisions = [p for p in ks_mma.PRECISIONS if ks_mma.supports(dtype, p)]
    for pattern, layout, contiguous, transposed in (
            ((1, 1024, 1024, 1), "bsl", True, False), ((1, 64, 48, 1), "bsf", False, True),
            ((3, 5, 7, 2), "bsf", False, False), ((3, 5, 7, 2), "bsf", False, True),
            # b = 48: float64 takes 48-row lone warps (ks_mma._lone_warp_rows)
            ((1, 48, 192, 8), "bsl", True, False), ((2, 48, 96, 4), "bsf", False, False)):
        problem = Problem(ks.KSPattern(*pattern), 4096, numpy.dtype(dtype), layout,
                          contiguous, transposed)
        cfg = ks_mma.heuristic_config(problem)
        vx = min(vector, cfg.slots) if cfg.order == ks_mma.ORDER_GROUP else vector
        names |= {cfg.name(dtype, precision, transposed, vx, vector) for precision in precisions}
        names.add(cfg.name(dtype, "default", transposed, 1, 1))
        names.add(dataclasses.replace(cfg, min_blocks=2).name(dtype, "default", transposed,
                                                              vx, vector))
        if cfg.threads == 128:      # the tuner's four-blocks-per-SM bound (16-bit tiles)
            names.add(dataclasses.replace(cfg, min_blocks=4).name(dtype, "default",
                                                                  transposed, vx, vector))
        names.add(cfg.layout_probe_name(dtype, transposed))
    _compile("ks_mma.cu", names)


@pytest.mark.parametrize("batch", [25088, 8192])
def test_mma_group_instantiations_compile(batch):
    """ks_mma_group (the group order's own kernel) for the heuristic's long-batch tiles:
    float32's 64 x 64 pieces of several row heights (48 rows: W's copies decoded per rep; X
    by cp.async where there are eight slots), slots that divide the groups, two and three
    stages, W by bulk copies (chunks of 8) and stored or packed by cp.async (chunks of 16),
    vector and scalar copies, both precisions; float16's tiles in chunks of 16."""
    _needs(device.current().tma, "ks_mma_group")
    names = set()
    for pattern, transposed in (((8, 512, 512, 16), False), ((2, 48, 96, 4), False),
                                ((1, 96, 384, 12), True), ((3, 64, 32, 8), False),
                                ((1, 1024, 256, 6), False)):
        problem = Problem(ks.KSPattern(*pattern), batch, numpy.dtype(numpy.float32), "bsf",
                          False, transposed)
        heuristic = ks_mma.heuristic_config(problem)
        for cfg in (heuristic, dataclasses.replace(heuristic, bk=16)):   # bulk / cp.async W
            assert cfg.lean_group(numpy.float32), cfg
            for vx, vw in ((min(4, cfg.slots), 4), (1, 1), (2, 2)):
                for precision in ks_mma.PRECISIONS:
                    filename, name = cfg.source(numpy.float32, precision, transposed, vx, vw)
                    assert filename == "ks_mma_group.cu"
                    names.add(name)
    # the 16-bit path: the heuristic's tiles (chunks of 16, bulk W) at vectors of eight groups
    # down to one (bfloat16's twins: test_bfloat16_twins_of_the_float16_instantiations_compile)
    for pattern in ((8, 512, 512, 16), (2, 48, 96, 4), (1, 96, 384, 12), (5, 130, 24, 2)):
        problem = Problem(ks.KSPattern(*pattern), batch, numpy.dtype(numpy.float16), "bsf",
                          False, False)
        cfg = ks_mma.heuristic_config(problem)
        assert cfg.lean_group(numpy.float16) and cfg.bk == 16, cfg
        for vx in sorted({min(8, cfg.slots), 2, 1}):
            filename, name = cfg.source(numpy.float16, "default", False, vx, 8)
            assert filename == "ks_mma_group.cu"
            names.add(name)
    _compile("ks_mma_group.cu", names)


def test_pair_instantiations_compile():
    """ks_pair (two factors fused on the tensor cores) as make_pair_segment makes it for
    square blocks in place, a bottleneck and ragged blocks (MASKED), in both layouts and
    precisions, with vector and scalar copies, and the other tile shapes the GPU tests run."""
    _needs(device.current().tensor_cores, "ks_pair")
    names = set()
    for patterns in (((32, 32, 32, 1), (1, 32, 32, 32)), ((2, 48, 192, 1), (1, 192, 48, 2)),
                     ((3, 20, 12, 2), (2, 9, 30, 2))):
        factors = tuple(ks.KSMatrix.random(p, dtype=numpy.float32).factor for p in patterns)
        for layout in ("bsf", "bsl"):
            chosen = ks_pair.make_pair_segment(factors, numpy.float32, layout)
            for segment in (chosen, ks_pair.PairSegment(factors, layout, 16, 16, 2),
                            ks_pair.PairSegment(factors, layout, 8, 8, 1)):
                for precision in ks_pair.PRECISIONS:
                    names |= {segment.name(precision, 4, 4), segment.name(precision, 1, 1)}
    _compile("ks_pair.cu", names)


def test_direct_instantiations_compile():
    """The direct kernel, one instantiation per dtype."""
    _compile("ks_direct.cu", {ks_direct.name(dtype) for dtype in DTYPES})


def test_transpose_instantiations_compile():
    """The tiled transpose at every vector width of every dtype (up to 8 bytes), and the
    few rows' kernel of every dtype."""
    names = {transpose.name(dtype, v) for dtype in DTYPES
             for v in (1, 2, 4) if v * numpy.dtype(dtype).itemsize <= 8 or v == 1}
    names |= {transpose.few_rows_name(dtype) for dtype in DTYPES}
    _compile("transpose.cu", names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_skinny_instantiations_compile(dtype):
    """ks_skinny and ks_skinny_staged as the heuristic configures them for batches of 1 to
    32, and with one lane and with whole warps per row, at each vector width the dtype
    allows."""
    isz = numpy.dtype(dtype).itemsize
    names = set()
    for pattern in ((1, 1024, 1024, 1), (64, 2, 2, 64), (3, 5, 7, 2), (1, 48, 48, 4)):
        for B in (1, 3, 8, 32):
            problem = Problem(ks.KSPattern(*pattern), B, numpy.dtype(dtype), "bsl", True, False)
            cfg = ks_skinny.heuristic_config(problem)
            v = ks_skinny.vector_width(isz, pattern[2], cfg.nb)
            names |= {cfg.name(dtype, v), cfg.name(dtype, v, staged=True)}
    for nb in (1, 8):
        for lanes in (1, 32):
            v = ks_skinny.vector_width(isz, 1024, nb)
            for staged in (False, True):
                names |= {ks_skinny.SkinnyConfig(nb, lanes).name(dtype, v, staged),
                          ks_skinny.SkinnyConfig(nb, lanes).name(dtype, 1, staged)}
    _compile("ks_skinny.cu", names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_planned_segments_compile(dtype):
    """The ks_chain instantiations (and layout probes) the planner asks for."""
    chains = [ks.KSChain([ks.KSMatrix.random(p, dtype=dtype) for p in pats]) for pats in
              ([(1, 24, 6, 2), (2, 6, 24, 1)], [(1, 4, 4, 8), (4, 2, 2, 4)],
               [(1, 6, 2, 2), (2, 1, 3, 2), (2, 6, 5, 1)])]
    if numpy.dtype(dtype).kind == "c":
        chains.append(ks.dft(4096, dtype=dtype))
    names = set()
    for chain in chains:
        for layout in ("bsl", "bsf"):
            plan = planner.plan(chain.factor_chain, layout, dtype, 1000, fuse="always", device=rates(),
                                rows=False)
            for step in plan.steps:
                if isinstance(step, FusedSegment):
                    names |= {step.name(dtype), step.layout_probe_name(dtype)}
    _compile("ks_chain.cu", names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_segments_compile(dtype):
    """ks_rows for nesting, non-nesting, mixed-radix, radix-16 and odd-length chains, both
    walk axes, element-wise and vector accesses, with layout probes."""
    dtype = numpy.dtype(dtype)
    chains = [[(2**l, 2, 2, 2**(8 - l)) for l in range(9)],
              [(1, 4, 4, 8), (4, 2, 2, 4), (2, 4, 4, 4), (32, 1, 1, 1)],
              [(1, 3, 3, 4), (3, 2, 2, 2), (6, 2, 2, 1)],
              [(1, 16, 16, 8), (16, 8, 8, 1)],
              [(5, 3, 3, 7), (1, 7, 7, 15), (35, 3, 3, 1)]]
    vector = max(1, 16 // dtype.itemsize)
    names = set()
    for pats in chains:
        factors = [ks.KSMatrix.random(p, dtype=dtype).factor for p in reversed(pats)]
        for layout in ("bsl", "bsf"):
            for B in (3, 4096):
                seg = ks_rows.make_row_segment(factors, dtype, layout, B)
                names |= {seg.name(dtype), seg.layout_probe_name(dtype)}
                walked = seg.n if layout == "bsf" else seg.rows
                v = max(w for w in (1, 2, 4, 8, 16) if w <= vector and walked % w == 0)
                names.add(seg.name(dtype, v, v))     # vectors along t, or rows
                if layout == "bsf":                  # the last pass writing Y, or not
                    names |= {dataclasses.replace(seg, to_y=to_y).name(dtype, v, v)
                              for to_y in (False, True)}
    _compile("ks_rows.cu", names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stage_segments_compile(dtype):
    """ks_rows with computed stages: Hadamard stages (scaled and not), and for complex
    dtypes DFT stages with twiddles, in the chain's own, transposed and adjoint views,
    mixed with stored factors."""
    dtype = numpy.dtype(dtype)
    chains = [ks.hadamard(256, dtype=dtype), ks.hadamard(64, normalized=True, dtype=dtype)]
    if dtype.kind == "c":
        F = ks.dft(512, dtype=dtype, norm="ortho")
        chains += [F, F.T, F.H, ks.butterfly(64, dtype=dtype) @ ks.dft(64, dtype=dtype)]
    names = set()
    for chain in chains:
        factors = [K.factor for K in reversed(chain.factors)]
        assert any(ks_rows.stage_of(f)[0] != ks_rows.STORED for f in factors)
        for layout in ("bsl", "bsf"):
            seg = ks_rows.make_row_segment(factors, dtype, layout, 4096)
            names.add(seg.name(dtype))
    _compile("ks_rows.cu", names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cluster_segments_compile(dtype):
    """ks_rows_cluster (tiles over thread-block clusters, up to Hopper's 16 blocks):
    batch-size-last with computed and stored factors, rank bits at the top and the bottom
    of the first pass's digits, the computed bit reversal, element-wise and vector rows;
    batch-size-first with stored factors; with layout probes."""
    _needs(device.current().max_cluster > 1, "ks_rows_cluster")
    dtype = numpy.dtype(dtype)
    chains = [ks.hadamard(4096, dtype=dtype), ks.hadamard(8192, dtype=dtype),
              ks.butterfly(1024, dtype=dtype)]
    if dtype.kind == "c":
        chains.append(ks.dft(1024, dtype=dtype))
    vector = max(1, 16 // dtype.itemsize)
    names = set()
    for chain in chains:
        factors = [K.factor for K in reversed(chain.factors)]
        seg = ks_rows.make_row_segment(factors, dtype, "bsl", 65536,
                                       src=chain.input_permutation,
                                       max_cluster=ks_rows.MAX_CLUSTER)
        assert seg.cluster > 1, seg.describe()
        lo = seg.first_pass_bits[0]
        for s in (seg, dataclasses.replace(seg, rank_shift=lo)):
            names |= {s.name(dtype), s.name(dtype, vector, vector), s.layout_probe_name(dtype)}
    # batch-size-first: stored blocks, the rank bits in the last pass (which writes Y) or in
    # the first (after the load), element-wise and vector loads and stores
    factors = [K.factor for K in reversed(ks.butterfly(4096, dtype=dtype).factors)]
    one = ks_rows.make_row_segment(factors, dtype, "bsf", 65536, max_cluster=1)
    last = dataclasses.replace(one, cluster=2, rank_shift=11)
    first = dataclasses.replace(last, factors=tuple(factors[::-1]), to_y=False)
    assert last.to_y and first.pass_bits[0][1] == 12, first.describe()
    for s in (last, first):
        names |= {s.name(dtype), s.name(dtype, vector, vector), s.layout_probe_name(dtype)}
    _compile("ks_rows.cu", names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_values_grad_instantiations_compile(dtype):
    """ks_values_grad (the values' gradient on the tensor cores) in both layouts and every
    tile of the dtype, with the widest vector copies and single elements, and its
    shared-memory probe."""
    _needs(device.current().tensor_cores, "ks_values_grad")
    widest = max(1, 16 // numpy.dtype(dtype).itemsize)
    tiles = ks_values_grad.TILES if numpy.dtype(dtype).itemsize == 2 else ("small",)
    names = {ks_values_grad.name(dtype, layout, vector, tile=tile)
             for layout in ks_values_grad.LAYOUTS for vector in {1, widest} for tile in tiles}
    names |= {ks_values_grad.smem_probe_name(dtype, layout, tile)
              for layout in ks_values_grad.LAYOUTS for tile in tiles}
    _compile("ks_values_grad.cu", names)


#: Every test above that names instantiations, with its parameters.
_FAMILIES = [(test, params) for test, params in (
    (test_matmul_instantiations_compile, DTYPES), (test_mma_instantiations_compile, DTYPES),
    (test_mma_group_instantiations_compile, [25088]), (test_pair_instantiations_compile, [()]),
    (test_direct_instantiations_compile, [()]), (test_transpose_instantiations_compile, [()]),
    (test_skinny_instantiations_compile, DTYPES), (test_planned_segments_compile, DTYPES),
    (test_row_segments_compile, DTYPES), (test_stage_segments_compile, DTYPES),
    (test_cluster_segments_compile, DTYPES), (test_values_grad_instantiations_compile, DTYPES))]


def _sample(names, cc):
    """:data:`SAMPLE` names per kernel and dtype or precision, a different draw per
    architecture (so the architectures together cover more)."""
    groups = {}
    for name in names:
        kernel = name.split("<")[0]
        key = ",".join(name.split(",")[:_PATH_ARGUMENTS.get(kernel, 1)])
        groups.setdefault(key, []).append(name)
    draw = lambda name: hashlib.sha256(f"{cc}|{name}".encode()).digest()
    return {n for group in groups.values() for n in sorted(group, key=draw)[:SAMPLE]}


def _asked_for(facts, monkeypatch):
    """``{file: names}``: every instantiation the families above ask for on a device of
    these facts."""
    global _collected
    monkeypatch.setattr(device, "current", lambda: facts)
    _collected = {}
    try:
        for test, params in _FAMILIES:
            for param in params:
                try:
                    test(*(param if isinstance(param, tuple) else (param,)))
                except pytest.skip.Exception:
                    pass
        return _collected
    finally:
        _collected = None


@pytest.mark.parametrize("cc", OTHER_ARCHS)
def test_other_architectures_compile(cc, monkeypatch):
    """What kscupy asks for on a device of compute capability ``cc`` compiles for it, to
    machine code (a sample per kernel, dtype and precision)."""
    collected = _asked_for(facts_of(cc), monkeypatch)
    if cc < 80:
        assert not {"ks_mma.cu", "ks_mma_group.cu", "ks_pair.cu"} & set(collected)
    if cc < 90:
        assert "ks_mma_group.cu" not in collected
        assert not any("ks_rows_cluster" in n for n in collected.get("ks_rows.cu", ()))
    for filename, names in sorted(collected.items()):
        _compile_for(filename, _sample(names, cc), f"sm_{cc}")


def test_bfloat16_twins_of_the_float16_instantiations_compile(monkeypatch):
    """bfloat16 runs float16's code paths with its own scalar type (ks_scalar.cuh) and MMA
    (ks_tensor_core.cuh): the bfloat16 twin of every float16 instantiation the families ask
    for compiles, on this device's facts for sm_90 (to PTX) and, a sample, on an A100's for
    sm_80 (to machine code: the bfloat16 m16n8k16 MMA arrived with sm_80)."""
    def twins(collected):
        found = {filename: {n.replace("ks::float16", "ks::bfloat16") for n in names
                            if "ks::float16" in n}
                 for filename, names in collected.items()}
        return {filename: names for filename, names in found.items() if names}
    native = twins(_asked_for(device.current(), monkeypatch))
    assert {"ks_mma.cu", "ks_matmul.cu", "ks_values_grad.cu"} <= set(native), sorted(native)
    for filename, names in sorted(native.items()):
        _compile_for(filename, names, f"compute_{NATIVE}")
    for filename, names in sorted(twins(_asked_for(facts_of(80), monkeypatch)).items()):
        _compile_for(filename, _sample(names, 80), "sm_80")


def test_a_broken_source_fails():
    """The check can fail: a template error is reported, not ignored."""
    ok, log = compile_source("template <int N> __global__ void k(int* x) { x[0] = N + ; }",
                             ["k<1>"], nvrtc.source_dir())
    assert not ok and "error" in log
