"""cuBLAS products prepared once: the dense matrix (``dense`` and ``dense_tf32``) and every
group's block addressed where it lies (``bmm`` and ``bmm_tf32``).

``cupy.matmul`` spends host time on every call deciding again what it decided for the
previous call, as much as a small product takes on the GPU; a prepared product allocates
the result and makes its cuBLAS calls. cuBLAS is column-major: a row-major ``R × C`` matrix
with row stride ``s`` is the column-major ``C × R`` matrix with leading dimension ``s``, so
C-order products are column-major products of the transposes.

**Dense** (:func:`prepare`), ``D`` in C order (read by cuBLAS as the column-major
``Dᵀ``) or in Fortran order (read as ``D`` itself, ``Dᵀ`` stored in C order). The ``dense``
backend keeps ``D`` in Fortran order for the dtypes of :data:`DENSE_STORED_TRANSPOSED` at
default precision (``dense_tf32`` keeps C order), where cuBLAS's heuristics pick kernels at
least as fast for those forms, and up to a fifth faster on products of short batches; the
16-bit dtypes keep C order, whose bsf form runs up to a tenth faster
(``docs/performance.md``):

* bsl: ``Y (M, B) = D (M, N) @ X (N, B)``, i.e. ``Yᵀ = Xᵀ Dᵀ``:
  ``gemm(N, N, m=B, n=M, k=N, Xᵀ ld B, Dᵀ ld N, Yᵀ ld B)``, or with ``D`` in Fortran
  order ``gemm(N, T, ..., D ld M, ...)``;
* bsf: ``Y (B, M) = X (B, N) @ Dᵀ``, i.e. ``Yᵀ = D Xᵀ``:
  ``gemm(T, N, m=M, n=B, k=N, Dᵀ ld N, Xᵀ ld N, Yᵀ ld M)``, or with ``D`` in Fortran
  order ``gemm(N, N, ..., D ld M, ...)``.

**Groups** (:func:`prepare_groups`), the BMM algorithm without its permutations. Input
feature ``(i, l, j)`` (group ``(i, j)``, reduction index ``l < c``) is ``(i*c + l)*d + j``,
output feature ``(i, k, j)`` is ``(i*b + k)*d + j``; ``K_ij`` is group ``(i, j)``'s
``b × c`` block.

* bsl, X ``(N, B)`` with row stride ``sX``: group ``(i, j)``'s ``c`` input rows are a
  ``c × B`` matrix with row stride ``d*sX`` starting at row ``i*c*d + j``; its ``b`` output
  rows likewise in Y. ``Y_ijᵀ = X_ijᵀ K_ijᵀ``: ``gemm(N, op, m=B, n=b, k=c, X_ijᵀ ld d*sX,
  K_ijᵀ, Y_ijᵀ ld d*B)``. Groups of one ``i`` are ``sX`` (X) and ``B`` (Y) apart, groups of
  one ``j`` ``c*d*sX`` and ``b*d*B``: one strided-batched call per value of the shorter
  axis, batched over the longer. No copy at all.
* bsf, X ``(B, N)`` with row stride ``sX``, ``d = 1``: group ``i``'s columns are the
  column-major ``c × B`` matrix at column ``i*c`` with leading dimension ``sX``.
  ``Y_iᵀ = K_i X_iᵀ``: ``gemm(op, N, m=b, n=B, k=c, K_i, X_iᵀ ld sX, Y_iᵀ ld M)``, one
  call batched over ``i`` (strides ``c`` and ``b``).
* bsf with ``d > 1``: a group's columns are ``d`` apart, which no GEMM addresses. X is
  transposed to ``(N, B)`` (:mod:`.transpose`), multiplied as bsl, and the result
  transposed back: two extra passes over X and Y, as many as the permutations of
  ``reference.bmm`` and of PyTorch's BMM.

**The values' gradient** (:func:`values_gradient`): per group the batch sum
``dW_ij = G_ij X_ijᵀ`` (``X_ijᴴ`` for complex), a GEMM whose reduction runs over the batch,
on ``G_ij`` and ``X_ij`` addressed as the group products address ``Y_ij`` and ``X_ij``.

* bsl: ``G_ij`` (``b × B``, row stride ``d*sG``) is the column-major ``B × b`` matrix
  ``G_ijᵀ`` with leading dimension ``d*sG``, likewise ``X_ij``. ``dW_ijᵀ = conj(X_ij)
  G_ijᵀ``: ``gemm(C, N, m=c, n=b, k=B, X_ijᵀ ld d*sX, G_ijᵀ ld d*sG, dW_ijᵀ ld c)``,
  batched as the products are (group offsets ``(i*c*d + j)*sX`` and ``(i*b*d + j)*sG``).
* bsf, ``d = 1``: group ``i``'s columns of ``G`` are the column-major ``b × B`` matrix
  ``G_i`` at column ``i*b`` with leading dimension ``sG``. ``dW_i = G_i X_iᴴ``:
  ``gemm(N, C, m=b, n=c, k=B, G_i ld sG, X_i ld sX, dW_i ld b)``, one call batched over
  ``i``; ``dW_i`` comes out column-major (``engine/gradient_paths.py`` returns a view of it
  in the values' order).
* bsf with ``d > 1``: ``G`` and ``X`` are transposed to bsl first; or, by
  :func:`values_gradient_diagonal`, the ``d`` groups of one ``i`` are computed together:
  ``G``'s ``b*d`` columns of that ``i`` are the column-major ``b*d × B`` matrix ``G_i`` at
  column ``i*b*d`` (leading dimension ``sG``), likewise ``X_i``, and ``F_i = G_i X_iᴴ``
  (``b*d × c*d``: ``gemm(N, C, m=b*d, n=c*d, k=B, G_i ld sG, X_i ld sX, F_i ld b*d)``, one
  call batched over ``i``) holds ``dW_ij`` at rows ``k*d + j`` and columns ``l*d + j``:
  its ``d`` diagonal blocks, taken as a strided view. ``d`` times the products, no pass
  over the operands.

Few groups of small blocks give cuBLAS few output tiles, and its float32 GEMMs then leave
most SMs idle: the batch is cut into chunks (:func:`batch_chunks`), the
calls are made once per chunk (``k`` its length, ``A`` and ``B`` moved to its first
column) into a slice of a workspace each, and the slices are added.

(``op = T`` in place of ``C`` for real dtypes.) The 16-bit dtypes are summed in float32:
cuBLAS rounds its float32 sums once into the gradient, or the chunks' float32 sums are
added and then rounded.

The blocks are read where they are stored: ``tiles`` ``(a, d, b0, c0)`` row-major is, per
group, the column-major ``c0 × b0`` matrix ``V`` (leading dimension ``c0``). The operator's
block is ``Vᵀ`` (stored orientation) or ``V`` (transposed view); bsl needs its transpose,
bsf the block itself, so the call transposes ``V`` (``op = T``) where exactly one of "bsf"
and "transposed view" holds. A conjugated view conjugates in the same call where it
transposes (``op = C``); elsewhere (cuBLAS has no conjugate-only operation) the conjugated
blocks are copied once when the run is prepared.
"""
from __future__ import annotations

import functools

import numpy

from ..core import arrays
from ..core.arrays import PRECISIONS, runs_at
from .launcher import KernelRun

__all__ = ["prepare", "stores_transposed", "prepare_groups", "values_gradient",
           "values_gradient_run", "values_gradient_diagonal", "values_gradient_diagonal_run"]

_INT32_MAX = 2**31 - 1


#: The dtypes whose dense matrix the ``dense`` backend keeps in Fortran order (``Dᵀ`` in C
#: order) at default precision: where those forms were measured faster (float32; float64 and
#: complex64 ran as fast either way and keep C order, as do the 16-bit dtypes, slower so).
DENSE_STORED_TRANSPOSED = ("float32",)


def stores_transposed(dtype, precision: str = "default") -> bool:
    """Whether the ``dense`` backend hands :func:`prepare` its matrix in Fortran order for
    ``dtype`` at ``precision`` (:data:`DENSE_STORED_TRANSPOSED`)."""
    return precision == "default" and numpy.dtype(dtype).name in DENSE_STORED_TRANSPOSED


def _algo(dtype):
    """The ``cublasGemmAlgo_t`` of every call for operands of ``dtype``: cuBLAS's heuristics
    (``benchmarks/probe_gemm_algo.py`` replaces this function to time the others)."""
    from cupy_backends.cuda.libs import cublas
    return cublas.CUBLAS_GEMM_DEFAULT


def _ceil_div(n: int, m: int) -> int:
    return -(-n // m)


def _host_scalars(scalar):
    """``(one, zero)``: host scalars of ``scalar`` dtype (alpha and beta, read by address:
    keep them alive as long as the calls that read them)."""
    return numpy.ones((), scalar), numpy.zeros((), scalar)


def _group_offsets(a, d, by_i, by_j):
    """The calls of the groups' products, batched over the longer of ``a`` and ``d``:
    ``[(offsets, strides, count), ...]``, one per value of the shorter axis. ``by_i`` and
    ``by_j`` hold, per operand, the elements between groups ``(i, j)`` and ``(i + 1, j)``,
    and between ``(i, j)`` and ``(i, j + 1)``."""
    if d <= a:      # one call per j, batched over i
        return [(tuple(j * s for s in by_j), by_i, a) for j in range(d)]
    return [(tuple(i * s for s in by_i), by_j, d) for i in range(a)]


def _cublas_runner():
    """``call(fn, *args)``: ``fn(handle, blas, *args)`` on CuPy's cuBLAS handle, on CuPy's
    current stream, with scalars read from the host; ``blas`` has CuPy's cuBLAS functions,
    called through :mod:`.cublas_direct` while the stream is being captured in a CUDA
    graph. (A prepared product's launch is ``functools.partial(call, product)``: no closure
    made per call.)"""
    from cupy.cuda import device, get_current_stream
    from cupy_backends.cuda.libs import cublas
    from . import cublas_direct
    host_mode = cublas.CUBLAS_POINTER_MODE_HOST

    def call(fn, *args):
        handle = device.get_cublas_handle()
        stream = get_current_stream()
        blas = cublas_direct.direct() if stream.is_capturing() else cublas
        blas.setStream(handle, stream.ptr)
        blas.setPointerMode(handle, host_mode)
        fn(handle, blas, *args)
    return call


def prepare(D, X, layout, precision: str = "default"):
    """``run(X) -> Y`` computing ``D @ X`` (``"bsl"``, X ``(N, B)``) or ``X @ D.T``
    (``"bsf"``, X ``(B, N)``) with one cuBLAS GEMM (``cublasGemmEx``) on CuPy's current
    stream, for operands shaped and typed like ``X``, at ``precision`` (see
    ``arrays.PRECISIONS``); ``D`` in C or Fortran order (the module docstring gives both
    calls). None where this does not apply (an operand not in C order, a matrix in
    neither; dtypes that differ; a side beyond 2^31 - 1, cuBLAS's int)."""
    from cupy_backends.cuda.libs import cublas
    dtype = X.dtype
    if not runs_at(dtype, precision):
        raise TypeError(f"cuBLAS's GEMM here does not run {dtype} at precision {precision!r}")
    # Dᵀ in C order: D column-major, ld M (a single row or column, in both orders, keeps
    # the C-order forms)
    stored_transposed = D.flags.f_contiguous and not D.flags.c_contiguous
    if D.dtype != dtype or not X.flags.c_contiguous \
            or not (D.flags.c_contiguous or stored_transposed) \
            or max(D.shape + X.shape) > _INT32_MAX:
        return None
    data, compute, scalar = _types(dtype, precision)
    algo = _algo(dtype)
    M, N = D.shape
    one, zero = _host_scalars(scalar)
    alpha, beta = one.ctypes.data, zero.ctypes.data
    op_n, op_t = cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T
    d = D.data.ptr
    # D as cuBLAS reads it: the column-major D (M x N, ld M) where stored transposed, else
    # the column-major Dᵀ (N x M, ld N)
    ld_d = M if stored_transposed else N
    call = _cublas_runner()
    if layout == "bsl":         # op(B) = Dᵀ
        B = X.shape[1]
        y_shape = (M, B)
        op_d = op_t if stored_transposed else op_n

        def product(handle, blas, x, y):
            blas.gemmEx(handle, op_n, op_d, B, M, N, alpha, x, data, B, d, data, ld_d, beta, y,
                        data, B, compute, algo)
    else:                       # op(A) = D
        B = X.shape[0]
        y_shape = (B, M)
        op_d = op_n if stored_transposed else op_t

        def product(handle, blas, x, y):
            blas.gemmEx(handle, op_d, op_n, M, B, N, alpha, d, data, ld_d, x, data, N, beta, y,
                        data, M, compute, algo)

    # the run reads D, alpha and beta by address: it keeps them alive
    return KernelRun(functools.partial(call, product), y_shape, dtype, kept=(D, one, zero),
                     gemm=(D, layout))


def _strided_batched(blas, handle, gemm, k, x, other, out, calls, x_first, isz, osz):
    """One ``gemmStridedBatchedEx`` per ``((ox, oo, oy), (sx, so, sy), count)`` of ``calls``:
    ``count`` products, the ``i``-th of the operand at ``x + (ox + i*sx)`` elements and the
    one at ``other + (oo + i*so)`` (``A`` and ``B`` in that order where ``x_first``, else
    swapped) into ``out + (oy + i*sy)``; ``gemm`` holds the rest of the arguments,
    ``(transa, transb, m, n, alpha, lda, ldb, ldc, beta, data type, out's data type,
    compute type, algo)``, and ``isz``, ``osz`` the operands' and ``out``'s itemsizes. A
    call of one product is a plain ``gemmEx`` (one group, ``a = d = 1``: the batched entry
    point costs the host more for the same GEMM)."""
    transa, transb, m, n, alpha, lda, ldb, ldc, beta, data, out_data, compute, algo = gemm
    for (ox, oo, oy), (sx, so, sy), count in calls:
        first, second = (x + ox * isz, sx), (other + oo * isz, so)
        (A, sA), (Bm, sB) = (first, second) if x_first else (second, first)
        if count == 1:
            blas.gemmEx(handle, transa, transb, m, n, k, alpha, A, data, lda, Bm, data, ldb,
                        beta, out + oy * osz, out_data, ldc, compute, algo)
        else:
            blas.gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, data, lda,
                                      sA, Bm, data, ldb, sB, beta, out + oy * osz, out_data,
                                      ldc, sy, count, compute, algo)


#: cudaDataType_t of bfloat16 (library_types.h), which CuPy's runtime module does not name.
CUDA_R_16BF = 14


def _types(dtype, precision):
    """cuBLAS's data type, compute type and the scalars' dtype for ``dtype`` at
    ``precision``."""
    from cupy.cuda import runtime
    from cupy_backends.cuda.libs import cublas
    data = {"float16": runtime.CUDA_R_16F, "bfloat16": CUDA_R_16BF,
            "float32": runtime.CUDA_R_32F, "float64": runtime.CUDA_R_64F,
            "complex64": runtime.CUDA_C_32F, "complex128": runtime.CUDA_C_64F}[dtype.name]
    if precision == "tf32":
        compute = cublas.CUBLAS_COMPUTE_32F_FAST_TF32
    elif dtype in (numpy.float64, numpy.complex128):
        compute = cublas.CUBLAS_COMPUTE_64F
    else:
        compute = cublas.CUBLAS_COMPUTE_32F       # 16-bit dtypes too: summed in float32
    scalar = numpy.dtype(numpy.float32) if arrays.is_half(dtype) else dtype
    return data, compute, scalar


def _check_same_dtype(G, X):
    if G.dtype != X.dtype:
        raise TypeError(f"values_gradient takes G and X of one dtype, got {G.dtype} and "
                        f"{X.dtype}")


def _addressed(A):
    """``A`` itself where the products can address it in place (:func:`_row_stride`), else
    a C-order copy."""
    return A if _row_stride(A) is not None else A.copy(order="C")


def _row_stride(X):
    """``X``'s row stride in elements where the group products can address ``X`` in place
    (rows contiguous, aligned, apart by at least a row's length; a single row's stride is
    never read), else None (such operands are copied)."""
    isz = X.dtype.itemsize
    rows, cols = X.shape
    if X.data.ptr % isz or (cols > 1 and X.strides[1] != isz):
        return None
    if rows == 1:
        return cols
    stride = X.strides[0]
    return stride // isz if stride % isz == 0 and stride >= cols * isz else None


def prepare_groups(factor, X, layout, precision: str = "default"):
    """``run(X) -> Y``: the product of ``factor`` (a :class:`~kscupy.core.factor.Factor` in
    ``X.dtype``) with operands like ``X`` (``(N, B)`` in ``"bsl"``, ``(B, N)`` in
    ``"bsf"``) through cuBLAS's strided-batched GEMM as the module docstring lays out, on
    CuPy's current stream; the result is a new C-order array. Operands whose rows are not
    contiguous and aligned are copied to C order on every call (one more pass over X). None
    where cuBLAS cannot address the operand (a leading dimension beyond 2^31 - 1 elements)."""
    from . import transpose
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if not runs_at(X.dtype, precision):
        raise TypeError(f"cuBLAS's group products do not run {X.dtype} at precision "
                        f"{precision!r}")
    if _row_stride(X) is None:      # a new C-order copy always has a row stride
        run = prepare_groups(factor, X.copy(order="C"), layout, precision)
        return None if run is None else (lambda X: run(X.copy(order="C")))
    a, b, c, d = factor.pattern
    if layout == "bsf" and d > 1:
        B = X.shape[0]
        if d * B > _INT32_MAX:
            return None
        return transpose.around(X, lambda XT: _group_calls(factor, XT, "bsl", precision),
                                (factor.shape[0], B))
    return _group_calls(factor, X, layout, precision)


def _group_calls(factor, X, layout, precision):
    import cupy
    from cupy_backends.cuda.libs import cublas
    a, b, c, d = factor.pattern
    M, N = factor.shape
    dtype, isz = X.dtype, X.dtype.itemsize
    data, compute, scalar = _types(dtype, precision)
    algo = _algo(dtype)
    # the blocks: V (c0 x b0 column-major per group) transposed where exactly one of bsf and
    # a transposed view holds; conjugated in the same call, or copied conjugated once
    tiles = factor.tiles
    op_w = cublas.CUBLAS_OP_T if factor.transposed != (layout == "bsf") else cublas.CUBLAS_OP_N
    if factor.conjugated:
        if op_w == cublas.CUBLAS_OP_T:
            op_w = cublas.CUBLAS_OP_C
        else:
            tiles = cupy.conj(tiles)
    ld_w, block = tiles.shape[-1], b * c
    sX = _row_stride(X)
    op_n = cublas.CUBLAS_OP_N
    if layout == "bsl":
        B = X.shape[1]
        y_shape, ld_x, ld_y = (M, B), d * sX, d * B
        # (transa, transb, m, n, k, A = X, B = W, C = Y); group (i, j) at
        # X (i*c*d + j)*sX, W (i*d + j)*b*c, Y (i*b*d + j)*B
        calls = _group_offsets(a, d, by_i=(c * d * sX, d * block, b * d * B),
                               by_j=(sX, block, B))
        ops_mnk = (op_n, op_w, B, b, c)
        lds = (ld_x, ld_w, ld_y)
    else:           # d == 1
        B = X.shape[0]
        y_shape = (B, M)
        calls = [((0, 0, 0), (c, block, b), a)]
        ops_mnk = (op_w, op_n, b, B, c)
        lds = (ld_w, sX, M)
    if max(lds + ops_mnk[2:]) > _INT32_MAX:
        return None
    one, zero = _host_scalars(scalar)
    alpha, beta = one.ctypes.data, zero.ctypes.data
    w = tiles.data.ptr
    call = _cublas_runner()
    transa, transb, m, n, k = ops_mnk
    lda, ldb, ldc = lds
    gemm = (transa, transb, m, n, alpha, lda, ldb, ldc, beta, data, data, compute, algo)

    x_first = layout == "bsl"

    def product(handle, blas, x, y):
        _strided_batched(blas, handle, gemm, k, x, w, y, calls, x_first, isz, isz)

    return KernelRun(functools.partial(call, product), y_shape, dtype,
                     kept=(tiles, one, zero), groups=_groups(factor, tiles, calls, layout, B, lds))


def _groups(factor, tiles, calls, layout, B, lds):
    """``KernelRun.groups`` of a product made as ``calls``, where it is one batched call from
    the operands' starts and its blocks need no conjugation, else None: the operator's
    ``(G, b, c)`` blocks (a view of ``tiles``) and, in elements, the sizes and strides of the
    operand's ``c × B`` matrices ``X_g`` and the result's ``b × B`` matrices ``Y_g``; in
    ``"bsf"`` of ``X_gᵀ`` and ``Y_gᵀ``, whose columns are the C-order operand's rows. ``lds``:
    the calls' leading dimensions, of ``(X, W, Y)`` in bsl and ``(W, X, Y)`` in bsf."""
    if len(calls) != 1 or calls[0][0] != (0, 0, 0) or \
            (factor.conjugated and tiles.dtype.kind == "c"):
        return None
    _, (sx, _, sy), G = calls[0]
    a, b, c, d = factor.pattern
    W = tiles.reshape(G, *tiles.shape[-2:])     # the stored blocks, row-major
    if factor.transposed:
        W = W.transpose(0, 2, 1)
    if layout == "bsf":         # X_g's element (l, r) at X[r, g*c + l]
        _, ld_x, ld_y = lds
        return W, (G, c, B), (sx, 1, ld_x), (G, b, B), (sy, 1, ld_y)
    ld_x, _, ld_y = lds         # g = i*d + j: X_g's element (l, r) at X[(i*c + l)*d + j, r]
    return W, (G, c, B), (sx, ld_x, 1), (G, b, B), (sy, ld_y, 1)


#: The values' gradient sums over the long batch; where the groups' ``b x c`` outputs give
#: fewer than ``SPLIT_TILES_PER_SM`` output tiles of ``SPLIT_TILE x SPLIT_TILE`` per SM, the
#: batch is cut into at most ``SPLIT_MAX_CHUNKS`` chunks of at least ``SPLIT_MIN_CHUNK``
#: columns, each starting ``SPLIT_ALIGN`` bytes after the last in bsl (cuBLAS's fast kernels
#: need aligned operands); each chunk's sums go to a slice of a workspace, and the slices are
#: added (a pass over ``chunks x nnz`` values, small against ``G`` and ``X``).
SPLIT_TILE = 128
SPLIT_TILES_PER_SM = 2
SPLIT_MIN_CHUNK = 1024
SPLIT_MAX_CHUNKS = 64
SPLIT_ALIGN = 256
#: dtypes never cut into chunks (their tensor-op GEMMs reduce a long batch well on their
#: own; ``docs/performance.md`` has float16's measurements, and bfloat16 runs float16's
#: tensor-op path).
SPLIT_NEVER = ("float16", "bfloat16")


def batch_chunks(pattern, B: int, sms: int, dtype="float32") -> int:
    """How many chunks :func:`values_gradient` cuts a batch of ``B`` into for ``pattern``
    on a GPU of ``sms`` multiprocessors (1: none): enough for ``SPLIT_TILES_PER_SM`` output
    tiles per SM, within the limits above; 1 for the dtypes of ``SPLIT_NEVER``."""
    if numpy.dtype(dtype).name in SPLIT_NEVER:
        return 1
    a, b, c, d = pattern
    tiles = a * d * _ceil_div(b, SPLIT_TILE) * _ceil_div(c, SPLIT_TILE)
    wanted = _ceil_div(SPLIT_TILES_PER_SM * sms, tiles)
    return int(max(1, min(wanted, B // SPLIT_MIN_CHUNK, SPLIT_MAX_CHUNKS)))


def values_gradient(G, X, pattern, layout, sms=None, chunks=None):
    """The ``(a, d, b, c)`` blocks ``dW_ij = G_ij X_ijᴴ`` (the batch sum of each group's
    rows of ``G`` times its rows of ``X``, conjugated) for CuPy operands of one dtype: ``X``
    ``(N, B)`` and ``G`` ``(M, B)`` in ``"bsl"``, ``(B, N)`` and ``(B, M)`` in ``"bsf"``,
    by cuBLAS's strided-batched GEMM on the operands where they lie (the module docstring
    gives the calls), the batch cut into chunks where the groups alone would leave the
    GPU's ``sms`` multiprocessors idle (:func:`batch_chunks`; default: the current
    device's). Returned in the operands' dtype: the 16-bit dtypes summed in float32 and
    rounded once (by cuBLAS where the batch is one chunk, after adding the chunks' float32
    sums where not). None where cuBLAS cannot address them (a leading dimension or batch
    beyond 2^31 - 1). The calls for operands like these are worked out once
    (:func:`_gradient_run`) and kept for the process: a gradient then costs the host an
    allocation and the calls. ``chunks``: cut the batch into that many chunks instead
    (1: the whole batch in one call per group, cuBLAS's own reduction). Where ``d > 1``
    the blocks lie ``j``-major in memory (a ``(d, a, b, c)`` array seen as ``(a, d, b,
    c)``), which ``engine/gradient_paths.py`` returns as a view in the values' order
    ``(a, b, c, d)``."""
    import cupy
    from . import transpose
    _check_same_dtype(G, X)
    a, b, c, d = pattern
    B = X.shape[1] if layout == "bsl" else X.shape[0]
    if B == 0:
        return cupy.zeros((d, a, b, c), X.dtype).transpose(1, 0, 2, 3)
    if B > _INT32_MAX:
        return None
    if layout == "bsf" and d > 1:
        return values_gradient(transpose.transpose(G), transpose.transpose(X), pattern,
                               "bsl", sms, chunks)
    G, X = _addressed(G), _addressed(X)
    run = values_gradient_run(G, X, pattern, layout, sms, chunks)
    return None if run is None else run(G, X)


def values_gradient_run(G, X, pattern, layout, sms=None, chunks=None):
    """``run(G, X)``: :func:`values_gradient` planned now for operands shaped, strided and
    aligned like these, each call an allocation and the calls; None where it would copy or
    transpose them first, or cuBLAS cannot address them (or the batch is empty)."""
    _check_same_dtype(G, X)
    a, b, c, d = pattern
    B = X.shape[1] if layout == "bsl" else X.shape[0]
    sG, sX = _row_stride(G), _row_stride(X)
    if B == 0 or B > _INT32_MAX or (layout == "bsf" and d > 1) or sG is None or sX is None:
        return None
    if chunks is None:
        chunks = batch_chunks(pattern, B, sms if sms is not None else _sms(), X.dtype)
    elif chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    run = _gradient_run(tuple(pattern), layout, X.dtype, B, sG, sX, int(chunks))
    return None if run is None else (lambda G, X: run(G.data.ptr, X.data.ptr))


@functools.lru_cache(maxsize=256)
def _gradient_run(pattern, layout, dtype, B, sG, sX, chunks):
    """``run(g, x) -> dW``: :func:`values_gradient`'s calls for operands of ``dtype`` at
    addresses ``g`` and ``x`` with row strides ``sG`` and ``sX`` (elements) and a batch of
    ``B`` cut into ``chunks``; None where cuBLAS cannot address them."""
    import cupy
    from cupy_backends.cuda.libs import cublas
    a, b, c, d = pattern
    op_x = cublas.CUBLAS_OP_C if dtype.kind == "c" else cublas.CUBLAS_OP_T
    op_n = cublas.CUBLAS_OP_N
    block = b * c
    if layout == "bsl":
        # (transa, transb, m, n) and (A = X, B = G, C = dW); group (i, j) at
        # X (i*c*d + j)*sX, G (i*b*d + j)*sG, dW (j*a + i)*b*c (j-major: see
        # values_gradient); batch column n at +n in both
        calls = _group_offsets(a, d, by_i=(c * d * sX, b * d * sG, block),
                               by_j=(sX, sG, a * block))
        ops_mn = (op_x, op_n, c, b)
        lds = (d * sX, d * sG, c)
        batch_stride = (1, 1)
    else:           # d == 1: A = G, B = X, dW_i column-major (b x c); batch row n at n*s
        calls = [((0, 0, 0), (c, b, block), a)]
        ops_mn = (op_n, op_x, b, c)
        lds = (sG, sX, b)
        batch_stride = (sX, sG)
    if max(lds) > _INT32_MAX:
        return None
    # the batch in chunks: k columns from column n0, each chunk's sums at slice s
    isz = dtype.itemsize
    # chunks start SPLIT_ALIGN bytes apart in bsl: cuBLAS's tensor-core and vectorised
    # kernels need aligned operands, and fall back to far slower ones otherwise
    align = max(1, SPLIT_ALIGN // isz) if layout == "bsl" else 1
    step = _ceil_div(_ceil_div(B, chunks), align) * align
    spans = [(n0, min(step, B - n0)) for n0 in range(0, B, step)]
    # chunks' partial sums of the 16-bit dtypes are kept in float32 until added
    out_dtype = numpy.dtype(numpy.float32) if arrays.is_half(dtype) and len(spans) > 1 \
        else dtype
    osz = out_dtype.itemsize
    data, compute, scalar = _types(dtype, "default")
    out_data = _types(out_dtype, "default")[0]
    one, zero = _host_scalars(scalar)
    transa, transb, m, n = ops_mn
    lda, ldb, ldc = lds
    gemm = (transa, transb, m, n, one.ctypes.data, lda, ldb, ldc, zero.ctypes.data, data,
            out_data, compute, _algo(dtype))
    # in memory: bsl's (d, a, b, c), j-major; bsf's (a, 1, c, b) (d == 1), dW_i transposed
    group_shape = (d, a, b, c) if layout == "bsl" else (a, d, c, b)
    # one chunk writes the gradient itself; several, a slice each, added after
    sums_shape = group_shape if len(spans) == 1 else (len(spans),) + group_shape
    slice_size = a * d * block
    x_first = layout == "bsl"

    # The chunks of whole steps (all but a shorter last one) lie at constant strides: where
    # the groups are fewer than the calls a chunk takes times the chunks, batch each group
    # over the chunks instead of each chunk over the groups (fewer calls, each costing host
    # time), and the last chunk as before.
    whole = sum(1 for _, k in spans if k == step)
    by_group = [tuple(o + i * st for o, st in zip(offsets, strides))
                for offsets, strides, count in calls for i in range(count)]
    tail_calls = len(calls) * (len(spans) - whole)
    if whole > 1 and len(by_group) + tail_calls < len(spans) * len(calls):
        chunk_calls = [(offsets, (step * batch_stride[0], step * batch_stride[1], slice_size),
                        whole) for offsets in by_group]
    else:
        chunk_calls, whole = None, 0
    # the remaining chunks: (k, column offsets of X and G in bytes, slice offset in bytes)
    tails = [(k, n0 * batch_stride[0] * isz, n0 * batch_stride[1] * isz, s * slice_size * osz)
             for s, (n0, k) in enumerate(spans[whole:], start=whole)]
    new, call = cupy.ndarray, _cublas_runner()

    def run(g, x):
        sums = new(sums_shape, out_dtype)
        w = sums.data.ptr

        def run_calls(handle, blas):
            if chunk_calls:
                _strided_batched(blas, handle, gemm, step, x, g, w, chunk_calls, x_first,
                                 isz, osz)
            for k, at_x, at_g, at_w in tails:
                _strided_batched(blas, handle, gemm, k, x + at_x, g + at_g, w + at_w, calls,
                                 x_first, isz, osz)
        call(run_calls)
        dW = sums if len(spans) == 1 else sums.sum(axis=0).astype(dtype, copy=False)
        return dW.transpose(1, 0, 2, 3) if layout == "bsl" else dW.transpose(0, 1, 3, 2)
    run.kept = (one, zero)      # the calls read alpha and beta by address
    return run


def values_gradient_diagonal(G, X, pattern):
    """:func:`values_gradient` in batch-size-first with ``d > 1`` without transposing ``G``
    and ``X``: for each ``i`` the product of all its columns of ``G`` and ``X`` (``d``
    times the products of the groups), one strided-batched call over ``i``, of which the
    ``(a, d, b, c)`` blocks are a strided view. Pays where transposing the operands costs
    more than the products added (:mod:`kscupy.engine.gradient_paths` decides). None where
    cuBLAS cannot address the operands. The call for operands like these is worked out
    once (:func:`_diagonal_run`) and kept for the process."""
    import cupy
    _check_same_dtype(G, X)
    a, b, c, d = pattern
    B = X.shape[0]
    if B == 0:
        return cupy.zeros((a, d, b, c), X.dtype)
    G, X = _addressed(G), _addressed(X)
    run = values_gradient_diagonal_run(G, X, pattern)
    return None if run is None else run(G, X)


def values_gradient_diagonal_run(G, X, pattern):
    """``run(G, X)``: :func:`values_gradient_diagonal` planned now for operands shaped,
    strided and aligned like these; None where it would copy them first, or cuBLAS cannot
    address them (or the batch is empty)."""
    _check_same_dtype(G, X)
    B = X.shape[0]
    sG, sX = _row_stride(G), _row_stride(X)
    if B == 0 or sG is None or sX is None or max(B, sX, sG) > _INT32_MAX:
        return None
    run = _diagonal_run(tuple(pattern), X.dtype, B, sG, sX)
    return lambda G, X: run(G.data.ptr, X.data.ptr)


@functools.lru_cache(maxsize=256)
def _diagonal_run(pattern, dtype, B, sG, sX):
    """``run(g, x) -> (a, d, b, c) view``: :func:`values_gradient_diagonal`'s call for
    operands of ``dtype`` at addresses ``g`` and ``x`` with row strides ``sG`` and ``sX``
    (elements) and a batch of ``B``."""
    import cupy
    from cupy_backends.cuda.libs import cublas
    a, b, c, d = pattern
    m, n = b * d, c * d
    data, compute, scalar = _types(dtype, "default")
    one, zero = _host_scalars(scalar)
    op_x = cublas.CUBLAS_OP_C if dtype.kind == "c" else cublas.CUBLAS_OP_T
    gemm = (cublas.CUBLAS_OP_N, op_x, m, n, one.ctypes.data, sG, sX, m, zero.ctypes.data,
            data, data, compute, _algo(dtype))
    # A = G_i at element i*m, B = X_i at i*n, F_i (column-major m x n) at i*m*n
    # (x_first=False: G is A)
    calls = [((0, 0, 0), (n, m, m * n), a)]
    isz = dtype.itemsize
    # F[i, l*d + j', k*d + j] (F_i's entry at row k*d + j, column l*d + j'): the groups are
    # j' = j, so block (i, j)'s element (k, l) lies i*n*m + j*(m + 1) + k*d + l*d*m elements
    # in: one strided view (CuPy's diagonal of a reshape costs the host several times more)
    blocks = {"shape": (a, d, b, c),
              "strides": tuple(isz * s for s in (n * m, m + 1, d, d * m))}
    new, as_strided = cupy.ndarray, cupy.lib.stride_tricks.as_strided
    call = _cublas_runner()

    def run(g, x):
        F = new((a, n, m), dtype)       # F[i] column-major m x n: F_i(r, s) at [i, s, r]
        call(lambda handle, blas: _strided_batched(blas, handle, gemm, B, x, g, F.data.ptr,
                                                   calls, False, isz, isz))
        return as_strided(F, **blocks)                                   # (a, d, b, c)
    run.kept = (one, zero)      # the call reads alpha and beta by address
    return run


def _sms() -> int:
    """The current device's multiprocessors."""
    from ..core import device
    return device.current().sms
