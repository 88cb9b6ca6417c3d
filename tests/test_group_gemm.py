"""CPU tests of the cuBLAS calls that ``bmm`` and ``dense`` make (kscupy/kernels/gemm.py):
their leading dimensions, strides, offsets and operations, on a stand-in for cuBLAS.

The stand-in executes each ``gemmStridedBatchedEx`` / ``gemmEx`` call as cuBLAS defines it
(column-major matrices at raw addresses, ``op`` N / T / C, batches ``stride`` elements
apart) with NumPy on host memory, and checks cuBLAS's argument rules (``ld >= rows``, ints
below 2^31) and that every matrix lies inside an array. CuPy arrays are stood in for by
NumPy arrays that expose ``.data.ptr`` (new ones full of NaN); the tiled transpose by NumPy. The products are compared with the dense matrix of the
definition. The GPU suite runs the same calls on cuBLAS itself (tests/gpu/test_kernel.py).
"""
import ctypes
import itertools
import sys
import types

import numpy
import pytest

from kscupy.core.factor import Factor

_DTYPES = {0: numpy.float32, 1: numpy.float64, 2: numpy.float16, 4: numpy.complex64,
           5: numpy.complex128}                  # cudaDataType values
OP_N, OP_T, OP_C = 0, 1, 2


class _Pointer:
    """A device pointer's or a stream's stand-in (``.ptr``); a stream that is not capturing."""
    capturing = False

    def __init__(self, ptr):
        self.ptr = ptr

    def is_capturing(self):
        return self.capturing


#: The byte ranges of the memory that HostArrays own: the stand-in reads and writes only there.
_ALLOCATIONS = set()


try:
    from numpy.lib.array_utils import byte_bounds as _byte_bounds       # NumPy 2
except ImportError:
    _byte_bounds = numpy.byte_bounds


def _owner(a):
    while isinstance(a.base, numpy.ndarray):
        a = a.base
    return a


class HostArray(numpy.ndarray):
    """A NumPy array that answers ``.data.ptr`` as a CuPy array does."""
    def __array_finalize__(self, obj):
        _ALLOCATIONS.add(_byte_bounds(_owner(self)))

    @property
    def data(self):
        return _Pointer(self.__array_interface__["data"][0])


def host(a):
    return numpy.asarray(a).view(HostArray)


def _poisoned(shape, dtype):
    """A new array full of NaN, as CuPy's allocation stands in: an element the calls do not
    write fails the comparison."""
    out = HostArray(shape, dtype)
    out[...] = numpy.nan
    return out


def _matrix(address, dtype, rows, cols, ld):
    """The column-major ``rows x cols`` matrix with leading dimension ``ld`` at ``address``."""
    assert ld >= max(1, rows), f"leading dimension {ld} below {rows} rows"
    size = (rows - 1) + (cols - 1) * ld + 1
    end = address + size * dtype.itemsize
    assert any(lo <= address and end <= hi for lo, hi in _ALLOCATIONS), \
        "a matrix reaches outside every array"
    buffer = (ctypes.c_char * (size * dtype.itemsize)).from_address(address)
    flat = numpy.ctypeslib.as_array(buffer).view(dtype)
    return numpy.lib.stride_tricks.as_strided(flat, (rows, cols), (dtype.itemsize, ld * dtype.itemsize))


def _op(matrix, operation):
    return {OP_N: matrix, OP_T: matrix.T, OP_C: matrix.T.conj()}[operation]


#: The compute types cuBLAS's GEMMs take for each data type (cudaDataType values), and the
#: real type of their scalars alpha and beta.
_COMPUTE = {0: {68: numpy.float32, 77: numpy.float32}, 2: {68: numpy.float32},
            1: {70: numpy.float64}, 4: {68: numpy.float32, 77: numpy.float32},
            5: {70: numpy.float64}}


def _host_scalar(address, dtype):
    return numpy.frombuffer((ctypes.c_char * dtype.itemsize).from_address(address),
                            dtype)[0]


def _gemm_strided_batched(handle, ta, tb, m, n, k, alpha, A, a_type, lda, sA, B, b_type, ldb,
                          sB, beta, C, c_type, ldc, sC, count, compute, algo):
    for value in (m, n, k, lda, ldb, ldc, count):
        assert 0 <= value < 2**31, "cuBLAS takes these as int"
    assert a_type == b_type and (c_type == a_type or (a_type, c_type) == (2, 0)), \
        "cuBLAS writes float32 from float16, else the operands' type"
    assert compute in _COMPUTE[a_type], "a compute type cuBLAS does not take for this data"
    dtype = numpy.dtype(_DTYPES[a_type])
    out_dtype = numpy.dtype(_DTYPES[c_type])
    wide = numpy.complex128 if dtype.kind == "c" else numpy.float64
    # alpha and beta: host scalars of the compute type's precision (complex for complex data)
    scalar = numpy.dtype(_COMPUTE[a_type][compute])
    if dtype.kind == "c":
        scalar = numpy.result_type(scalar, numpy.complex64)
    alpha, beta = _host_scalar(alpha, scalar), _host_scalar(beta, scalar)
    isz = dtype.itemsize
    for p in range(count):
        a = _matrix(A + p * sA * isz, dtype, *((m, k) if ta == OP_N else (k, m)), lda)
        b = _matrix(B + p * sB * isz, dtype, *((k, n) if tb == OP_N else (n, k)), ldb)
        c = _matrix(C + p * sC * out_dtype.itemsize, out_dtype, m, n, ldc)
        product = alpha * (_op(a, ta).astype(wide) @ _op(b, tb).astype(wide))
        if beta != 0:                              # beta = 0: C is written, never read
            product = product + beta * c.astype(wide)
        c[...] = product.astype(out_dtype)


def _gemm(handle, ta, tb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C, c_type,
          ldc, compute, algo):
    _gemm_strided_batched(handle, ta, tb, m, n, k, alpha, A, a_type, lda, 0, B, b_type, ldb,
                          0, beta, C, c_type, ldc, 0, 1, compute, algo)


@pytest.fixture
def gemm(monkeypatch):
    """kscupy.kernels.gemm with CuPy and cuBLAS stood in for (see the module docstring)."""
    cupy = types.ModuleType("cupy")
    cupy.ndarray = _poisoned
    cupy.conj = lambda a: host(numpy.conj(a))
    cupy.empty = lambda shape, dtype: HostArray(shape, dtype)
    cupy.zeros = lambda shape, dtype: host(numpy.zeros(shape, dtype))
    cupy.lib = types.SimpleNamespace(stride_tricks=types.SimpleNamespace(
        as_strided=lambda a, shape, strides: host(
            numpy.lib.stride_tricks.as_strided(a, shape, strides))))
    cuda = cupy.cuda = types.ModuleType("cupy.cuda")
    cuda.runtime = types.SimpleNamespace(CUDA_R_32F=0, CUDA_R_64F=1, CUDA_R_16F=2,
                                         CUDA_C_32F=4, CUDA_C_64F=5)
    cuda.device = types.SimpleNamespace(get_cublas_handle=lambda: 0)
    cuda.get_current_stream = lambda: _Pointer(0)
    cublas = types.SimpleNamespace(
        CUBLAS_OP_N=OP_N, CUBLAS_OP_T=OP_T, CUBLAS_OP_C=OP_C, CUBLAS_POINTER_MODE_HOST=0,
        CUBLAS_GEMM_DEFAULT=-1, CUBLAS_COMPUTE_32F=68, CUBLAS_COMPUTE_64F=70,
        CUBLAS_COMPUTE_32F_FAST_TF32=77, setStream=lambda handle, stream: None,
        setPointerMode=lambda handle, mode: None,
        gemmStridedBatchedEx=_gemm_strided_batched, gemmEx=_gemm)
    libs = types.SimpleNamespace(cublas=cublas)
    for name, module in (("cupy", cupy), ("cupy.cuda", cuda),
                         ("cupy.cuda.runtime", cuda.runtime), ("cupy.cuda.device", cuda.device),
                         ("cupy_backends", types.SimpleNamespace()),
                         ("cupy_backends.cuda", types.SimpleNamespace(libs=libs)),
                         ("cupy_backends.cuda.libs", libs),
                         ("cupy_backends.cuda.libs.cublas", cublas)):
        monkeypatch.setitem(sys.modules, name, module)
    _ALLOCATIONS.clear()
    from kscupy.kernels import gemm, transpose

    def around(X, prepare_inner, result_shape):
        inner = prepare_inner(HostArray(X.shape[::-1], X.dtype))
        return lambda X: host(numpy.ascontiguousarray(
            inner(host(numpy.ascontiguousarray(X.T))).T))
    monkeypatch.setattr(transpose, "around", around)
    monkeypatch.setattr(transpose, "transpose", lambda A: host(numpy.ascontiguousarray(A.T)))
    gemm._gradient_run.cache_clear()    # plans made with the stand-ins stay with them
    gemm._diagonal_run.cache_clear()
    yield gemm
    gemm._gradient_run.cache_clear()
    gemm._diagonal_run.cache_clear()


def _random(rng, shape, dtype):
    values = rng.standard_normal(shape)
    if numpy.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def _unaligned(a):
    """A copy of ``a`` one byte off its element alignment."""
    raw = numpy.empty(a.nbytes + 1, numpy.uint8)[1:]
    out = raw.view(a.dtype).reshape(a.shape)
    out[...] = a
    return host(out)


def _operands(rng, shape, dtype):
    """C order, a padded window (row stride beyond the row), Fortran order, every other row,
    and a copy off its element alignment."""
    rows, cols = shape
    base = _random(rng, (2 * rows + 3, cols + 4), dtype)
    return {"C": host(numpy.ascontiguousarray(base[:rows, :cols])),
            "padded": host(base)[1:rows + 1, 2:cols + 2],
            "fortran": host(numpy.asfortranarray(base[:rows, :cols])),
            "row-step": host(base)[:2 * rows:2, 1:cols + 1],
            "unaligned": _unaligned(base[:rows, :cols])}


PATTERNS = [(1, 1, 1, 1), (2, 3, 4, 1), (1, 3, 4, 5), (3, 2, 5, 2), (2, 4, 3, 6), (5, 2, 3, 2),
            (4, 1, 2, 3), (3, 3, 2, 3)]


def _views(rng, dtype):
    """``(pattern, (transposed, conjugated), B, factor)``: a random factor of each of
    :data:`PATTERNS` in each view, for batches of 1 and 5."""
    for pattern, flags, B in itertools.product(
            PATTERNS, itertools.product([False, True], repeat=2), [1, 5]):
        a, b, c, d = pattern
        stored = Factor.of_blocks(host(_random(rng, (a, d, b, c), dtype)), pattern)
        yield pattern, flags, B, stored.view(*flags)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.float16, numpy.float64])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_group_products_match_the_definition(gemm, dtype, layout):
    """Every pattern shape (a or d the longer, d = 1 in bsf, d > 1 through the transposes),
    the stored, transposed, conjugated and adjoint views, batches of 1 and 5, and operands
    in place or copied."""
    rng = numpy.random.default_rng(0)
    tol = 2e-3 if dtype == numpy.float16 else 1e-5
    for (a, b, c, d), (transposed, conjugated), B, factor in _views(rng, dtype):
        M, N = factor.shape
        D = factor.todense().astype(numpy.complex128)
        for kind, X in _operands(rng, (N, B) if layout == "bsl" else (B, N), dtype).items():
            Y = gemm.prepare_groups(factor, X, layout)(X)
            ref = D @ X if layout == "bsl" else numpy.asarray(X) @ D.T
            assert Y.shape == ref.shape and Y.dtype == dtype
            err = numpy.abs(Y - ref).max() / max(1.0, numpy.abs(ref).max())
            assert err < tol, ((a, b, c, d), transposed, conjugated, B, kind, err)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.float16])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_one_call_group_runs_describe_their_batched_product(gemm, dtype, layout):
    """``KernelRun.groups``, what a PyTorch tensor's product hands to PyTorch's ``bmm``: set
    exactly where the run is one batched call on the operand in place (``min(a, d) = 1`` in
    bsl, ``d = 1`` in bsf) and its blocks need no conjugation; there, the blocks ``W`` and
    the operand's and a poisoned result's matrices seen through its sizes and strides give,
    by ``Y_g = W[g] @ X_g``, the definition's product, for every view and operand kind."""
    from kscupy.kernels.launcher import KernelRun
    rng = numpy.random.default_rng(5)
    tol = 2e-3 if dtype == numpy.float16 else 1e-5
    for (a, b, c, d), (transposed, conjugated), B, factor in _views(rng, dtype):
        D = factor.todense().astype(numpy.complex128)
        N = D.shape[1]
        for kind, X in _operands(rng, (N, B) if layout == "bsl" else (B, N), dtype).items():
            run = gemm.prepare_groups(factor, X, layout)
            in_place = isinstance(run, KernelRun)
            one_call = min(a, d) == 1 if layout == "bsl" else d == 1
            described = in_place and one_call and not (conjugated and
                                                      numpy.dtype(dtype).kind == "c")
            assert (in_place and run.groups is not None) == described, \
                ((a, b, c, d), transposed, conjugated, kind)
            if not described:
                continue
            ref = D @ X if layout == "bsl" else numpy.asarray(X) @ D.T
            err = _groups_error(run, X, ref)
            assert err < tol, ((a, b, c, d), transposed, conjugated, B, kind, err)


def _groups_error(run, X, ref):
    """The relative error of ``run.groups``'s product ``Y_g = W[g] @ X_g`` (into a poisoned
    result seen through its sizes and strides) against ``ref``, after checking what PyTorch's
    ``bmm`` asks of the description: three-dimensional operands of one batch and matching
    inner sizes, views that stay inside ``X`` and the result, and each matrix with a unit
    stride and the other at least its length (read in place by cuBLAS, no copy)."""
    W, x_size, x_strides, y_size, y_strides = run.groups
    G, c, B = x_size
    assert W.shape == (G, y_size[1], c) and y_size == (G, W.shape[1], B)
    isz = X.dtype.itemsize
    Y = _poisoned(run.y_shape, X.dtype)
    for A, size, strides in ((X, x_size, x_strides), (Y, y_size, y_strides)):
        reach = sum((n - 1) * s for n, s in zip(size, strides))
        assert reach <= sum((n - 1) * s // isz for n, s in zip(A.shape, A.strides))
        assert (strides[2] == 1 and strides[1] >= max(1, size[2])) or \
            (strides[1] == 1 and strides[2] >= max(1, size[1])), (size, strides)
    Yg = numpy.lib.stride_tricks.as_strided(Y, y_size, [s * isz for s in y_strides])
    Yg[...] = numpy.asarray(W) @ numpy.lib.stride_tricks.as_strided(
        X, x_size, [s * isz for s in x_strides])
    return numpy.abs(Y - ref).max() / max(1.0, numpy.abs(ref).max())


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.float16])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_block_dense_products_match_the_definition(gemm, dtype, layout):
    """The block_dense backend's product: the groups' calls on the factor's dense diagonal
    blocks (Factor.block_dense, pattern (a, b*d, c*d, 1)), for every view, against the dense
    matrix of the view's own blocks."""
    rng = numpy.random.default_rng(4)
    tol = 2e-3 if dtype == numpy.float16 else 1e-5
    for (a, b, c, d), (transposed, conjugated), B, factor in _views(rng, dtype):
        wide = factor.block_dense()
        assert tuple(wide.pattern) == (a, factor.pattern.b * d, factor.pattern.c * d, 1)
        blocks = Factor.of_blocks(host(wide.tiles), wide.pattern)
        D = factor.todense().astype(numpy.complex128)
        X = host(_random(rng, (D.shape[1], B) if layout == "bsl" else (B, D.shape[1]), dtype))
        run = gemm.prepare_groups(blocks, X, layout)
        Y = run(X)
        ref = D @ X if layout == "bsl" else numpy.asarray(X) @ D.T
        err = numpy.abs(Y - ref).max() / max(1.0, numpy.abs(ref).max())
        assert Y.dtype == dtype and err < tol, ((a, b, c, d), transposed, conjugated, B, err)
        if run.groups is not None:      # one call (d = 1): PyTorch's bmm may run it
            assert _groups_error(run, X, ref) < tol, ((a, b, c, d), transposed, conjugated)


def test_block_dense_blocks_keep_infinities_and_zeros_apart():
    """An infinite value stays in its place and the zeros around it stay zero (chosen, not
    multiplied by an identity: inf * 0 would be NaN); the blocks are kept and a write
    replaces them."""
    tiles = numpy.ones((2, 3, 2, 2), numpy.float32)
    tiles[1, 2, 0, 1] = numpy.inf
    factor = Factor.of_blocks(tiles, (2, 2, 2, 3))
    E = factor.block_dense().tiles.reshape(2, 2, 3, 2, 3)     # (i, k, j, l, j')
    assert E[1, 0, 2, 1, 2] == numpy.inf
    assert numpy.isfinite(numpy.delete(E.ravel(), numpy.ravel_multi_index(
        (1, 0, 2, 1, 2), E.shape))).all()
    assert numpy.count_nonzero(E) == tiles.size
    assert factor.block_dense() is factor.block_dense()
    factor.write(2 * numpy.ones((2, 3, 2, 2), numpy.float32))
    assert factor.block_dense().tiles.max() == 2


@pytest.fixture
def recorded(gemm, monkeypatch):
    """``record(index)``: a list that gets argument ``index`` of every strided-batched call
    the stand-in makes from then on (20: batchCount, 5: k), or the tuple of arguments
    where ``index`` is a tuple of indices."""
    def record(index):
        seen = []

        def recording(*args):
            seen.append(args[index] if isinstance(index, int) else tuple(args[i] for i in index))
            _gemm_strided_batched(*args)
        monkeypatch.setattr(sys.modules["cupy_backends.cuda.libs.cublas"],
                            "gemmStridedBatchedEx", recording)
        return seen
    return record


def test_group_calls_loop_over_the_shorter_axis(gemm, recorded):
    """One strided-batched call per value of the shorter of a and d (batch-size-last), one
    call for batch-size-first with d = 1."""
    calls = recorded(20)                           # batchCount
    rng = numpy.random.default_rng(1)
    for pattern, layout, expected in (((3, 2, 2, 5), "bsl", [5, 5, 5]),
                                      ((6, 2, 2, 2), "bsl", [6, 6]),
                                      ((4, 3, 2, 1), "bsf", [4])):
        calls.clear()
        factor = Factor.of_blocks(host(_random(rng, (pattern[0], pattern[3]) + pattern[1:3],
                                               numpy.float32)), pattern)
        N = factor.shape[1]
        X = host(_random(rng, (N, 7) if layout == "bsl" else (7, N), numpy.float32))
        gemm.prepare_groups(factor, X, layout)(X)
        assert calls == expected, (pattern, calls)


def test_single_rows_and_unaligned_operands_are_addressed_or_copied(gemm):
    """A bsf batch of one row whose stride cuBLAS never reads (a broadcast view) and an
    operand off its element alignment both run (the second through a copy)."""
    rng = numpy.random.default_rng(2)
    factor = Factor.of_blocks(host(_random(rng, (2, 1, 3, 4), numpy.float32)), (2, 3, 4, 1))
    D = factor.todense()
    x = host(_random(rng, 8, numpy.float32))
    row = x[None, :]
    numpy.testing.assert_allclose(gemm.prepare_groups(factor, row, "bsf")(row), row @ D.T,
                                  rtol=1e-5)
    unaligned = _unaligned(x.reshape(1, 8))
    assert unaligned.data.ptr % 4
    numpy.testing.assert_allclose(gemm.prepare_groups(factor, unaligned, "bsf")(unaligned),
                                  unaligned @ D.T, rtol=1e-5)


def test_dense_product(gemm):
    """D in C order, in Fortran order, and as the dense backend keeps float32's (the C-order
    transpose seen transposed): each order its own GEMM form; a single row or column (both
    orders at once) too."""
    rng = numpy.random.default_rng(3)
    for dtype, layout, B, (M, N), order in itertools.product(
            [numpy.float32, numpy.complex128, numpy.float16], ["bsl", "bsf"], [1, 6],
            [(5, 7), (1, 7), (5, 1)], ["C", "F", "transposed"]):
        D = _random(rng, (M, N), dtype)
        if order == "transposed":
            D = host(numpy.ascontiguousarray(D.T)).T
        else:
            D = host(numpy.asarray(D, order=order))
        assert D.flags.c_contiguous == (order == "C") or min(M, N) == 1
        X = host(_random(rng, (N, B) if layout == "bsl" else (B, N), dtype))
        Y = gemm.prepare(D, X, layout)(X)
        ref = D.astype(numpy.complex128) @ X if layout == "bsl" \
            else X.astype(numpy.complex128) @ D.T
        tol = 2e-3 if dtype == numpy.float16 else 1e-5       # of the largest element
        numpy.testing.assert_allclose(Y.astype(numpy.complex128), ref, rtol=tol,
                                      atol=tol * numpy.abs(ref).max())
    with pytest.raises(TypeError, match="precision"):
        gemm.prepare(host(numpy.ones((2, 2))), host(numpy.ones((2, 2))), "bsl", "tf32")


def _gradient_oracle(G, X, pattern, layout):
    """``dW[i, j] = sum_n G[i, k, j, n] conj(X[i, l, j, n])`` as ``(a, d, b, c)`` in
    complex128, from the definition (bsl indices; bsf operands transposed first)."""
    a, b, c, d = pattern
    G, X = numpy.asarray(G).astype(numpy.complex128), numpy.asarray(X).astype(numpy.complex128)
    if layout == "bsf":
        G, X = G.T, X.T
    B = G.shape[1]
    return numpy.einsum("ikjn,iljn->ijkl", G.reshape(a, b, d, B), X.reshape(a, c, d, B).conj())


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.float16, numpy.float64,
                                   numpy.complex128])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_values_gradient_matches_the_definition(gemm, dtype, layout):
    """The cuBLAS calls of the values' gradient (a or d the longer, d = 1 and d > 1 in bsf)
    on operands in place, padded, in Fortran order, every other row and unaligned; float16
    comes back in float16, summed in float32."""
    rng = numpy.random.default_rng(4)
    tol = 2e-3 if dtype == numpy.float16 else 1e-5
    for pattern, B in itertools.product(PATTERNS, [1, 3, 7]):
        a, b, c, d = pattern
        M, N = a * b * d, a * c * d
        Gs = _operands(rng, (M, B) if layout == "bsl" else (B, M), dtype)
        Xs = _operands(rng, (N, B) if layout == "bsl" else (B, N), dtype)
        for (g_kind, G), (x_kind, X) in zip(Gs.items(), reversed(list(Xs.items()))):
            dW = gemm.values_gradient(G, X, pattern, layout, sms=1)
            ref = _gradient_oracle(G, X, pattern, layout)
            assert dW.shape == (a, d, b, c)
            assert dW.dtype == dtype
            err = numpy.abs(dW - ref).max() / max(1.0, numpy.abs(ref).max())
            assert err < tol, (pattern, B, g_kind, x_kind, err)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.complex64, numpy.float16,
                                   numpy.complex128])
def test_values_gradient_diagonal_matches_the_definition(gemm, dtype):
    """Batch-size-first gradients from each i's whole product and its diagonal blocks, on
    the operand kinds of the group products, in the operands' dtype."""
    rng = numpy.random.default_rng(9)
    tol = 2e-3 if dtype == numpy.float16 else 1e-5
    for pattern, B in itertools.product(PATTERNS, [1, 3, 7]):
        a, b, c, d = pattern
        Gs = _operands(rng, (B, a * b * d), dtype)
        Xs = _operands(rng, (B, a * c * d), dtype)
        for (g_kind, G), (x_kind, X) in zip(Gs.items(), reversed(list(Xs.items()))):
            dW = gemm.values_gradient_diagonal(G, X, pattern)
            ref = _gradient_oracle(G, X, pattern, "bsf")
            assert dW.shape == (a, d, b, c) and dW.dtype == dtype
            err = numpy.abs(dW - ref).max() / max(1.0, numpy.abs(ref).max())
            assert err < tol, (pattern, B, g_kind, x_kind, err)


def test_values_gradient_of_an_empty_batch_is_zero(gemm):
    G, X = host(numpy.ones((6, 0), numpy.float32)), host(numpy.ones((8, 0), numpy.float32))
    dW = gemm.values_gradient(G, X, (2, 3, 4, 1), "bsl", sms=1)
    assert dW.shape == (2, 1, 3, 4) and not dW.any()


def test_values_gradient_loops_over_the_shorter_axis(gemm, recorded):
    calls = recorded(20)                           # batchCount
    rng = numpy.random.default_rng(5)
    for pattern, layout, expected in (((3, 2, 2, 5), "bsl", [5, 5, 5]),
                                      ((6, 2, 2, 2), "bsl", [6, 6]),
                                      ((4, 3, 2, 1), "bsf", [4]),
                                      ((2, 3, 2, 3), "bsf", [3, 3])):
        calls.clear()
        a, b, c, d = pattern
        shapes = ((a * b * d, 5), (a * c * d, 5)) if layout == "bsl" else \
            ((5, a * b * d), (5, a * c * d))
        G, X = (host(_random(rng, shape, numpy.float32)) for shape in shapes)
        gemm.values_gradient(G, X, pattern, layout, sms=1)
        assert calls == expected, (pattern, calls)


def test_values_gradient_in_batch_chunks(gemm, recorded, monkeypatch):
    """Where the groups give cuBLAS few output tiles the batch is cut into chunks, the last
    one shorter, and their sums added: the same gradient in every layout and dtype."""
    monkeypatch.setattr(gemm, "SPLIT_MIN_CHUNK", 2)
    monkeypatch.setattr(gemm, "SPLIT_ALIGN", 1)
    rng = numpy.random.default_rng(6)
    assert gemm.batch_chunks((2, 3, 4, 2), 7, sms=100) == 3      # 7 // 2 chunks at most
    assert gemm.batch_chunks((2, 3, 4, 2), 7, sms=1) == 1        # 4 groups fill one SM
    assert gemm.batch_chunks((2, 3, 4, 2), 7, sms=100, dtype=numpy.float16) == 1
    lengths = recorded(5)                          # k of every call: 3, 3 and 1 columns
    for dtype, layout, pattern in itertools.product(
            [numpy.float32, numpy.complex128, numpy.float64], ["bsl", "bsf"],
            [(2, 3, 4, 2), (3, 2, 5, 1), (1, 4, 3, 3)]):
        a, b, c, d = pattern
        B = 7
        shapes = ((a * b * d, B), (a * c * d, B)) if layout == "bsl" else \
            ((B, a * b * d), (B, a * c * d))
        G, X = (host(_random(rng, shape, dtype)) for shape in shapes)
        lengths.clear()
        dW = gemm.values_gradient(G, X, pattern, layout, sms=100)
        assert sorted(set(lengths)) == [1, 3] and lengths.count(1) * 2 == lengths.count(3)
        ref = _gradient_oracle(G, X, pattern, layout)
        assert numpy.abs(dW - ref).max() / max(1.0, numpy.abs(ref).max()) < 1e-5, \
            (dtype, layout, pattern)


def test_float16_chunks_are_added_in_float32_then_rounded(gemm, recorded, monkeypatch):
    """Where a 16-bit batch is cut into chunks (not by default), cuBLAS writes each chunk's
    sums in float32, they are added, and the gradient comes back in float16, close to the
    float64 oracle; unchunked, cuBLAS writes float16 itself."""
    out_types = recorded(17)                       # the C matrix's cudaDataType
    monkeypatch.setattr(gemm, "SPLIT_MIN_CHUNK", 2)
    monkeypatch.setattr(gemm, "SPLIT_ALIGN", 1)
    monkeypatch.setattr(gemm, "SPLIT_NEVER", ())
    rng = numpy.random.default_rng(7)
    pattern, B = (2, 3, 4, 2), 7
    G = host(_random(rng, (2 * 3 * 2, B), numpy.float16))
    X = host(_random(rng, (2 * 4 * 2, B), numpy.float16))
    dW = gemm.values_gradient(G, X, pattern, "bsl", sms=100)
    ref = _gradient_oracle(G, X, pattern, "bsl")
    assert dW.dtype == numpy.float16 and set(out_types) == {0}      # CUDA_R_32F
    assert numpy.abs(dW - ref).max() / max(1.0, numpy.abs(ref).max()) < 2e-3
    out_types.clear()
    gemm.values_gradient(G, X, pattern, "bsl", sms=1)                   # one chunk
    assert set(out_types) == {2}                                         # CUDA_R_16F


@pytest.mark.parametrize("layout", ["bsl", "bsf"])
def test_few_groups_are_batched_over_the_chunks(gemm, recorded, monkeypatch, layout):
    """Where the groups are few and the chunks many, each group is one call batched over the
    whole chunks, and the shorter last chunk one call batched over the groups: 3 calls
    instead of 7 for 2 groups and chunks of 3 + 3 + 3 + 3 + 3 + 3 + 1 columns."""
    monkeypatch.setattr(gemm, "SPLIT_MIN_CHUNK", 2)
    monkeypatch.setattr(gemm, "SPLIT_ALIGN", 1)
    seen = recorded((5, 20))                             # k and batchCount of each call
    rng = numpy.random.default_rng(8)
    pattern, B = ((1, 3, 4, 2), 19) if layout == "bsl" else ((2, 3, 4, 1), 19)
    a, b, c, d = pattern
    shapes = ((a * b * d, B), (a * c * d, B)) if layout == "bsl" else \
        ((B, a * b * d), (B, a * c * d))
    for dtype in (numpy.float32, numpy.complex128):
        G, X = (host(_random(rng, shape, dtype)) for shape in shapes)
        seen.clear()
        dW = gemm.values_gradient(G, X, pattern, layout, sms=100)
        assert seen == [(3, 6), (3, 6), (1, 2)], seen
        ref = _gradient_oracle(G, X, pattern, layout)
        assert numpy.abs(dW - ref).max() / max(1.0, numpy.abs(ref).max()) < 1e-5, dtype


def test_batch_chunks_start_aligned(gemm, recorded, monkeypatch):
    """In bsl each chunk starts SPLIT_ALIGN bytes after the last (cuBLAS's fast kernels need
    aligned operands): 7 float32 columns in chunks of at least 2, 8 bytes apart, are cut
    4 + 3, not 3 + 3 + 1."""
    monkeypatch.setattr(gemm, "SPLIT_MIN_CHUNK", 2)
    monkeypatch.setattr(gemm, "SPLIT_ALIGN", 8)
    lengths = recorded(5)                          # k
    rng = numpy.random.default_rng(7)
    G, X = host(_random(rng, (6, 7), numpy.float32)), host(_random(rng, (8, 7), numpy.float32))
    dW = gemm.values_gradient(G, X, (1, 3, 4, 2), "bsl", sms=100)
    assert lengths == [4, 3]
    numpy.testing.assert_allclose(dW, _gradient_oracle(G, X, (1, 3, 4, 2), "bsl"), rtol=1e-5)


def test_a_whole_batch_is_one_call_per_group(gemm, recorded, monkeypatch):
    """chunks=1 keeps the batch whole where the default cuts it (k = B in every call, no
    sum of chunks), with the same gradient; the default cuts this one in two."""
    monkeypatch.setattr(gemm, "SPLIT_MIN_CHUNK", 2)
    monkeypatch.setattr(gemm, "SPLIT_ALIGN", 8)
    lengths = recorded(5)                          # k
    rng = numpy.random.default_rng(11)
    G, X = host(_random(rng, (6, 7), numpy.float32)), host(_random(rng, (8, 7), numpy.float32))
    expected = _gradient_oracle(G, X, (1, 3, 4, 2), "bsl")
    numpy.testing.assert_allclose(gemm.values_gradient(G, X, (1, 3, 4, 2), "bsl", sms=100),
                                  expected, rtol=1e-5)
    assert lengths == [4, 3]
    lengths.clear()
    numpy.testing.assert_allclose(
        gemm.values_gradient(G, X, (1, 3, 4, 2), "bsl", sms=100, chunks=1), expected,
        rtol=1e-5)
    assert lengths == [7]


def test_one_product_is_a_plain_gemm(gemm, recorded, monkeypatch):
    """A call of one product (a = d = 1: one group) goes to gemmEx, not the strided-batched
    entry point, with the same result."""
    batched = recorded(20)
    plain = []
    stand_in = sys.modules["cupy_backends.cuda.libs.cublas"]
    gemm_ex = stand_in.gemmEx
    monkeypatch.setattr(stand_in, "gemmEx", lambda *args: (plain.append(args[5]),
                                                           gemm_ex(*args)))
    rng = numpy.random.default_rng(9)
    factor = Factor.of_blocks(host(_random(rng, (1, 1, 5, 6), numpy.float32)), (1, 5, 6, 1))
    X = host(_random(rng, (6, 4), numpy.float32))
    G = host(_random(rng, (5, 4), numpy.float32))
    numpy.testing.assert_allclose(gemm.prepare_groups(factor, X, "bsl")(X),
                                  host(factor.todense()) @ X, rtol=1e-5)
    numpy.testing.assert_allclose(gemm.values_gradient(G, X, (1, 5, 6, 1), "bsl", sms=1),
                                  _gradient_oracle(G, X, (1, 5, 6, 1), "bsl"), rtol=1e-5)
    assert batched == [] and plain == [6, 4]                # k: c, then the batch


def test_a_captured_stream_calls_cublas_directly(gemm, monkeypatch):
    """While the current stream is being captured (CuPy's bindings then refuse cuBLAS) every
    call of the dense, group and gradient products goes through cublas_direct, with the
    arguments CuPy's bindings would get; outside a capture none does."""
    from kscupy.kernels import cublas_direct
    stand_in = sys.modules["cupy_backends.cuda.libs.cublas"]
    direct_calls = []

    class Recording:
        def __getattr__(self, name):
            def call(*args):
                direct_calls.append(name)
                return getattr(stand_in, name)(*args)
            return call
    monkeypatch.setattr(cublas_direct, "direct", lambda: Recording())
    stream = _Pointer(0)
    monkeypatch.setattr(sys.modules["cupy.cuda"], "get_current_stream", lambda: stream)
    rng = numpy.random.default_rng(8)
    factor = Factor.of_blocks(host(_random(rng, (2, 2, 3, 4), numpy.float32)), (2, 3, 4, 2))
    X = host(_random(rng, (16, 5), numpy.float32))
    G = host(_random(rng, (12, 5), numpy.float32))
    D = host(factor.todense())
    runs = [lambda: gemm.prepare_groups(factor, X, "bsl")(X),
            lambda: gemm.prepare(D, X, "bsl")(X),
            lambda: gemm.values_gradient(G, X, (2, 3, 4, 2), "bsl", sms=1)]
    expected = [D @ X, D @ X, _gradient_oracle(G, X, (2, 3, 4, 2), "bsl")]
    for capturing in (False, True):
        stream.capturing = capturing
        direct_calls.clear()
        for run, ref in zip(runs, expected):
            numpy.testing.assert_allclose(run(), ref, rtol=1e-5)
        assert bool(direct_calls) == capturing
        assert not capturing or {"setStream", "gemmEx", "gemmStridedBatchedEx"} <= \
            set(direct_calls)


def test_the_cublas_library_is_found_among_the_mapped_files(tmp_path):
    """CuPy's cuBLAS by its major version, beside cuBLASLt and another library's cuBLAS of
    another version; none, or two of that version, is an error naming the way out."""
    from kscupy.kernels import cublas_direct
    maps = tmp_path / "maps"
    lines = ["7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libcublasLt.so.13.2.0",
             "7f02-7f03 r-xp 00000000 08:01 2 /opt/nvidia/cublas/lib/libcublas.so.13",
             "7f06-7f07 r-xp 00000000 08:01 3 /torch/lib/libcublas.so.12.8.4.1",
             "7f04-7f05 rw-p 00000000 00:00 0"]
    maps.write_text("\n".join(lines) + "\n")
    assert cublas_direct.library_path(13, str(maps)) == "/opt/nvidia/cublas/lib/libcublas.so.13"
    assert cublas_direct.library_path(12, str(maps)) == "/torch/lib/libcublas.so.12.8.4.1"
    for text in (lines[0], lines[1] + "\n" + lines[1].replace("/opt/nvidia", "/other")):
        maps.write_text(text + "\n")
        with pytest.raises(RuntimeError, match="backend='kernel'"):
            cublas_direct.library_path(13, str(maps))


def test_direct_calls_pass_cublas_its_c_argument_types():
    """Direct declares each entry point with the C signature's argument count and types
    (64-bit strides for the strided-batched GEMM) and calls it with CuPy's arguments."""
    import ctypes
    from kscupy.kernels import cublas_direct

    class Symbol:
        def __init__(self):
            self.calls = []

        def __call__(self, *args):
            assert len(args) == len(self.argtypes)
            self.calls.append(args)
            return 0

    class Library:
        def __init__(self):
            self.symbols = {}

        def __getattr__(self, name):
            return self.symbols.setdefault(name, Symbol())
    lib = Library()
    direct = cublas_direct.Direct(lib)
    gemm = lib.symbols["cublasGemmEx"]
    batched = lib.symbols["cublasGemmStridedBatchedEx"]
    assert len(gemm.argtypes) == 19 and len(batched.argtypes) == 23
    assert [i for i, t in enumerate(batched.argtypes) if t is ctypes.c_longlong] == [10, 14, 19]
    direct.gemmStridedBatchedEx(*range(23))
    direct.gemmEx(*range(19))
    assert len(batched.calls) == len(gemm.calls) == 1
    direct._set_stream = lambda handle, stream: 7          # a status other than success
    with pytest.raises(RuntimeError, match="cublasSetStream failed with cuBLAS status 7"):
        direct.setStream(0, 0)


def test_chunks_below_one_are_refused(gemm):
    rng = numpy.random.default_rng(12)
    G, X = host(_random(rng, (3, 5), numpy.float32)), host(_random(rng, (4, 5), numpy.float32))
    with pytest.raises(ValueError, match="chunks must be at least 1"):
        gemm.values_gradient(G, X, (1, 3, 4, 1), "bsl", sms=1, chunks=0)


def test_block_dense_keeps_bfloat16_where_the_array_module_would_widen_it():
    """CuPy's ``where`` has no bfloat16 loop and returns float32, whose bytes cuBLAS would
    then read as bfloat16 (a wrong product, with no error): the diagonal blocks are chosen as
    16-bit patterns instead, and a module that widens anyway is refused, not used."""
    from kscupy.core import arrays, factor as factors
    bf16 = arrays.BFLOAT16
    if bf16 is None:
        pytest.skip("bfloat16 needs ml_dtypes (the test extra)")

    def widening(condition, x, y):
        out = numpy.where(condition, x, y)
        return out.astype(numpy.float32) if out.dtype in (bf16, numpy.uint16) and \
            widen_bits else out
    xp = types.SimpleNamespace(eye=numpy.eye, zeros=numpy.zeros, where=widening,
                               ascontiguousarray=numpy.ascontiguousarray)
    rng = numpy.random.default_rng(6)
    blocks = rng.standard_normal((3, 4, 5, 7)).astype(bf16)           # (a, d, b, c)
    widen_bits = False      # bfloat16 widened, its bit patterns not (as CuPy does)
    wide = factors._block_dense(blocks, (3, 5, 7, 4), xp)
    assert wide.dtype == bf16
    E = wide.tiles.reshape(3, 5, 4, 7, 4).astype(numpy.float64)      # (i, k, j, l, j')
    for j in range(4):
        assert (E[:, :, j, :, j] == blocks[:, j].astype(numpy.float64)).all()
    assert numpy.count_nonzero(E) == numpy.count_nonzero(blocks.astype(numpy.float64))
    widen_bits = True
    with pytest.raises(TypeError, match="came out float32"):
        factors._block_dense(blocks, (3, 5, 7, 4), xp)
