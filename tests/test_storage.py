"""Pickle, deepcopy, copy(), get(), to_device() and kscupy.save/load, for every operator kind,
checked against float64 oracles built from the definition (NumPy; CuPy as `gpu`)."""
import copy
import pickle

import numpy
import pytest

import kscupy as ks
from conftest import RTOL, random_array, rel_err, to_numpy
from operator_kinds import KIND_NAMES, operator_kinds, operator_oracle

DTYPES = [numpy.float32, numpy.complex128]


def assert_same_operator(got, op, D, xp, rng):
    """``got`` has op's type, shape, dtype, module and view flags, and applies D."""
    assert type(got) is type(op) and got.shape == op.shape and got.dtype == op.dtype
    assert got.xp is xp
    if isinstance(op, ks.KSMatrix):
        assert got.view_flags == op.view_flags
    X = random_array(rng, (op.shape[1], 3), op.dtype)
    assert rel_err(got @ xp.asarray(X), D @ X) < RTOL[numpy.dtype(op.dtype)] * 10
    Z = random_array(rng, (2, op.shape[0]), op.dtype)
    assert rel_err(xp.asarray(Z) @ got, Z @ D) < RTOL[numpy.dtype(op.dtype)] * 10


@pytest.mark.parametrize("kind", KIND_NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pickle_and_deepcopy_round_trip(xp, rng, kind, dtype):
    op = operator_kinds(xp, rng, dtype)[kind]
    D = operator_oracle(op)
    op @ xp.asarray(random_array(rng, (op.shape[1], 2), dtype))   # fill caches and plans
    for restored in (pickle.loads(pickle.dumps(op)), copy.deepcopy(op), op.copy()):
        assert_same_operator(restored, op, D, xp, rng)


def test_copies_own_their_values(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64))
    D = operator_oracle(K)
    for clone in (K.copy(), copy.deepcopy(K), pickle.loads(pickle.dumps(K)), K.get()):
        clone.values = numpy.zeros(clone.pattern)     # writes into the clone's storage
        numpy.testing.assert_array_equal(operator_oracle(K), D)
    C = ks.dft(12)
    clone = C.copy()
    assert clone.input_permutation is not C.input_permutation
    numpy.testing.assert_array_equal(clone.input_permutation, C.input_permutation)


def test_pickle_drops_caches(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64))
    K.dense_cached()
    state = pickle.dumps(K)
    assert len(state) < 2 * K.values.nbytes       # the dense (30 x 40) matrix is not in it


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_get_and_to_cpu(xp, rng, kind):
    op = operator_kinds(xp, rng, numpy.complex64)[kind]
    D = operator_oracle(op)
    for host in (op.get(), op.to_device("cpu")):
        assert_same_operator(host, op, D, numpy, rng)


def test_to_device_rejects_bad_targets():
    K = ks.KSMatrix.random((1, 2, 2, 1))
    with pytest.raises(ValueError, match='"cpu", "gpu"'):
        K.to_device("tpu")
    with pytest.raises(TypeError, match='"cpu", "gpu"'):
        K.to_device(1.5)


def first_values(op):
    """The values of the first KSMatrix inside ``op`` (through chains, submatrices and real
    parts)."""
    while not isinstance(op, ks.KSMatrix):
        op = (op.factors[0] if isinstance(op, ks.KSChain)
              else op.chain if isinstance(op, ks.KSSubmatrix) else op.operator)
    return op.values


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KIND_NAMES)
def test_to_device_gpu(rng, kind):
    import cupy
    op = operator_kinds(numpy, rng, numpy.complex128)[kind]
    D = operator_oracle(op)
    for target in ("gpu", cupy.cuda.Device(0), 0):
        moved = op.to_device(target)
        assert_same_operator(moved, op, D, cupy, rng)
        assert first_values(moved).device.id == 0
        assert_same_operator(moved.get(), op, D, numpy, rng)


@pytest.mark.gpu
def test_to_device_second_gpu(rng):
    import cupy
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    C = operator_kinds(numpy, rng, numpy.complex64)["transform"]
    moved = C.to_device(cupy.cuda.Device(1))
    assert first_values(moved).device.id == 1
    assert all(f.values.device.id == 1 for f in moved.factors)
    assert moved.input_permutation.device.id == 1
    with cupy.cuda.Device(1):
        X = random_array(rng, (C.shape[1], 4), C.dtype)
        assert rel_err(moved @ cupy.asarray(X), operator_oracle(C) @ X) < 1e-5


@pytest.mark.parametrize("kind", KIND_NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_save_load_round_trip(xp, rng, tmp_path, kind, dtype):
    op = operator_kinds(xp, rng, dtype)[kind]
    D = operator_oracle(op)
    path = tmp_path / "op.npz"
    ks.save(path, op)
    assert_same_operator(ks.load(path, xp=xp), op, D, xp, rng)
    assert_same_operator(ks.load(path), op, D, numpy, rng)


def test_load_rejects_foreign_and_newer_files(tmp_path, rng):
    foreign = tmp_path / "foreign.npz"
    numpy.savez(foreign, x=numpy.ones(3))
    with pytest.raises(ValueError, match="not a kscupy operator file"):
        ks.load(foreign)
    path = tmp_path / "k.npz"
    ks.save(path, ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float32)))
    entries = dict(numpy.load(path))
    newer = tmp_path / "newer.npz"
    numpy.savez(newer, **{**entries, "kscupy_format": numpy.int64(ks.storage.FORMAT_VERSION + 1)})
    with pytest.raises(ValueError, match="newer"):
        ks.load(newer)
    broken = tmp_path / "broken.npz"
    numpy.savez(broken, **{k: v for k, v in entries.items() if k != "values_0"})
    with pytest.raises(ValueError, match="incomplete"):
        ks.load(broken)
    with pytest.raises(TypeError, match="KSSubmatrix or KSRealPart"):
        ks.save(tmp_path / "x.npz", numpy.ones(3))


def saved_bytes(tmp_path, rng):
    path = tmp_path / "good.npz"
    ks.save(path, ks.KSChain([ks.KSMatrix(random_array(rng, (2, 3, 4, 1), numpy.float32)),
                              ks.KSMatrix(random_array(rng, (1, 4, 3, 2), numpy.float32))]))
    return path.read_bytes()


def damaged_files(tmp_path, rng):
    """``{name: path}`` of files that kscupy.save did not write, or wrote and lost bytes of."""
    good = saved_bytes(tmp_path, rng)
    files = {"random bytes": rng.integers(0, 256, 4096, dtype=numpy.uint8).tobytes(),
             "empty": b"", "truncated": good[:len(good) // 2],
             "cut short": good[:-10], "text": b"hello, I am not an archive\n"}
    paths = {}
    for name, content in files.items():
        paths[name] = tmp_path / f"{name.replace(' ', '_')}.npz"
        paths[name].write_bytes(content)
    paths["npy"] = tmp_path / "single.npy"
    numpy.save(paths["npy"], numpy.ones(3))
    paths["object entry"] = tmp_path / "object.npz"
    numpy.savez(paths["object entry"], kscupy_format=numpy.int64(2),
                kind=numpy.array([{"a": 1}], dtype=object))
    good_path = tmp_path / "good.npz"
    entries = dict(numpy.load(good_path))
    for name, view in (("view as strings", numpy.array(["False", "False"])),
                       ("view as numbers", numpy.array([0, 1])),
                       ("view of 3 flags", numpy.array([False, False, True]))):
        paths[name] = tmp_path / f"{name.replace(' ', '_')}.npz"
        numpy.savez(paths[name], **{**entries, "view_0": view})
    return paths


def test_load_malformed_files_raise_value_error_naming_the_file(tmp_path, rng):
    for name, path in damaged_files(tmp_path, rng).items():
        with pytest.raises(ValueError) as info:
            ks.load(path)
        message = str(info.value)
        assert str(path) in message, name
        assert "pickle=" not in message, name      # never an invitation to unpickle


@pytest.mark.parametrize("seed", range(5))
def test_load_of_randomly_damaged_entries_never_fails_otherwise(tmp_path, seed):
    # every entry of a good file in turn dropped or replaced by a wrong but plain value:
    # load either gives back an operator or raises ValueError naming the file
    rng = numpy.random.default_rng(seed)
    saved = tmp_path / "good.npz"
    ks.save(saved, ks.KSSubmatrix(ks.dft(12), (11, 10)))
    entries = dict(numpy.load(saved))
    wrong = [numpy.int64(-1), numpy.int64(0), numpy.int64(7), numpy.str_("KSChain"),
             numpy.str_("Unknown"), numpy.ones(3), numpy.array([1, 2, 2, 1]),
             numpy.array([True]), numpy.float64(numpy.nan), numpy.array([], dtype=numpy.int64),
             numpy.ones((1, 2, 2, 6), dtype=numpy.int32)]
    for name in entries:
        for value in [None, *rng.permutation(numpy.array(wrong, dtype=object))[:4]]:
            changed = {k: v for k, v in entries.items() if k != name}
            if value is not None:
                changed[name] = value
            path = tmp_path / "changed.npz"
            numpy.savez(path, **changed)
            try:
                ks.load(path)
            except ValueError as exc:
                assert str(path) in str(exc)


def test_version_1_files_load(tmp_path, rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64))
    path = tmp_path / "v1.npz"
    numpy.savez(path, kscupy_format=numpy.int64(1), kscupy_kind=numpy.str_("KSMatrix"),
                factor_count=numpy.int64(1), values_0=to_numpy(K.values),
                pattern_0=numpy.array(K.pattern), view_0=numpy.array([False, False]))
    numpy.testing.assert_array_equal(ks.load(path).todense(), K.todense())


# -- values under threads ------------------------------------------------------------------
def _race(xp, op_of, K, rng, backend, seconds=1.0):
    """Products of ``op_of(K)`` in three threads while the main one assigns ``K.values``
    alternately to two value sets: every product must be that of one set, never a mix."""
    import threading
    import time
    w = [random_array(rng, K.pattern, K.dtype) for _ in range(2)]
    K.values = xp.asarray(w[0])
    op = op_of(K)
    X = xp.asarray(random_array(rng, (op.shape[1], 8), K.dtype))
    expected = []
    for values in w:
        K.values = xp.asarray(values)
        expected.append(operator_oracle(op) @ to_numpy(X))
    mixes, failures = [], []
    stop = time.monotonic() + seconds

    def multiply():
        try:
            while time.monotonic() < stop:
                Y = op.matmul(X, backend=backend)
                if min(rel_err(Y, e) for e in expected) > 1e-4:
                    mixes.append(min(rel_err(Y, e) for e in expected))
        except Exception as exc:       # noqa: BLE001 - reported below
            failures.append(exc)
    threads = [threading.Thread(target=multiply) for _ in range(3)]
    for t in threads:
        t.start()
    writes = 0
    while time.monotonic() < stop:
        K.values = xp.asarray(w[writes % 2])
        writes += 1
    for t in threads:
        t.join()
    assert not failures, failures[0]
    assert not mixes, f"{len(mixes)} products matched neither value set (rel. err {mixes[:3]})"
    assert writes > 10


@pytest.mark.parametrize("backend", ["auto", "bmm", "dense", "einsum", "sparse"])
@pytest.mark.parametrize("which", ["matrix", "matrix.T", "chain"])
def test_products_under_concurrent_assignment_see_old_or_new_values(xp, rng, backend, which):
    K = ks.KSMatrix(xp.asarray(random_array(rng, (4, 16, 16, 4), numpy.float64)))
    other = ks.KSMatrix(xp.asarray(random_array(rng, (1, 8, 8, 32), numpy.float64)))
    op_of = {"matrix": lambda K: K, "matrix.T": lambda K: K.T,
             "chain": lambda K: ks.KSChain([K, other])}[which]
    _race(xp, op_of, K, rng, backend)


def test_a_write_replaces_the_storage_for_every_view(rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 5), numpy.float64))
    views = [K.T, K.H, K.conj(), ks.KSChain([K, K.T])]
    K.dense_cached()
    old = [operator_oracle(v) for v in views]
    new_values = random_array(rng, K.pattern, numpy.float64)
    K.values = new_values
    numpy.testing.assert_array_equal(K.values, new_values)
    for view, before in zip(views, old):
        after = operator_oracle(view)
        assert not numpy.allclose(after, before)
        X = random_array(rng, (view.shape[1], 2), numpy.float64)
        for backend in ("dense", "sparse", "bmm"):
            assert rel_err(view.matmul(X, backend=backend), after @ X) < 1e-12


def test_a_plan_made_from_replaced_values_is_never_served_for_the_new_ones(rng):
    """A product that pinned the chain just before a write plans from the old values; the
    plan it keeps must not pass for a plan of the new ones (the old cache takes a number no
    live cache has). Planned for an H200's facts, on the CPU."""
    from kscupy.engine import planner
    K = ks.KSMatrix(random_array(rng, (2, 8, 8, 2), numpy.float32))
    C = ks.KSChain([K, ks.KSMatrix(random_array(rng, (4, 4, 4, 2), numpy.float32))])
    plans = {}
    before_write = C.factor_chain.pinned()            # a product reads the old values ...
    K.values = random_array(rng, K.pattern, numpy.float32)    # ... another thread writes
    old_plan = planner.cached_plan(before_write, "bsl", numpy.float32, 64, plans)
    new_plan = planner.cached_plan(C.factor_chain.pinned(), "bsl", numpy.float32, 64, plans)
    assert new_plan is not old_plan
    generations = {f.cache.generation for f in (before_write.factors[0], C.factor_chain.factors[0])}
    assert len(generations) == 2


def test_a_new_segments_tables_are_made_once_under_concurrent_first_launches(monkeypatch):
    """Threads launching a new whole-vector segment at once share one set of the tables its
    kernel table points into (the race that let a product read freed memory: on Python
    3.12 and later, whose cached_property holds no lock, each thread made its own
    interleaved blocks, the segment kept one set, and the other threads' launches read
    addresses into freed ones). NumPy factors: the tables are plain arrays here."""
    import threading
    import time
    from kscupy.core.factor import Factor
    from kscupy.kernels.ks_rows import make_row_segment
    rng = numpy.random.default_rng(0)
    factors = [ks.KSMatrix(random_array(rng, p, numpy.float64)).factor
               for p in [(1, 8, 8, 32), (4, 16, 16, 4)]]
    segment = make_row_segment(factors, numpy.dtype(numpy.float64), "bsl", 8)
    assert segment is not None and any(segment.vector_blocks)
    slow, made = Factor.interleaved_words, []

    def interleaved_words(self, conjugated=False):
        time.sleep(0.01)                       # every thread misses the factor's cache
        words = slow(self, conjugated)
        made.append(words)
        return words
    monkeypatch.setattr(Factor, "interleaved_words", interleaved_words)
    start, tables = threading.Barrier(8), []

    def launch():
        start.wait()
        tables.append(segment.meta)
    threads = [threading.Thread(target=launch) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == sum(segment.vector_blocks), "each thread made its own tables"
    kept = {words.ctypes.data for words in segment._interleaved if words is not None}
    for table in tables:
        assert {int(table[3 * i]) for i, vec in enumerate(segment.vector_blocks) if vec} == kept


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["matrix", "chain"])
def test_what_one_stream_prepares_another_reads_complete(rng, which):
    """A product on stream A prepares what the operator keeps (a float32 matrix's float64
    copy, packed weights, kernel tables) on A; the same product at once on stream B reads
    them without waiting for A: preparing waits for them before the run is kept."""
    from conftest import GPU_REASON, gpu_available
    if not gpu_available():
        pytest.skip(GPU_REASON)
    import cupy
    for seed in range(5):
        factors = [ks.KSMatrix.random(p, dtype=numpy.float32, xp=cupy, seed=seed + 10 * i)
                   for i, p in enumerate([(4, 16, 16, 4), (1, 8, 8, 32)])]
        op = factors[0] if which == "matrix" else ks.KSChain(factors)
        X = cupy.asarray(random_array(rng, (op.shape[1], 4096), numpy.float64))
        ref = operator_oracle(op) @ to_numpy(X)
        a, b = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        with a:
            Ya = op @ X
        with b:
            Yb = op @ X
        a.synchronize()
        b.synchronize()
        assert rel_err(Ya, ref) < 1e-5 and rel_err(Yb, ref) < 1e-5


def test_load_finds_the_file_save_named(tmp_path):
    """save (NumPy's savez) adds ".npz" to a path without it: load of the same path finds
    that file."""
    op = ks.butterfly(8, dtype=numpy.float64, seed=0)
    ks.save(str(tmp_path / "model"), op)
    assert (tmp_path / "model.npz").exists()
    numpy.testing.assert_array_equal(ks.load(str(tmp_path / "model")).todense(), op.todense())


@pytest.mark.parametrize("version", [numpy.array(0), numpy.array(-1), numpy.array("1"),
                                     numpy.array(True), numpy.array([1, 2])])
def test_a_format_version_no_kscupy_writes_is_named(tmp_path, version):
    path = tmp_path / "op.npz"
    ks.save(str(path), ks.butterfly(8, dtype=numpy.float64, seed=0))
    with numpy.load(path) as data:
        entries = {name: data[name] for name in data.files}
    entries["kscupy_format"] = version
    numpy.savez(path, **entries)
    with pytest.raises(ValueError, match="format version"):
        ks.load(str(path))
