"""The fused kernel against a float64 oracle on the GPU (run with ``pytest -m gpu``).

The oracle is the definition in index form, ``Y[i,k,j,n] = sum_l w[i,k,l,j] X[i,l,j,n]``,
evaluated by ``cupy.einsum`` in float64/complex128 on the canonical values: it shares no code
with the kernel. Every allocation made while a test runs is filled with NaN bytes first
(``poisoned`` fixture, tests/conftest.py), so an output element the kernel fails to write fails the test.
"""
import numpy
import pytest

import kscupy as ks
from conftest import DTYPES, RTOL, gpu_available

pytestmark = pytest.mark.gpu
if not gpu_available():
    pytest.skip("needs CuPy and a CUDA device", allow_module_level=True)

import cupy  # noqa: E402

#: The fused kernels: on the tensor cores (default precision), on the FMA units, the
#: small-batch kernel (any batch: wide ones run in passes), and the direct kernel (what auto
#: runs while one of the others compiles); and the prepared cuBLAS calls (kernels/gemm.py)
#: on the groups where they lie (``bmm``), whose addressing is as much index math as a
#: kernel's, on the dense matrix's diagonal blocks (``block_dense``) and on the dense matrix
#: (``dense``).
KERNELS = ["kernel", "kernel_fma", "kernel_skinny", "direct", "bmm", "block_dense", "dense"]
kernels = pytest.mark.parametrize("backend", KERNELS)
BATCHES = [1, 3, 127, 1000, 100003]
EDGE_PATTERNS = [(1, 1, 1, 1), (1, 2, 2, 1), (8, 2, 2, 8), (1, 2, 2, 4096), (4096, 2, 2, 1),
                 (1, 1, 7, 3), (3, 7, 1, 2), (2, 1, 1, 5), (1, 64, 1, 4), (1, 1, 64, 4),
                 (2, 3, 5, 7), (1, 48, 192, 3), (2, 192, 48, 2), (1, 128, 128, 1),
                 (4, 16, 64, 16), (1, 300, 17, 1), (5, 33, 65, 9), (1, 4, 4, 1024),
                 (16, 8, 8, 16), (64, 4, 4, 1)]


def _random_patterns(count, seed):
    rng = numpy.random.default_rng(seed)
    out = []
    while len(out) < count:
        a, d = (int(2 ** rng.uniform(0, 6)) for _ in range(2))
        b, c = (int(2 ** rng.uniform(0, 7.5)) for _ in range(2))
        if a * b * d * a * c * d <= 2**24:       # keep the float64 oracle cheap
            out.append((a, b, c, d))
    return out


SWEEP = EDGE_PATTERNS + _random_patterns(200, seed=2026)




def _random(rng, shape, dtype):
    X = rng.standard_normal(shape, dtype=numpy.float64)
    if numpy.dtype(dtype).kind == "c":
        X = X + 1j * rng.standard_normal(shape, dtype=numpy.float64)
    return X.astype(dtype)


def oracle(w, X, layout):
    """float64 definition of K @ X (bsl, X (N, B)) or X @ K.T (bsf, X (B, N)) from values w."""
    a, b, c, d = w.shape
    hi = numpy.complex128 if w.dtype.kind == "c" or X.dtype.kind == "c" else numpy.float64
    w, X = w.astype(hi), X.astype(hi)
    if layout == "bsl":
        B = X.shape[1]
        return cupy.einsum("iklj,iljn->ikjn", w, X.reshape(a, c, d, B)).reshape(a * b * d, B)
    B = X.shape[0]
    return cupy.einsum("iklj,nilj->nikj", w, X.reshape(B, a, c, d)).reshape(B, a * b * d)


def check(Y, ref, dtype):
    assert Y.dtype == dtype and Y.shape == ref.shape
    assert bool(cupy.isfinite(Y).all()), "unwritten (NaN) or non-finite output"
    err = float(cupy.linalg.norm(Y.astype(ref.dtype) - ref) / cupy.linalg.norm(ref))
    assert err < RTOL[numpy.dtype(dtype)], err


def _batches_for(pattern, dtype):
    M, N = ks.KSPattern(*pattern).shape
    # keep each case under ~64 MB of operands
    return [B for B in BATCHES if (M + N) * B * numpy.dtype(dtype).itemsize <= 2**26]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@kernels
def test_sweep(poisoned, dtype, layout, backend):
    """>= 200 patterns x batch sizes {1, 3, 127, 1000, 100003}, all through the kernel."""
    rng = cupy.random.default_rng(7)
    cases = 0
    for pattern in SWEEP:
        K = ks.KSMatrix(_random(rng, pattern, dtype))
        M, N = K.shape
        for B in _batches_for(pattern, dtype):
            X = _random(rng, (N, B) if layout == "bsl" else (B, N), dtype)
            Y = K.matmul(X, layout=layout, backend=backend)
            try:
                check(Y, oracle(K.values, X, layout), dtype)
            except AssertionError as exc:
                raise AssertionError(f"pattern {pattern}, B={B}: {exc}") from None
            cases += 1
    assert cases >= 200 * 3


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
@pytest.mark.parametrize("view", ["T", "H", "conj"])
@kernels
def test_views_read_the_same_storage(poisoned, dtype, view, backend):
    rng = cupy.random.default_rng(11)
    for pattern in [(2, 3, 5, 7), (1, 64, 16, 1), (3, 2, 2, 8), (1, 96, 200, 2)]:
        K = ks.KSMatrix(_random(rng, pattern, dtype))
        V = {"T": K.T, "H": K.H, "conj": K.conj()}[view]
        assert V.factor.tiles is K.factor.tiles
        M, N = V.shape
        for layout, shape in (("bsl", (N, 300)), ("bsf", (300, N)), ("bsl", (N,))):
            X = _random(rng, shape, dtype)
            Y = V.matmul(X, layout=layout, backend=backend)
            X2 = X.reshape(N, 1) if X.ndim == 1 else X
            ref = oracle(V.values, X2, layout)
            check(Y.reshape(ref.shape), ref, dtype)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex128], ids=lambda t: numpy.dtype(t).name)
def test_operators_and_vectors(poisoned, dtype):
    rng = cupy.random.default_rng(3)
    K = ks.KSMatrix(_random(rng, (4, 16, 8, 8), dtype))
    M, N = K.shape
    X = _random(rng, (N, 33), dtype)
    for Y, ref in ((K @ X, oracle(K.values, X, "bsl")),
                   (X.T @ K.T, oracle(K.values, cupy.ascontiguousarray(X.T), "bsf")),
                   (K @ X[:, 0], oracle(K.values, X[:, :1], "bsl")[:, 0])):
        check(Y, ref, dtype)


def _awkward_views(rng, dtype, rows, cols):
    big = _random(rng, (rows + 3, 2 * cols + 3), dtype)
    views = {"column-step": big[:rows, : 2 * cols: 2], "offset-by-one": big[1: rows + 1, 1: cols + 1],
             "fortran": cupy.asfortranarray(big[:rows, :cols]),
             "reversed": big[rows - 1:: -1, cols - 1:: -1]}
    if numpy.dtype(dtype) in (numpy.float32, numpy.float64):   # the real part of a complex
        complex_dtype = numpy.result_type(dtype, numpy.complex64)   # array: element stride 2
        views["real-part"] = _random(rng, (rows, cols), complex_dtype).real
    return views


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@kernels
def test_strided_and_misaligned(poisoned, dtype, layout, backend):
    rng = cupy.random.default_rng(5)
    for pattern in [(2, 3, 4, 5), (1, 64, 64, 2), (4, 2, 2, 16)]:
        K = ks.KSMatrix(_random(rng, pattern, dtype))
        M, N = K.shape
        shape = (N, 257) if layout == "bsl" else (257, N)
        for name, X in _awkward_views(rng, dtype, *shape).items():
            Y = K.matmul(X, layout=layout, backend=backend)
            try:
                check(Y, oracle(K.values, cupy.ascontiguousarray(X), layout), dtype)
            except AssertionError as exc:
                raise AssertionError(f"{pattern} {name}: {exc}") from None


@kernels
def test_non_default_stream(poisoned, backend):
    rng = cupy.random.default_rng(9)
    K = ks.KSMatrix(_random(rng, (4, 32, 32, 8), numpy.float32))
    X = _random(rng, (K.shape[1], 4096), numpy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.get_current_stream().synchronize()   # X was written on the default stream
    with stream:
        Y = K.matmul(X, backend=backend)
        Yf = K.matmul(cupy.ascontiguousarray(X.T), layout="bsf", backend=backend)
    stream.synchronize()
    check(Y, oracle(K.values, X, "bsl"), numpy.float32)
    check(Yf, oracle(K.values, cupy.ascontiguousarray(X.T), "bsf"), numpy.float32)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_auto_matches_oracle(poisoned, layout):
    rng = cupy.random.default_rng(13)
    for pattern in [(1, 256, 256, 1), (16, 2, 2, 16), (4, 64, 64, 4), (1, 48, 48, 64),
                    (1, 64, 64, 2), (2, 48, 96, 1)]:   # the last two: auto picks cached dense
        K = ks.KSMatrix(_random(rng, pattern, numpy.float32))
        for op in (K, K.T):
            M, N = op.shape
            X = _random(rng, (N, 2048) if layout == "bsl" else (2048, N), numpy.float32)
            for _ in range(2):    # the second call may use what the first one cached
                check(op.matmul(X, layout=layout), oracle(op.values, X, layout), numpy.float32)


@kernels
def test_mixed_dtypes_promote(poisoned, backend):
    rng = cupy.random.default_rng(17)
    K = ks.KSMatrix(_random(rng, (2, 8, 4, 4), numpy.float32))
    X = _random(rng, (K.shape[1], 50), numpy.complex128)
    Y = K.matmul(X, backend=backend)
    check(Y, oracle(K.values, X, "bsl"), numpy.complex128)


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@kernels
def test_offsets_beyond_int32(layout, backend):
    """B*N > 2^31 elements: checked on a sample of batch columns, including the last ones."""
    pattern = (1, 2, 2, 1024)                 # N = M = 2048
    K = ks.KSMatrix.random(pattern, dtype=numpy.float32, xp=cupy, seed=1)
    N = K.shape[1]
    B = 2**31 // N + 4097
    assert B * N > 2**31
    rng = cupy.random.default_rng(19)
    X = rng.standard_normal((N, B) if layout == "bsl" else (B, N), dtype=numpy.float32)
    Y = K.matmul(X, layout=layout, backend=backend)
    cols = cupy.concatenate([cupy.arange(64), cupy.arange(B - 4096, B)])
    if layout == "bsl":
        ref = oracle(K.values, X[:, cols], layout)
        got = Y[:, cols]
    else:
        ref = oracle(K.values, X[cols], layout)
        got = Y[cols]
    check(got, ref, numpy.float32)
    assert not bool(cupy.isnan(Y[..., -1] if layout == "bsl" else Y[-1]).any())


@kernels
def test_empty_batch(backend):
    K = ks.KSMatrix.random((2, 3, 4, 5), xp=cupy)
    assert K.matmul(cupy.zeros((40, 0), numpy.float32), backend=backend).shape == (30, 0)
    assert K.matmul(cupy.zeros((0, 40), numpy.float32), layout="bsf", backend=backend).shape == (0, 30)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
@kernels
def test_sanitizer_subset(poisoned, dtype, backend):
    """A small representative subset, fast enough to run under compute-sanitizer."""
    rng = cupy.random.default_rng(23)
    for pattern in [(1, 2, 2, 8), (2, 3, 5, 7), (1, 64, 48, 1), (3, 16, 16, 4), (2, 130, 70, 3)]:
        K = ks.KSMatrix(_random(rng, pattern, dtype))
        for op in (K, K.H):
            M, N = op.shape
            for B in (1, 3, 129):
                for layout, shape in (("bsl", (N, B)), ("bsf", (B, N))):
                    X = _random(rng, shape, dtype)
                    check(op.matmul(X, layout=layout, backend=backend),
                          oracle(op.values, X, layout), dtype)


def test_tune_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path))
    from kscupy.core.problem import problem_of
    from kscupy.engine import decide
    K = ks.KSMatrix.random((4, 32, 32, 4), dtype=numpy.float32, xp=cupy, seed=2)
    choice = ks.tune(K, 4096, layout="bsl", progress=False, n_repeat=3)
    assert choice.backend in ("kernel", "kernel_bsl", "kernel_fma", "kernel_skinny", "bmm",
                              "block_dense", "dense")
    assert (tmp_path / "tuning.json").exists()
    X = cupy.random.default_rng(1).standard_normal((K.shape[1], 4096), dtype=numpy.float32)
    problem = problem_of(K.factor, X, "bsl")
    assert decide.choose(problem) == choice
    check(K @ X, oracle(K.values, X, "bsl"), numpy.float32)


def _verdict(timed) -> str:
    """The backend a close call timed as ``{backend: (seconds, host seconds)}`` settles on
    (decide._fastest: the fastest, or where that one is bound by its host time, the tied
    rival of least host time, or dense where it ties in host time too)."""
    from kscupy.engine import decide
    names = list(timed)
    return names[decide._fastest([timed[n][0] for n in names], [timed[n][1] for n in names],
                                 names)]


def test_auto_times_a_close_call(tmp_path, monkeypatch, poisoned):
    """Where the model cannot tell its best backends apart (decide.band), auto's first
    preparation times them on the operand and runs the fastest; the
    verdict is the process's choice for that problem from then on (decide.close_call and
    decide.settle, driven by kscupy.engine.single.prepare). Every problem counts as a close
    call here."""
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path))   # an empty tuning cache
    from kscupy.core import device as devices
    from kscupy.core.problem import problem_of
    from kscupy.engine import decide
    monkeypatch.setattr(decide, "band", lambda best_seconds: float("inf"))
    rng = numpy.random.default_rng(11)
    K = ks.KSMatrix(cupy.asarray(_random(rng, (3, 32, 48, 2), numpy.float32)))
    device = devices.current()
    for layout in ("bsl", "bsf"):
        M, N = K.shape
        X = cupy.asarray(_random(rng, (N, 777) if layout == "bsl" else (777, N), numpy.float32))
        problem = problem_of(K.factor, X, layout)
        # up to decide.RIVALS of the best
        rivals = {choice.backend for choice in decide.close_call(problem, device)}
        assert len(rivals) >= 2 and rivals <= {
            entry.name for _, entry in decide.ranked(problem, device, "default")[:3]}
        check(K.matmul(X, layout=layout), oracle(K.values, X, layout), numpy.float32)
        timed = decide._MEMO[decide._memo_key("timed", problem, device, "default")]
        assert set(timed) == rivals and all(s > 0 and h > 0 for s, h in timed.values()), timed
        assert decide.choose(problem).backend == _verdict(timed)
        check(K.matmul(X, layout=layout), oracle(K.values, X, layout), numpy.float32)


def test_warmup_times_its_close_calls_after_the_pool(tmp_path, monkeypatch, poisoned):
    """kscupy.warmup defers the close calls of its pool's products and times each afterwards,
    alone: every product with two candidates is run again, its verdict settled, and the
    operator's next product runs the verdict (checked against the oracle). Every problem
    counts as a close call here."""
    monkeypatch.setenv("KSCUPY_CACHE_DIR", str(tmp_path))   # an empty tuning cache
    from kscupy.core import device as devices
    from kscupy.core.problem import problem_of
    from kscupy.engine import decide
    monkeypatch.setattr(decide, "band", lambda best_seconds: float("inf"))
    decide.forget_decisions()
    rng = numpy.random.default_rng(12)
    K = ks.KSMatrix(cupy.asarray(_random(rng, (2, 48, 32, 3), numpy.float32)))
    device = devices.current()
    operands, rivals = {}, {}
    for layout in ("bsl", "bsf"):
        M, N = K.shape
        X = operands[layout] = cupy.asarray(
            _random(rng, (N, 513) if layout == "bsl" else (513, N), numpy.float32))
        # up to decide.RIVALS rivals
        rivals[layout] = decide.close_call(problem_of(K.factor, X, layout), device)
    report = ks.warmup(operators=[K], layouts=("bsl", "bsf"), batches=(513,), threads=2)
    assert report.products == 2 and report.timed_after == 2, report
    for layout in ("bsl", "bsf"):
        X = operands[layout]
        problem = problem_of(K.factor, X, layout)
        timed = decide._MEMO[decide._memo_key("timed", problem, device, "default")]
        assert set(timed) == {c.backend for c in rivals[layout]} and \
            all(s > 0 and h > 0 for s, h in timed.values()), timed
        assert decide.choose(problem).backend == _verdict(timed)
        check(K.matmul(X, layout=layout), oracle(K.values, X, layout), numpy.float32)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64], ids=lambda t: numpy.dtype(t).name)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("backend", ["kernel_tf32", "bmm_tf32", "dense_tf32", "auto_tf32"])
def test_tf32_opt_in(poisoned, dtype, layout, backend):
    """One TF32 product per term: about 1e-3 relative error, on every tile shape and view;
    refused for the double-precision dtypes, whose default already uses the tensor cores."""
    rng = cupy.random.default_rng(29)
    for pattern in [(1, 64, 64, 1), (2, 3, 5, 7), (4, 48, 96, 4), (1, 1024, 256, 1)]:
        K = ks.KSMatrix(_random(rng, pattern, dtype))
        for op in (K, K.T, K.H):
            M, N = op.shape
            X = _random(rng, (N, 1000) if layout == "bsl" else (1000, N), dtype)
            Y = op.matmul(X, layout=layout, backend=backend)
            ref = oracle(op.values, X, layout)
            assert bool(cupy.isfinite(Y).all())
            err = float(cupy.linalg.norm(Y - ref) / cupy.linalg.norm(ref))
            assert err < 3e-3, (pattern, err)           # TF32-grade, not wrong
            # ... and not float32's: the kernel always takes one TF32 product; cuBLAS may
            # keep float32 for blocks too small for its tensor-core GEMMs
            if backend == "kernel_tf32" or min(pattern[1:3]) >= 256:
                assert err > 1e-6, (pattern, err)
    with pytest.raises(TypeError, match="precision"):
        ks.KSMatrix.random((1, 8, 8, 1), dtype=numpy.float64, xp=cupy).matmul(
            cupy.ones((8, 4)), backend=backend)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_tensor_core_candidates(poisoned, dtype):
    """Every configuration the autotuner may pick for the tensor-core kernel is correct."""
    from kscupy.kernels import ks_mma
    from kscupy.core.problem import problem_of
    rng = cupy.random.default_rng(31)
    # (the in-group order of bsf with d = 1 as well: its float16 blocks are also tried four
    # to an SM, whose launch bounds change how the copies are addressed)
    for pattern, layout in [((1, 96, 64, 1), "bsl"), ((2, 48, 40, 4), "bsf"),
                            ((1, 96, 64, 1), "bsf")]:
        K = ks.KSMatrix(_random(rng, pattern, dtype))
        M, N = K.shape
        X = _random(rng, (N, 300) if layout == "bsl" else (300, N), dtype)
        ref = oracle(K.values, X, layout)
        for config in ks_mma.candidate_configs(problem_of(K.factor, X, layout)):
            try:
                check(ks_mma.prepare(K.factor, X, layout, config)(X), ref, dtype)
            except AssertionError as exc:
                raise AssertionError(f"{pattern} {layout} {config}: {exc}") from None


def test_float32_group_tiles_of_long_batches(poisoned):
    """float32 batch-size-first with d > 1 and a batch of 8192 or more takes the heuristic's
    long-batch group tiles: 64-column warp pieces, slots that divide a * d where blocks of
    32768 values or more would leave empty ones (one slot: X by 4-byte copies), two stages
    for blocks of four groups or fewer; ragged batch, rows, reduction and groups."""
    from kscupy.kernels import ks_mma
    from kscupy.core.problem import problem_of
    rng = cupy.random.default_rng(43)
    picked = set()
    for pattern in [(1, 200, 176, 3), (1, 256, 160, 6), (1, 192, 192, 12), (3, 128, 128, 4),
                    (2, 72, 40, 16)]:
        K = ks.KSMatrix(_random(rng, pattern, numpy.float32))
        B = 8192 + 40
        X = _random(rng, (B, K.shape[1]), numpy.float32)
        config = ks_mma.heuristic_config(problem_of(K.factor, X, "bsf"))
        assert config.order == ks_mma.ORDER_GROUP and config.bn // config.wn == 64, config
        picked.add((config.slots, config.stages))
        try:
            check(ks_mma.prepare(K.factor, X, "bsf", config)(X), oracle(K.values, X, "bsf"),
                  numpy.float32)
        except AssertionError as exc:
            raise AssertionError(f"{pattern} {config}: {exc}") from None
    assert {(1, 2), (2, 2), (4, 2), (8, 3)} <= picked, picked


def test_float32_batch_tiles_of_long_batches(poisoned):
    """float32 batch-size-last with a batch of 8192 or more takes chunks of 16 where
    32 < c <= 128 and keeps 32 elsewhere; ragged batch, rows and reduction."""
    from kscupy.kernels import ks_mma
    from kscupy.core.problem import problem_of
    rng = cupy.random.default_rng(47)
    for pattern, bk in [((2, 72, 40, 3), 16), ((1, 96, 100, 2), 16), ((3, 128, 128, 1), 16),
                        ((1, 40, 32, 4), 32), ((1, 64, 200, 2), 32)]:
        K = ks.KSMatrix(_random(rng, pattern, numpy.float32))
        B = 8192 + 40
        X = _random(rng, (K.shape[1], B), numpy.float32)
        config = ks_mma.heuristic_config(problem_of(K.factor, X, "bsl"))
        assert config.order == ks_mma.ORDER_BATCH and config.bk == bk, (pattern, config)
        try:
            check(ks_mma.prepare(K.factor, X, "bsl", config)(X), oracle(K.values, X, "bsl"),
                  numpy.float32)
        except AssertionError as exc:
            raise AssertionError(f"{pattern} {config}: {exc}") from None


def _needs_tma():
    """The group kernel (ks_mma_group.cu) copies with the Tensor Memory Accelerator, which
    sm_90 and later have: elsewhere (or emulating an older GPU) it is never chosen."""
    from kscupy.core import device as devices
    if not devices.current().tma:
        pytest.skip("the group kernel needs the TMA (sm_90 or later)")


@pytest.mark.parametrize("precision", ["default", "tf32"])
def test_float32_group_kernel(poisoned, precision):
    """kernels_cu/ks_mma_group.cu (the group order's own kernel, which the heuristic
    takes for batches of 8192 and more) on every variant it compiles: 16-, 48- and 64-row
    pieces (48: W's copies decoded per rep), one to eight slots, two and three stages, X by
    cp.async (48-row tiles of eight slots) or through registers in vectors of four, two and
    one groups (a strided view), W by bulk copies (the heuristic's chunks of 8) and, in
    chunks of 16, stored blocks and packed (transposed) ones by cp.async; ragged batch, rows,
    reduction and groups."""
    _needs_tma()
    import dataclasses
    from kscupy.kernels import ks_mma
    from kscupy.kernels.operands import geometry
    from kscupy.core.problem import problem_of
    rng = cupy.random.default_rng(47)
    tol = 5e-3 if precision == "tf32" else RTOL[numpy.dtype(numpy.float32)]
    seen = set()
    for pattern, view, columns in [((2, 72, 40, 16), None, None), ((3, 96, 64, 8), None, None),
                                   ((1, 200, 176, 6), None, None), ((2, 64, 56, 4), "T", None),
                                   ((5, 130, 24, 2), None, None), ((2, 48, 72, 8), None, 2)]:
        K = ks.KSMatrix(_random(rng, pattern, numpy.float32))
        K = K.T if view == "T" else K
        M, N = K.shape
        B = 8192 + 72
        if columns:   # every other column of a wider array: X's groups are not adjacent
            X = _random(rng, (B, N * columns), numpy.float32)[:, ::columns]
        else:
            X = _random(rng, (B, N), numpy.float32)
        ref = oracle(K.values, X, "bsf")
        heuristic = ks_mma.heuristic_config(problem_of(K.factor, X, "bsf"))
        for config in (heuristic, dataclasses.replace(heuristic, bk=16)):
            assert config.lean_group(numpy.float32), (pattern, config)
            vx, vw = ks_mma.copy_vectors(config, K.factor, X, geometry(X, "bsf", M)[1], B)
            seen.add((config.bm, config.slots, config.stages, vx, config.x_async(numpy.float32, vx),
                      config.weights(numpy.float32, K.factor.transposed)))
            Y = ks_mma.prepare(K.factor, X, "bsf", config, precision)(X)
            assert Y.dtype == numpy.float32 and Y.shape == ref.shape
            assert bool(cupy.isfinite(Y).all()), f"{pattern} {config}: unwritten output"
            err = float(cupy.linalg.norm(Y - ref) / cupy.linalg.norm(ref))
            assert err < tol, (pattern, config, vx, vw, err)
    assert {16, 48, 64} <= {s[0] for s in seen} and {1, 2, 4} <= {s[3] for s in seen}, seen
    assert {True, False} == {s[4] for s in seen}, seen
    assert {ks_mma.W_STORED, ks_mma.W_PACKED, ks_mma.W_BULK} <= {s[5] for s in seen}, seen


@pytest.mark.parametrize("precision", ["default", "tf32"])
def test_float32_group_kernel_non_finite_weights(poisoned, precision):
    """A NaN and an infinity among the weights of ks_mma_group.cu make exactly the outputs
    non-finite that the float64 definition makes non-finite (3xTF32 gives NaN for infinity's
    outputs: its small part is NaN), and no other: W by bulk copies (the heuristic's chunks
    of 8, also of a transposed view) and stored blocks by cp.async (chunks of 16)."""
    _needs_tma()
    import dataclasses
    from kscupy.kernels import ks_mma
    from kscupy.core.problem import problem_of
    rng = cupy.random.default_rng(59)
    values = _random(rng, (2, 64, 48, 8), numpy.float32)
    values[0, 3, 5, 1] = numpy.nan
    values[1, 10, 0, 6] = numpy.inf
    tol = 5e-3 if precision == "tf32" else RTOL[numpy.dtype(numpy.float32)]
    for K in (ks.KSMatrix(values), ks.KSMatrix(values).T):
        X = _random(rng, (8192 + 40, K.shape[1]), numpy.float32)
        ref = oracle(K.values, X, "bsf")
        finite = cupy.isfinite(ref)
        assert int((~finite).sum()) == 2 * X.shape[0]
        heuristic = ks_mma.heuristic_config(problem_of(K.factor, X, "bsf"))
        # chunks of 16 in two stages: three would not fit a block's shared memory
        for config in (heuristic, dataclasses.replace(heuristic, bk=16, stages=2)):
            assert config.lean_group(numpy.float32), config
            assert config.fits(4, K.factor.transposed), config
            Y = ks_mma.prepare(K.factor, X, "bsf", config, precision)(X)
            assert bool(cupy.array_equal(cupy.isfinite(Y), finite)), config
            err = float(cupy.linalg.norm(cupy.where(finite, Y - ref, 0))
                        / cupy.linalg.norm(cupy.where(finite, ref, 0)))
            assert err < tol, (config, err)


def test_float32_group_kernel_small(poisoned):
    """ks_mma_group.cu's copy paths on short batches, small enough for compute-sanitizer's
    memcheck and racecheck: X by cp.async and W by bulk copies, X through registers with bulk
    W, stored and packed W by cp.async; a ragged batch of 200."""
    _needs_tma()
    from kscupy.kernels import ks_mma
    rng = cupy.random.default_rng(53)
    for pattern, view, config in [
            ((3, 96, 64, 8), None, ks_mma.MmaConfig(8, 48, 64, 8, 1, 1, 3, ks_mma.ORDER_GROUP)),
            ((2, 64, 56, 4), None, ks_mma.MmaConfig(4, 64, 64, 8, 1, 1, 2, ks_mma.ORDER_GROUP)),
            ((2, 40, 72, 8), None, ks_mma.MmaConfig(8, 48, 64, 16, 1, 1, 3, ks_mma.ORDER_GROUP)),
            ((2, 56, 40, 8), "T", ks_mma.MmaConfig(8, 64, 64, 16, 1, 1, 2, ks_mma.ORDER_GROUP))]:
        K = ks.KSMatrix(_random(rng, pattern, numpy.float32))
        K = K.T if view == "T" else K
        X = _random(rng, (200, K.shape[1]), numpy.float32)
        assert config.lean_group(numpy.float32)
        try:
            check(ks_mma.prepare(K.factor, X, "bsf", config)(X), oracle(K.values, X, "bsf"),
                  numpy.float32)
        except AssertionError as exc:
            raise AssertionError(f"{pattern} {view} {config}: {exc}") from None


def _half_dtypes():
    """float16, and bfloat16 where ml_dtypes gives CuPy the dtype."""
    from kscupy.core import arrays
    return [numpy.float16] + ([arrays.BFLOAT16] if arrays.BFLOAT16 is not None else [])


def _half_tolerance(dtype):
    """One rounding of each result to the dtype, sums in float32: float16's RTOL, bfloat16's
    8 significant bits with room."""
    from kscupy.core import arrays
    return 5e-3 if arrays.is_bfloat16(dtype) else RTOL[numpy.dtype(numpy.float16)]


def _random_half(rng, shape, dtype):
    """Random values rounded to a 16-bit dtype (through float32: CuPy's generator and
    bfloat16's conversions start there)."""
    return rng.standard_normal(shape, dtype=numpy.float32).astype(dtype)


@pytest.fixture(params=[0, 1, 2], ids=lambda lead: f"lead{lead}")
def x_lead(request, monkeypatch):
    """ks_mma_group.cu's 16-bit X regrouped from registers (0) or from its ring, copied one
    or two steps ahead (ks_mma.X_LEAD_HALF)."""
    from kscupy.kernels import ks_mma
    monkeypatch.setattr(ks_mma, "X_LEAD_HALF", request.param)
    return request.param


@pytest.mark.parametrize("dtype", _half_dtypes(), ids=lambda t: numpy.dtype(t).name)
def test_half_group_kernel(poisoned, dtype, x_lead):
    """ks_mma_group.cu's 16-bit path (which the heuristic takes for batches of 8192 and more):
    X's vectors of eight, four, two and one groups (d = 16, 12 and 8; 4; 6 and 2; a strided
    view) paired along l in registers, an odd reduction (the last pair's second value zero),
    48- and 64-row pieces, two to eight slots, groups of one block spanning two i (d = 12),
    a transposed view (packed W), W by bulk copies in chunks of 16; ragged batch, rows,
    reduction and groups. Against the float64 definition of the 16-bit values."""
    _needs_tma()
    from kscupy.kernels import ks_mma
    from kscupy.kernels.operands import geometry
    from kscupy.core.problem import problem_of
    rng = cupy.random.default_rng(61)
    seen = set()
    for pattern, view, columns in [((2, 72, 40, 16), None, None), ((3, 96, 63, 8), None, None),
                                   ((1, 48, 36, 12), None, None), ((1, 200, 176, 6), None, None),
                                   ((2, 64, 56, 4), "T", None), ((5, 130, 24, 2), None, None),
                                   ((2, 48, 72, 8), None, 2)]:
        K = ks.KSMatrix(_random_half(rng, pattern, dtype))
        K = K.T if view == "T" else K
        M, N = K.shape
        B = 8192 + 72
        if columns:   # every other column of a wider array: X's groups are not adjacent
            X = _random_half(rng, (B, N * columns), dtype)[:, ::columns]
        else:
            X = _random_half(rng, (B, N), dtype)
        ref = oracle(K.values.astype(numpy.float64), X.astype(numpy.float64), "bsf")
        config = ks_mma.heuristic_config(problem_of(K.factor, X, "bsf"))
        assert config.lean_group(dtype) and config.bk == 16, (pattern, config)
        assert config.weights(dtype, K.factor.transposed) == ks_mma.W_BULK
        vx, _ = ks_mma.copy_vectors(config, K.factor, X, geometry(X, "bsf", M)[1], B)
        seen.add((config.bm, config.slots, vx))
        assert config.x_lead(2, vx) == (x_lead if vx >= 2 else 0), (pattern, config, vx)
        Y = ks_mma.prepare(K.factor, X, "bsf", config)(X)
        assert Y.dtype == dtype and Y.shape == ref.shape
        Y64 = Y.astype(numpy.float64)
        assert bool(cupy.isfinite(Y64).all()), f"{pattern} {config}: unwritten output"
        err = float(cupy.linalg.norm(Y64 - ref) / cupy.linalg.norm(ref))
        assert err < _half_tolerance(dtype), (pattern, config, vx, err)
    assert {48, 64} <= {s[0] for s in seen} and {1, 2, 4, 8} <= {s[2] for s in seen}, seen


@pytest.mark.parametrize("dtype", _half_dtypes(), ids=lambda t: numpy.dtype(t).name)
def test_half_group_kernel_small(poisoned, dtype, x_lead):
    """ks_mma_group.cu's 16-bit path on short batches, small enough for compute-sanitizer's
    memcheck and racecheck: eight-group vectors in three stages, four-group vectors in two,
    an odd reduction, a transposed view; a ragged batch of 200."""
    _needs_tma()
    from kscupy.kernels import ks_mma
    rng = cupy.random.default_rng(67)
    for pattern, view, config in [
            ((3, 96, 64, 8), None, ks_mma.MmaConfig(8, 48, 64, 16, 1, 1, 3, ks_mma.ORDER_GROUP)),
            ((2, 64, 57, 4), None, ks_mma.MmaConfig(4, 64, 64, 16, 1, 1, 2, ks_mma.ORDER_GROUP)),
            ((2, 56, 40, 8), "T", ks_mma.MmaConfig(8, 64, 64, 16, 1, 1, 2, ks_mma.ORDER_GROUP))]:
        K = ks.KSMatrix(_random_half(rng, pattern, dtype))
        K = K.T if view == "T" else K
        X = _random_half(rng, (200, K.shape[1]), dtype)
        assert config.lean_group(dtype)
        ref = oracle(K.values.astype(numpy.float64), X.astype(numpy.float64), "bsf")
        Y = ks_mma.prepare(K.factor, X, "bsf", config)(X).astype(numpy.float64)
        assert bool(cupy.isfinite(Y).all()), f"{pattern} {view} {config}: unwritten output"
        err = float(cupy.linalg.norm(Y - ref) / cupy.linalg.norm(ref))
        assert err < _half_tolerance(dtype), (pattern, view, config, err)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_tensor_core_tile_runs(poisoned, dtype):
    """Blocks that walk runs of several tiles (batch-size-last with many tiles) carry their
    copy pipeline across tile boundaries: runs that end mid-tile-row, a last block with a
    shorter run, ragged batch and row tiles, and reductions of one chunk or several."""
    from kscupy.kernels import ks_mma
    from kscupy.core.problem import problem_of
    rng = cupy.random.default_rng(37)
    for pattern, B in [((64, 16, 16, 4), 8192 + 40), ((48, 40, 24, 5), 6000 + 8),
                       ((6, 96, 200, 8), 4096 + 24)]:
        K = ks.KSMatrix(_random(rng, pattern, dtype))
        M, N = K.shape
        X = _random(rng, (N, B), dtype)
        config = ks_mma.heuristic_config(problem_of(K.factor, X, "bsl"))
        run = ks_mma.prepare(K.factor, X, "bsl", config)
        tiles = (-(-pattern[1] // config.bm) * -(-B // config.bn)
                 * -(-pattern[0] * pattern[3] // config.slots))
        grid = run.launch.grid[0]
        assert tiles >= 2 * grid, (pattern, config, tiles, grid)   # several tiles a block
        try:
            check(run(X), oracle(K.values, X, "bsl"), dtype)
        except AssertionError as exc:
            raise AssertionError(f"{pattern} B={B} {config}: {exc}") from None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
def test_skinny_candidates(poisoned, dtype):
    """Every configuration the autotuner may pick for the small-batch kernel is correct, on
    stored and transposed (row-major copy) views, conjugated ones, and batches that end
    mid-pass; X staged in shared memory (bsl with B > 1, d > 1) or read where it lies (and
    so when its slice would not fit: c = 2048)."""
    from kscupy.kernels import ks_skinny
    from kscupy.core.problem import problem_of
    rng = cupy.random.default_rng(37)
    for pattern in [(1, 96, 64, 1), (2, 48, 40, 4), (3, 5, 7, 2), (1, 4, 2048, 2)]:
        K = ks.KSMatrix(_random(rng, pattern, dtype))
        for op in (K, K.T, K.H):
            M, N = op.shape
            for B, layout in ((1, "bsl"), (3, "bsf"), (13, "bsl"), (33, "bsf")):
                X = _random(rng, (N, B) if layout == "bsl" else (B, N), dtype)
                ref = oracle(op.values, X, layout)
                for config in ks_skinny.candidate_configs(problem_of(op.factor, X, layout)):
                    try:
                        check(ks_skinny.prepare(op.factor, X, layout, config)(X), ref, dtype)
                    except AssertionError as exc:
                        raise AssertionError(f"{pattern} B={B} {layout} {config}: {exc}") \
                            from None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: numpy.dtype(t).name)
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_dense_prepared_gemm(poisoned, dtype, layout):
    """The dense backend's prepared cuBLAS call (kernels/gemm.py), repeated, on the default
    and a non-default stream, for operands in C order and not (which take the general path),
    and on a transposed view."""
    rng = cupy.random.default_rng(41)
    K = ks.KSMatrix(_random(rng, (2, 24, 40, 3), dtype))
    stream = cupy.cuda.Stream(non_blocking=True)
    for op in (K, K.H):
        M, N = op.shape
        for B in (1, 3, 1000):
            shape = (N, B) if layout == "bsl" else (B, N)
            X = _random(rng, shape, dtype)
            ref = oracle(op.values, X, layout)
            for _ in range(2):               # the second call runs the prepared product
                check(op.matmul(X, layout=layout, backend="dense"), ref, dtype)
            cupy.cuda.get_current_stream().synchronize()
            with stream:
                Y = op.matmul(X, layout=layout, backend="dense")
            stream.synchronize()
            check(Y, ref, dtype)
            strided = cupy.asfortranarray(X)
            check(op.matmul(strided, layout=layout, backend="dense"), ref, dtype)
