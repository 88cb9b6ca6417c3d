"""Which way the values' gradient runs on the GPU (kscupy.engine.gradient_paths), on the CPU:
the ways, CuPy's stream and the timing stood in for. The ways themselves are tested against
the definition on the GPU (tests/gpu/test_values_grad_kernel.py) and on a cuBLAS stand-in
(tests/test_group_gemm.py)."""
import sys
import types

import numpy
import pytest

from kscupy.core import device
from kscupy.engine import gradient_paths as paths

F16, F32 = numpy.dtype(numpy.float16), numpy.dtype(numpy.float32)


class Operand:
    """Shape, strides, dtype and device of a C-order CuPy array, without CuPy."""
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, numpy.dtype(dtype)
        self.strides = (shape[1] * self.dtype.itemsize, self.dtype.itemsize)
        self.data = types.SimpleNamespace(ptr=256, device_id=0)


@pytest.fixture
def world(monkeypatch):
    """The ways answer their names (None where ``world.none`` holds them) and are counted
    (``world.planned`` the ways planned); timing gives ``world.seconds``; the stream
    captures where ``world.capturing``."""
    w = types.SimpleNamespace(calls=[], timed=[], seconds={}, none=set(), capturing=False,
                              planned=[])

    def run(way, G, X, pattern, layout):
        w.calls.append(way)
        return None if way in w.none else way

    def timing(runs, X):
        names = [r(None) for r in runs]
        w.timed.append(names)
        return [w.seconds[n] for n in names]
    stream = types.SimpleNamespace(is_capturing=lambda: w.capturing)
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: stream))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(paths, "_run", run)

    def way_run(way, G, X, pattern, layout):           # the planned ways: the same answers
        w.planned.append(way)
        return None if way in w.none else (lambda G, X: run(way, G, X, pattern, layout))
    monkeypatch.setattr(paths, "_way_run", way_run)
    monkeypatch.setattr(paths, "_in_values_order", lambda way: lambda B: B)
    monkeypatch.setattr(paths, "pipeline_seconds", timing)
    paths.forget()
    paths._ways.cache_clear()
    yield w
    paths.forget()


def bsf(pattern, B, dtype):
    a, b, c, d = pattern
    return Operand((B, a * b * d), dtype), Operand((B, a * c * d), dtype)


def test_a_long_batch_times_the_ways_once_and_keeps_the_fastest(world):
    pattern = (2, 16, 16, 4)
    G, X = bsf(pattern, 4096, F32)
    world.seconds = {"kernel": 3.0, "cublas": 2.0, "cublas_whole": 2.5, "cublas_diagonal": 1.0}
    assert paths.values_gradient(G, X, pattern, "bsf") == "cublas_diagonal"
    assert world.timed == [["kernel", "cublas", "cublas_whole", "cublas_diagonal"]]
    assert paths.choice(G, X, pattern, "bsf") == "cublas_diagonal"
    world.calls.clear()
    G2, X2 = bsf(pattern, 5000, F32)                     # the same power-of-two bucket
    assert paths.values_gradient(G2, X2, pattern, "bsf") == "cublas_diagonal"
    assert world.calls == ["cublas_diagonal"] and len(world.timed) == 1


def test_a_repeated_gradient_runs_its_plan(world):
    """The way chosen (timed or default) is planned for operands laid out like these, once:
    a repeated gradient runs the plan alone (no timing, no choice); other strides plan
    anew; forget drops the plans; a gradient computed while a graph is captured plans
    nothing (its shape is timed after the capture)."""
    pattern = (2, 16, 16, 4)
    G, X = bsf(pattern, 4096, F32)
    world.seconds = {"kernel": 3.0, "cublas": 1.0, "cublas_whole": 2.5, "cublas_diagonal": 2.0}
    assert paths.values_gradient(G, X, pattern, "bsf") == "cublas"     # timed, not planned
    assert world.planned == []
    for _ in range(3):
        assert paths.values_gradient(G, X, pattern, "bsf") == "cublas"
    assert world.planned == ["cublas"] and len(world.timed) == 1
    assert world.calls[-3:] == ["cublas"] * 3                          # the plan's run
    G2, X2 = bsf(pattern, 4096, F32)
    X2.strides = (X2.strides[0] * 2, X2.strides[1])                    # every other row
    assert paths.values_gradient(G2, X2, pattern, "bsf") == "cublas"
    assert world.planned == ["cublas"] * 2
    paths.forget()
    world.capturing = True
    G3, X3 = bsf(pattern, 64, F32)                                     # untimed default
    assert paths.values_gradient(G3, X3, pattern, "bsf") == "kernel"
    assert world.planned == ["cublas"] * 2
    world.capturing = False
    assert paths.values_gradient(G3, X3, pattern, "bsf") == "kernel"
    assert paths.values_gradient(G3, X3, pattern, "bsf") == "kernel"
    assert world.planned == ["cublas"] * 2 + ["kernel"]


def test_short_batches_and_captures_keep_the_default(world):
    pattern = (2, 16, 16, 4)
    for B, capturing in ((64, False), (4096, True)):
        world.capturing = capturing
        assert paths.values_gradient(*bsf(pattern, B, F32), pattern, "bsf") == "kernel"
        assert paths.values_gradient(*bsf(pattern, B, F16), pattern, "bsf") in \
            ("cublas", "cublas_diagonal")
    assert world.timed == []


def test_ways_that_do_not_apply_are_not_timed_and_the_default_falls_through(world):
    pattern = (2, 16, 16, 1)                           # d = 1: no diagonal way
    world.none = {"kernel"}                            # e.g. sizes beyond its indices
    world.seconds = {"cublas": 1.0, "cublas_whole": 2.0}
    G, X = bsf(pattern, 4096, F32)
    assert paths.values_gradient(G, X, pattern, "bsf") == "cublas"
    world.timed.clear()
    G, X = bsf(pattern, 64, F32)                       # untimed: kernel first, then cuBLAS
    assert paths.values_gradient(G, X, pattern, "bsf") == "cublas"
    world.none = {"kernel", "cublas"}
    assert paths.values_gradient(G, X, pattern, "bsf") is None


def test_each_way_is_timed_with_the_callers_last_pass(world):
    pattern = (2, 16, 16, 4)
    world.seconds = {"kernel!": 3.0, "cublas!": 1.0, "cublas_diagonal!": 2.0}
    G, X = bsf(pattern, 4096, F16)
    assert paths.values_gradient(G, X, pattern, "bsf", lambda dW: dW + "!") == "cublas!"
    assert world.timed == [["kernel!", "cublas!", "cublas_diagonal!"]]


def test_timing_can_be_switched_off(world, monkeypatch):
    monkeypatch.setattr(paths, "MEASURE", False)
    pattern = (2, 16, 16, 4)
    assert paths.values_gradient(*bsf(pattern, 4096, F32), pattern, "bsf") == "kernel"
    assert world.timed == []


def default(pattern, layout, dtype, batch=25088):
    return paths._ways(pattern, layout, numpy.dtype(dtype), batch, device.H200)[0]


def test_the_default_multiplies_whole_blocks_where_the_model_says():
    # narrow blocks, few groups: d times the products cost less than transposing X and G
    assert default((2, 128, 128, 4), "bsf", F16)[0] == "cublas_diagonal"
    # wider blocks, more groups: d times the products cost more (within the memory cap)
    assert 256 * 256 * 16 * 16 * 2 <= paths.DIAGONAL_MAX_BYTES
    assert default((1, 256, 256, 16), "bsf", F16)[0] == "cublas"
    assert default((2, 64, 64, 1), "bsf", F16) == ("cublas",)
    assert default((2, 128, 128, 4), "bsl", F16) == ("cublas",)
    assert default((2, 128, 128, 4), "bsf", F32)[0] == "kernel"
    # beyond the cap, never
    assert 1024 * 1024 * 48 * 48 * 2 > paths.DIAGONAL_MAX_BYTES
    assert "cublas_diagonal" not in paths._ways((1, 1024, 1024, 48), "bsf", F16, 10,
                                                device.H200)[1]


@pytest.mark.parametrize("pattern", [(3, 4, 5, 2), (1, 4, 5, 3), (2, 3, 4, 1)])
def test_blocks_reach_the_values_order_as_a_view(pattern):
    """``(a, d, b, c)`` blocks as cuBLAS's way leaves them (j-major in memory), as a C-order
    array and as another view, all give the values' ``(a, b, c, d)`` order as a view of
    the same memory: no pass over the gradient."""
    a, b, c, d = pattern
    blocks = numpy.random.default_rng(0).standard_normal((a, d, b, c))
    expected = blocks.transpose(0, 2, 3, 1).copy()
    j_major = numpy.ascontiguousarray(blocks.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    for given in (j_major, blocks, blocks[:, :, :, ::-1][:, :, :, ::-1]):
        got = paths._canonical(given)
        assert got.shape == (a, b, c, d) and numpy.shares_memory(got, given)
        numpy.testing.assert_array_equal(got, expected)


def test_the_whole_batch_is_a_way_where_the_default_cuts_it():
    """cuBLAS with the batch whole is timed beside the chunked calls where those cut the
    batch (float32's few output tiles), not where they do not (many tiles; float16, never
    cut), and is never the default."""
    ways = lambda pattern, dtype, batch: paths._ways(pattern, "bsl", numpy.dtype(dtype),
                                                     batch, device.H200)
    default, timed = ways((1, 1024, 1024, 1), F32, 25088)
    assert "cublas_whole" in timed and "cublas_whole" not in default
    assert "cublas_whole" not in ways((1, 1024, 1024, 1), F16, 25088)[1]
    assert "cublas_whole" not in ways((1, 1024, 1024, 48), F32, 25088)[1]
    assert "cublas_whole" not in ways((1, 1024, 1024, 1), F32, 1024)[1]   # one chunk


def test_the_cublas_ways_pass_their_chunks_and_order(monkeypatch):
    """The real _run and _way_run: "cublas_whole" asks cuBLAS for one chunk, "cublas" for
    the heuristic's (None); both return the blocks as a view in the values' order, the
    diagonal way a compact copy (its blocks are a view of d times larger products)."""
    seen = []
    a, b, c, d = pattern = (2, 3, 4, 2)
    blocks = numpy.random.default_rng(3).standard_normal((d, a, b, c)).transpose(1, 0, 2, 3)

    def gradient(G, X, pattern, layout, chunks=None):
        seen.append(chunks)
        return blocks
    monkeypatch.setattr(paths.gemm, "values_gradient", gradient)
    monkeypatch.setattr(paths.gemm, "values_gradient_run",
                        lambda G, X, pattern, layout, chunks=None: seen.append(chunks))
    monkeypatch.setattr(paths.gemm, "values_gradient_diagonal",
                        lambda G, X, pattern: blocks)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        ascontiguousarray=numpy.ascontiguousarray))
    expected = blocks.transpose(0, 2, 3, 1)
    for way, chunks in (("cublas_whole", 1), ("cublas", None)):
        seen.clear()
        got = paths._run(way, None, None, pattern, "bsl")
        paths._way_run(way, None, None, pattern, "bsl")
        assert seen == [chunks, chunks]
        assert numpy.shares_memory(got, blocks)
        numpy.testing.assert_array_equal(got, expected)
    got = paths._run("cublas_diagonal", None, None, pattern, "bsf")
    assert got.flags.c_contiguous and not numpy.shares_memory(got, blocks)
    numpy.testing.assert_array_equal(got, expected)
