"""Arrays of other libraries through DLPack (kscupy.core.foreign): products take them
without a copy and hand results back as the caller's type; KSMatrix takes them as values.

A stand-in library (``standin``, registered in ``sys.modules`` as an imported framework
would be) holds NumPy memory behind ``__dlpack__`` and has its own ``from_dlpack``, so the
mechanics are tested on any machine; PyTorch and JAX are tested where they import (CPU
tensors here, CUDA tensors in the GPU suite). Results are compared with a float64 oracle
from the definition (conftest)."""
import contextlib
import functools
import sys
import types

import numpy
import pytest

import kscupy as ks
from conftest import dense_oracle, gpu_available, GPU_REASON, random_array, rel_err, to_numpy


class StandIn:
    """An array of another library: NumPy memory behind DLPack, no ``__array__``, no
    ``@`` of its own for KS operators."""
    __module__ = "standin"

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    @property
    def dtype(self):
        return self.array.dtype


@pytest.fixture
def standin(monkeypatch):
    module = types.ModuleType("standin")
    module.from_dlpack = lambda x: StandIn(numpy.from_dlpack(x))
    monkeypatch.setitem(sys.modules, "standin", module)
    return module


def test_products_take_and_give_the_callers_arrays(standin, rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 2), numpy.float64))
    D = dense_oracle(to_numpy(K.values))
    X = random_array(rng, (16, 5), numpy.float64)
    Y = K @ StandIn(X)
    assert isinstance(Y, StandIn) and rel_err(Y.array, D @ X) < 1e-12
    Z = StandIn(X.T.copy()) @ K.T                      # batch-size-first, through __rmatmul__
    assert isinstance(Z, StandIn) and rel_err(Z.array, X.T @ D.T) < 1e-12
    C = ks.KSChain([K, ks.KSMatrix(random_array(rng, (4, 4, 3, 1), numpy.float64))])
    V = C.matmul(StandIn(random_array(rng, (12, 3), numpy.float64)), layout="bsl")
    assert isinstance(V, StandIn) and V.array.shape == (12, 3)


def test_the_operand_is_read_in_place(standin, rng):
    """Zero-copy: the product reads the caller's memory (a strided view included)."""
    K = ks.KSMatrix(random_array(rng, (1, 4, 4, 1), numpy.float64))
    X = random_array(rng, (4, 6), numpy.float64)
    seen = []
    real_take = ks.core.foreign.take

    def take(x, role="operand"):
        taken = real_take(x, role)
        seen.append(numpy.shares_memory(taken.native, X))
        return taken
    import kscupy.core.foreign as foreign
    foreign.take = take
    try:
        Y = K @ StandIn(X[:, ::2])
    finally:
        foreign.take = real_take
    assert seen == [True]
    assert rel_err(Y.array, dense_oracle(to_numpy(K.values)) @ X[:, ::2]) < 1e-12


def test_values_from_another_library_are_copied(standin, rng):
    w = random_array(rng, (2, 3, 4, 2), numpy.float32)
    K = ks.KSMatrix(StandIn(w))
    w[...] = 0                                         # the caller's memory changes
    assert numpy.abs(to_numpy(K.values)).max() > 0


def test_values_whose_tiled_view_is_contiguous_are_copied_too(rng):
    """Values that are the (a, b, c, d) view of an (a, d, b, c) array, as K.values is, are
    copied like any others (they were once shared with the caller's array)."""
    w = random_array(rng, (2, 5, 3, 4), numpy.float64).transpose(0, 2, 3, 1)
    K = ks.KSMatrix(w)
    before = dense_oracle(w)
    w[...] = 0
    numpy.testing.assert_array_equal(K.todense(), before.real)


def test_a_library_without_from_dlpack_gets_numpy_back(monkeypatch, rng):
    monkeypatch.setitem(sys.modules, "standin", types.ModuleType("standin"))
    K = ks.KSMatrix(random_array(rng, (1, 2, 2, 1), numpy.float64))
    Y = K @ StandIn(random_array(rng, (2, 3), numpy.float64))
    assert isinstance(Y, numpy.ndarray)


def test_unreachable_memory_and_bfloat16_are_named(standin):
    class Elsewhere(StandIn):
        def __dlpack_device__(self):
            return (14, 0)                             # kDLOneAPI: no module here reads it

    class Brain(StandIn):
        dtype = "torch.bfloat16"

        def __dlpack__(self, **kwargs):
            raise BufferError("unsupported dtype")
    K = ks.KSMatrix.random((1, 2, 2, 1), dtype=numpy.float32)
    with pytest.raises(TypeError, match="device type 14"):
        K @ Elsewhere(numpy.ones((2, 1), numpy.float32))
    with pytest.raises(TypeError, match="bfloat16 .* convert it to float32"):
        K @ Brain(numpy.ones((2, 1), numpy.float32))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_pytorch_tensors(device, rng):
    torch = pytest.importorskip("torch")
    if device == "cuda":
        if not gpu_available() or not torch.cuda.is_available():
            pytest.skip(GPU_REASON)
        import cupy as xp
    else:
        xp = numpy
    w = random_array(rng, (2, 8, 4, 2), numpy.float32)
    K = ks.KSMatrix(torch.from_numpy(w).to(device))
    assert K.xp is xp
    X = torch.from_numpy(random_array(rng, (16, 7), numpy.float32)).to(device)
    Y = K @ X
    assert isinstance(Y, torch.Tensor) and Y.device == X.device and Y.dtype == torch.float32
    assert rel_err(Y.cpu().numpy(), dense_oracle(w) @ X.cpu().numpy()) < 1e-5
    Z = X.T @ K.T
    assert isinstance(Z, torch.Tensor)
    assert rel_err(Z.cpu().numpy(), Y.cpu().numpy().T) < 1e-5


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_pytorch_lazy_conjugates_and_negations_are_applied(device, rng):
    """``t.conj()`` (which PyTorch will not export) and ``t.conj().imag`` (whose negation
    DLPack would drop) multiply as their values."""
    torch = pytest.importorskip("torch")
    if device == "cuda" and (not gpu_available() or not torch.cuda.is_available()):
        pytest.skip(GPU_REASON)
    w = random_array(rng, (2, 4, 3, 2), numpy.complex128)
    K = ks.KSMatrix(torch.from_numpy(w).to(device))
    z = torch.from_numpy(random_array(rng, (12, 5), numpy.complex128)).to(device)
    for _ in range(2):      # z's run kept: its lazy conjugate has the same memory and strides
        assert rel_err((K @ z).cpu().numpy(), dense_oracle(w) @ z.cpu().numpy()) < 1e-12
    for X in (z.conj(), z.conj().imag):
        assert X.is_conj() or X.is_neg()
        for _ in range(2):
            Y = K @ X
            assert isinstance(Y, torch.Tensor)
            expected = dense_oracle(w) @ X.resolve_conj().resolve_neg().cpu().numpy()
            assert rel_err(Y.cpu().numpy(), expected) < 1e-12


def test_jax_arrays(rng):
    jnp = pytest.importorskip("jax.numpy")
    w = random_array(rng, (2, 4, 4, 2), numpy.float32)
    K = ks.KSMatrix(w)
    X = jnp.asarray(random_array(rng, (16, 3), numpy.float32))
    Y = K @ X if K.xp is numpy and "cpu" in str(X.devices()).lower() else None
    if Y is None:
        pytest.skip("JAX arrays here are on a device other than the CPU")
    assert type(Y).__module__.split(".")[0] in ("jax", "jaxlib")
    assert rel_err(numpy.asarray(Y), dense_oracle(w) @ numpy.asarray(X)) < 1e-5


def _bf16_case(rng):
    """bfloat16 values of a factor and a batch for it (float32 draws rounded once), with
    the float64 oracle of the product from the rounded numbers."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")
    bf16 = numpy.dtype(ml_dtypes.bfloat16)
    w = random_array(rng, (2, 8, 4, 2), numpy.float32).astype(bf16)
    X = random_array(rng, (16, 5), numpy.float32).astype(bf16)
    ref = dense_oracle(w.astype(numpy.float64)) @ X.astype(numpy.float64)
    return bf16, ks.KSMatrix(w), X, ref


def test_host_bfloat16_pytorch_tensors_come_in_without_a_copy_and_back_as_such(rng):
    torch = pytest.importorskip("torch")
    bf16, K, X, ref = _bf16_case(rng)
    t = torch.from_numpy(X.view(numpy.int16)).view(torch.bfloat16)        # X's memory
    from kscupy.core import foreign
    assert numpy.shares_memory(foreign.take(t).native, X)
    Y = K @ t
    assert isinstance(Y, torch.Tensor) and Y.dtype == torch.bfloat16
    assert rel_err(Y.float().numpy(), ref) < 5e-3
    Z = t.T @ K.T                                                          # batch-size-first
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.bfloat16
    assert rel_err(Z.float().numpy().T, ref) < 5e-3
    K32 = ks.KSMatrix(K.values.astype(numpy.float32))
    assert (K32 @ t).dtype == torch.float32                                # the result dtype


def test_host_bfloat16_jax_arrays_come_back_as_such(rng):
    jnp = pytest.importorskip("jax.numpy")
    bf16, K, X, ref = _bf16_case(rng)
    j = jnp.asarray(X)
    if "cpu" not in str(j.devices()).lower():
        pytest.skip("JAX arrays here are on a device other than the CPU")
    Y = K @ j
    assert type(Y).__module__.split(".")[0] in ("jax", "jaxlib") and Y.dtype == jnp.bfloat16
    assert rel_err(numpy.asarray(Y).astype(numpy.float64), ref) < 5e-3


def test_gradients_and_value_writes_take_foreign_arrays(standin, rng):
    K = ks.KSMatrix(random_array(rng, (2, 3, 4, 2), numpy.float64))
    X, G = random_array(rng, (16, 5), numpy.float64), random_array(rng, (12, 5), numpy.float64)
    dX, dw = ks.vjp(K, StandIn(X), StandIn(G))
    assert isinstance(dX, StandIn)
    D = dense_oracle(to_numpy(K.values))
    assert rel_err(dX.array, D.T @ G) < 1e-12
    w = random_array(rng, (2, 3, 4, 2), numpy.float64)
    K.values = StandIn(w)
    numpy.testing.assert_array_equal(K.values, w)


@pytest.mark.gpu
def test_pytorch_products_follow_the_callers_stream(rng):
    """On a side PyTorch stream, a tensor made and changed there is multiplied after that
    work (the product runs on PyTorch's current stream), and the result is right."""
    torch = pytest.importorskip("torch")
    if not gpu_available() or not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    w = random_array(rng, (2, 64, 64, 4), numpy.float32)
    K = ks.KSMatrix(torch.from_numpy(w).cuda())
    x = random_array(rng, (512, 4096), numpy.float32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        X = torch.from_numpy(x).cuda(non_blocking=False)
        for _ in range(20):                     # pending work on the side stream
            X.mul_(1.0)
        X.mul_(2.0)
        Y = K @ X
        torch.cuda.current_stream().synchronize()
    assert rel_err(Y.cpu().numpy(), dense_oracle(w) @ (2 * x)) < 1e-5


def _cuda_torch(dtype):
    """PyTorch and its dtype named ``dtype``, where PyTorch, CUDA and (for bfloat16)
    ml_dtypes are there; else the test is skipped, saying which is missing."""
    torch = pytest.importorskip("torch")
    if not gpu_available() or not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    from kscupy.core import arrays
    if dtype == "bfloat16" and arrays.BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    return torch, getattr(torch, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["auto", "kernel", "kernel_fma", "bmm", "dense"])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_repeated_pytorch_products_write_into_tensors_pytorch_allocates(backend, layout, dtype,
                                                                       monkeypatch, rng):
    """A repeated product of a CUDA tensor whose run launches on pointers (a kernel, a
    cuBLAS call) makes no CuPy array (foreign.tensor_product): on a side stream with work
    pending on the operand, each product (the result's block poisoned with NaN by the
    caching allocator first) equals the oracle, for batches, vectors and strided vectors;
    with the fused FMA kernel and the dense GEMM, the third product of a batch or a vector
    takes no CuPy view of the tensor."""
    torch, tdtype = _cuda_torch(dtype)
    from kscupy.core import foreign
    w = random_array(rng, (2, 16, 8, 1 if backend == "bmm" else 3), numpy.float32)
    K = ks.KSMatrix(torch.from_numpy(w).to("cuda", tdtype))
    D = dense_oracle(torch.from_numpy(w).to(tdtype).double().numpy())    # as K rounded them
    (M, N), B = K.shape, 37
    taken = []
    take = foreign.take
    monkeypatch.setattr(foreign, "take", lambda x, *args: taken.append(x) or take(x, *args))
    tolerance = 1e-5 if dtype == "float32" else 1e-2
    side = torch.cuda.Stream()
    operands = ("batch",) * 3 + ("vector",) * 3 + ("strided vector",) * 2
    for number, operand in enumerate(operands):
        taken_before = len(taken)
        shape = ((N, B) if layout == "bsl" else (B, N)) if operand == "batch" else (N, 3)
        with torch.cuda.stream(side):
            X = torch.from_numpy(random_array(rng, shape, numpy.float32)).to("cuda", tdtype)
            for _ in range(10):                 # pending work on the side stream
                X.mul_(1.0)
            X.mul_(2.0)
            if operand != "batch":
                X = X[:, 1] if operand == "strided vector" else X[:, 1].contiguous()
            y_shape = (M,) if operand != "batch" else \
                (M, B) if layout == "bsl" else (B, M)
            poison = torch.full(y_shape, float("nan"), dtype=tdtype, device="cuda")
            del poison                          # its block is what the result is given next
            Y = K.matmul(X, layout=layout, backend=backend)
            side.synchronize()
        assert isinstance(Y, torch.Tensor) and Y.dtype == tdtype and Y.shape == y_shape
        x = X.double().cpu().numpy()
        expected = D @ x if (layout == "bsl" or operand != "batch") else x @ D.T
        assert rel_err(Y.double().cpu().numpy(), expected) < tolerance
        # the third product of a batch or a vector repeats a kept run (the second may
        # prepare anew: a background compile finished since the first expires its run)
        if operands[number - 2:number + 1] == (operand,) * 3 \
                and backend in ("kernel_fma", "dense"):
            assert len(taken) == taken_before


@pytest.mark.gpu
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("backend, pattern, handed", [
    ("dense", (2, 16, 8, 3), ("bsl", "bsf")), ("bmm", (1, 16, 8, 3), ("bsl",)),
    ("bmm", (3, 8, 16, 1), ("bsl", "bsf"))])
@pytest.mark.parametrize("layout", ["bsl", "bsf"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_repeated_16_bit_cublas_tensor_products_under_autocast_and_in_a_graph(
        dtype, layout, backend, pattern, handed, transposed, rng, monkeypatch):
    """A repeated cuBLAS product of a 16-bit CUDA tensor, which runs PyTorch's own matmul or
    bmm by a view of the kept matrix or blocks where the run is one call (the layouts of
    ``handed``; else kscupy's launch): under ``torch.autocast`` to the other 16-bit dtype
    (which would cast a matmul) it keeps the operand's dtype; a PyTorch CUDA graph captured
    right after the first product (the view is made inside the capture) replays with new
    data in the captured operand, each result (poisoned with NaN before the replay) equal
    to the oracle; for the operator and its transposed view."""
    from kscupy.core import foreign
    torch, tdtype = _cuda_torch(dtype)
    other = torch.bfloat16 if dtype == "float16" else torch.float16
    a, b, c, d = pattern
    w = random_array(rng, (a, b, c, d), numpy.float32)
    D = dense_oracle(torch.from_numpy(w).to(tdtype).double().numpy())   # as K rounded them
    if transposed:
        D = D.T
    N, B = D.shape[1], 37
    shape = (N, B) if layout == "bsl" else (B, N)
    by_pytorch = []                     # per call of _torch_blas: whether PyTorch ran it
    torch_blas = foreign._torch_blas

    def counted(*args):
        result = torch_blas(*args)
        by_pytorch.append(result is not None)
        return result
    monkeypatch.setattr(foreign, "_torch_blas", counted)

    def oracle(X):
        x = X.double().cpu().numpy()
        return D @ x if layout == "bsl" else x @ D.T

    def operator():
        K = ks.KSMatrix(torch.from_numpy(w).to("cuda", tdtype))
        return K.T if transposed else K

    def product(K, X):
        return K.matmul(X, layout=layout, backend=backend)

    K = operator()
    X = torch.from_numpy(random_array(rng, shape, numpy.float32)).to("cuda", tdtype)
    for _ in range(3):      # the second or third repeats a kept run (see the test above)
        Y = product(K, X)
        assert rel_err(Y.double().cpu().numpy(), oracle(X)) < 1e-2
    assert by_pytorch and all(by_pytorch) if layout in handed else by_pytorch == []
    del by_pytorch[:]
    with torch.autocast("cuda", dtype=other):
        Y = product(K, X)
    assert Y.dtype == tdtype and rel_err(Y.double().cpu().numpy(), oracle(X)) < 1e-2
    assert by_pytorch == ([False] if layout in handed else [])
    # a window of a wider tensor (rows padded, a storage offset), a vector and a strided
    # vector (both a batch of one in bsl), each repeated; the dense GEMM reads C-order
    # operands only (others are copied first, and so not handed over)
    wide = torch.from_numpy(random_array(rng, (shape[0] + 2, shape[1] + 3), numpy.float32))
    window = wide.to("cuda", tdtype)[1:shape[0] + 1, 2:shape[1] + 2]
    column = torch.from_numpy(random_array(rng, (N, 3), numpy.float32)).to("cuda", tdtype)
    in_place = backend == "bmm"
    for operand, expected, by in (
            (window, oracle(window), in_place and layout in handed),
            (column[:, 1].contiguous(), D @ column[:, 1].double().cpu().numpy(),
             "bsl" in handed),
            (column[:, 1], D @ column[:, 1].double().cpu().numpy(), in_place and "bsl" in handed)):
        del by_pytorch[:]
        for _ in range(3):
            Y = product(K, operand)
            assert rel_err(Y.double().cpu().numpy(), expected) < 1e-2
        assert by_pytorch and all(by_pytorch) if by else by_pytorch == []
    K = operator()                      # nothing kept yet
    X = torch.from_numpy(random_array(rng, shape, numpy.float32)).to("cuda", tdtype)
    product(K, X)                       # the first product, then the capture
    import cupy
    # CuPy's pool empty: a block CuPy's pool gave kscupy during the capture would need
    # cudaMalloc, which PyTorch's (global) capture mode forbids
    cupy.get_default_memory_pool().free_all_blocks()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        Y = product(K, X)
    for _ in range(3):
        X.copy_(torch.from_numpy(random_array(rng, shape, numpy.float32)).to("cuda", tdtype))
        Y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(Y.double().cpu().numpy(), oracle(X)) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("view", ["transposed", "offset", "strided", "broadcast", "empty"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "complex128", "bfloat16"])
def test_pytorch_cuda_views_are_read_where_they_lie(view, dtype, rng):
    """A CUDA tensor comes in from its pointer, shape and strides (kscupy.core.foreign's
    pointer path): views with a storage offset, other strides, a zero stride or no
    elements multiply as their values, and the result comes back as a tensor of the
    operand's dtype."""
    torch = pytest.importorskip("torch")
    if not gpu_available() or not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    real = "float32" if dtype == "bfloat16" else dtype
    tdtype = getattr(torch, dtype)
    w = random_array(rng, (2, 8, 4, 3), real)
    K = ks.KSMatrix(torch.from_numpy(w).to("cuda", tdtype))
    N, B = K.shape[1], 9
    base = torch.from_numpy(random_array(rng, (2 * N + 3, 3 * B + 1), real)).to("cuda", tdtype)
    X = {"transposed": base[:B, :N].T,
         "offset": base[3:N + 3, 1:B + 1],
         "strided": base[1::2, ::3][:N, :B],
         "broadcast": base[:N, :1].expand(N, B),
         "empty": base[:N, :0]}[view]
    assert X.shape[0] == N
    Y = K @ X
    assert isinstance(Y, torch.Tensor) and Y.dtype == tdtype and Y.is_cuda
    assert Y.shape == (K.shape[0], X.shape[1])
    wide = torch.complex128 if "complex" in dtype else torch.float64
    values = torch.from_numpy(w).to(tdtype).to(wide).numpy()     # as the operator rounded them
    oracle = dense_oracle(values) @ X.to(wide).cpu().numpy()
    tolerance = {"float32": 1e-5, "complex128": 1e-12}.get(dtype, 1e-2)
    if X.shape[1]:
        assert rel_err(Y.to(wide).cpu().numpy(), oracle) < tolerance


@pytest.mark.gpu
@pytest.mark.parametrize("view", ["contiguous", "transposed", "offset", "broadcast"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_products_on_a_pytorch_side_stream_with_a_matrix_made_outside_it(view, dtype, rng):
    """Matrices made on the default stream, multiplied at once by tensors made on a
    PyTorch side stream (non-blocking: it waits for no other stream), inside that stream's
    context, several times with new matrices and operands: each result equals the oracle
    (the matrix's tiles are complete before the side stream reads them; the operand is read
    on its producer's stream)."""
    torch, tdtype = _cuda_torch(dtype)
    side = torch.cuda.Stream()
    for _ in range(4):
        w = random_array(rng, (2, 8, 4, 3), "float32")
        K = ks.KSMatrix(torch.from_numpy(w).to("cuda", tdtype))
        N, B = K.shape[1], 9
        with torch.cuda.stream(side):
            base = torch.from_numpy(random_array(rng, (2 * N + 3, 3 * B + 1), "float32")) \
                .to("cuda", tdtype)
            X = {"contiguous": base[:N, :B].contiguous(), "transposed": base[:B, :N].T,
                 "offset": base[3:N + 3, 1:B + 1], "broadcast": base[:N, :1].expand(N, B)}[view]
            Y = K @ X
            Y2 = K @ X                              # a repeated product too
        side.synchronize()
        values = torch.from_numpy(w).to(tdtype).double().numpy()
        oracle = dense_oracle(values) @ X.double().cpu().numpy()
        tolerance = 1e-5 if dtype == "float32" else 1e-2
        assert rel_err(Y.double().cpu().numpy(), oracle) < tolerance
        assert rel_err(Y2.double().cpu().numpy(), oracle) < tolerance


@pytest.mark.gpu
def test_pytorch_cuda_tensors_without_strided_memory_are_named(rng):
    """A sparse CUDA tensor has no pointer and strides to read: the product raises
    TypeError saying it could not be taken, not PyTorch's own error."""
    torch = pytest.importorskip("torch")
    if not gpu_available() or not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    K = ks.KSMatrix(torch.from_numpy(random_array(rng, (2, 4, 3, 2), numpy.float32)).cuda())
    X = torch.from_numpy(random_array(rng, (12, 5), numpy.float32)).cuda().to_sparse()
    with pytest.raises(TypeError, match="could not be taken"):
        K @ X


@pytest.mark.gpu
def test_pytorch_gradients_and_values_follow_the_callers_stream(rng):
    """On a side PyTorch stream with work pending there: values taken by KSMatrix, and the
    gradient of a product (dX handed back as a tensor, dW as CuPy's), see the tensors as
    that work leaves them, and dX is ready for PyTorch's stream."""
    torch = pytest.importorskip("torch")
    if not gpu_available() or not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    w = random_array(rng, (2, 64, 64, 4), numpy.float32)
    x = random_array(rng, (512, 4096), numpy.float32)
    g = random_array(rng, (512, 4096), numpy.float32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        W = torch.from_numpy(w).cuda()
        X, G = torch.from_numpy(x).cuda(), torch.from_numpy(g).cuda()
        for _ in range(20):                     # pending work on the side stream
            W.mul_(1.0)
            X.mul_(1.0)
        W.mul_(2.0)
        X.mul_(2.0)
        G.mul_(3.0)
        K = ks.KSMatrix(W)
        dX, dW = ks.vjp(K, X, G)
        dX.mul_(1.0)                            # PyTorch's own use of dX on its stream
        side.synchronize()
    D = dense_oracle(2 * w)
    assert rel_err(dX.cpu().numpy(), D.T @ (3 * g)) < 1e-5
    expected = ks.values_grad(ks.KSMatrix(2 * w), 2 * x, 3 * g)
    assert rel_err(dW.get(), expected) < 1e-5


@pytest.mark.gpu
def test_pytorch_tensors_on_another_gpu_are_multiplied_there(rng):
    """A tensor on a GPU other than CuPy's current one: the product and the gradient run on
    the tensor's GPU, on PyTorch's stream there, and come back there."""
    torch = pytest.importorskip("torch")
    if not gpu_available() or not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    import cupy
    if cupy.cuda.runtime.getDeviceCount() < 2 or torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    w = random_array(rng, (2, 32, 48, 4), numpy.float32)
    x = random_array(rng, (2 * 48 * 4, 33), numpy.float32)
    g = random_array(rng, (2 * 32 * 4, 33), numpy.float32)
    with cupy.cuda.Device(1):
        K = ks.KSMatrix(cupy.asarray(w))
    X, G = torch.from_numpy(x).to("cuda:1"), torch.from_numpy(g).to("cuda:1")
    assert cupy.cuda.runtime.getDevice() == 0
    Y = K @ X
    dX, dW = ks.vjp(K, X, G)
    assert Y.device == X.device and dX.device == X.device and dW.device.id == 1
    D = dense_oracle(w)
    assert rel_err(Y.cpu().numpy(), D @ x) < 1e-5
    assert rel_err(dX.cpu().numpy(), D.T @ g) < 1e-5
    assert rel_err(dW.get(), ks.values_grad(ks.KSMatrix(w), x, g)) < 1e-5


def test_a_repeated_tensor_product_launches_into_a_tensor_its_library_allocates(monkeypatch):
    """foreign.tensor_product's mechanics on the CPU, with a stand-in for PyTorch's CUDA
    tensors: the run kept for the tensor's CuPy view (same shape, byte strides, dtype,
    alignment, layout, backend and device) launches on the tensor's address into a result
    the tensor's library allocates (``new_empty``): inside the producer's stream where that
    is not CuPy's current one on the current device, straight away where it is; a tensor of
    other strides or alignment, a complex one with a lazy conjugation, one with a lazy
    negation and one that requires grad find none. A 16-bit run of one cuBLAS call (a GEMM
    by a kept matrix, a batched GEMM of the groups' blocks) goes to PyTorch's matmul or bmm
    instead, except under autocast, with float16 accumulation or deterministic algorithms
    on, or across GPUs."""
    from kscupy.core import foreign
    from kscupy.engine.runs import PreparedRuns
    from kscupy.kernels.launcher import KernelRun

    class Tensor:
        def __init__(self, shape, stride, address, dtype="f32", **bits):
            self.shape, self._stride, self._address = shape, stride, address
            self.dtype, self.layout, self.is_nested = dtype, "strided", False
            self.requires_grad = bits.get("requires_grad", False)
            self._conj, self._neg = bits.get("conj", False), bits.get("neg", False)

        def stride(self):
            return self._stride

        def is_conj(self):
            return self._conj

        def is_neg(self):
            return self._neg

        def data_ptr(self):
            return self._address

        def get_device(self):
            return 1

        def new_empty(self, shape):
            return Tensor(shape, None, 4096)

    torch_stream = [7]
    torch = types.SimpleNamespace(Tensor=Tensor, strided="strided", _C=types.SimpleNamespace(
        _cuda_getCurrentRawStream=lambda device: torch_stream[0]))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(foreign, "_torch_dtypes", lambda: {
        "f32": numpy.dtype(numpy.float32), "c64": numpy.dtype(numpy.complex64),
        "f16": numpy.dtype(numpy.float16)})
    streams = []                        # the devices of the streams entered, in order

    class ExternalStream:
        def __init__(self, ptr, device_id):
            self.ptr, self.device_id = ptr, device_id

        def __enter__(self):
            streams.append(self.device_id)

        def __exit__(self, *exc):
            pass

    device = [0]
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDevice=lambda: device[0]),
        get_current_stream=lambda: types.SimpleNamespace(ptr=7),
        ExternalStream=ExternalStream, Device=lambda device_id: contextlib.nullcontext()))
    monkeypatch.setattr(foreign, "_gpu_cupy", lambda: cupy)
    monkeypatch.setattr(foreign, "_STREAMS", {})
    launched = []
    K = ks.KSMatrix.random((1, 3, 2, 1), dtype=numpy.float32, seed=0)
    runs = PreparedRuns(K.factor, lambda: 1, lambda: False)
    for dtype in ("f4", "c8"):
        run = KernelRun.__new__(KernelRun)
        run.launch, run.y_shape, run.dtype, run.kept = \
            (lambda x, y: launched.append((x, y, len(streams)))), (6, 5), numpy.dtype(dtype), ()
        run.gemm, run.groups, run.views = ("D", "bsl"), None, {}    # not 16-bit: launched
        size = numpy.dtype(dtype).itemsize
        view = types.SimpleNamespace(shape=(2, 5), strides=(5 * size, size),
                                     dtype=numpy.dtype(dtype),
                                     data=types.SimpleNamespace(ptr=2048))
        runs.keep(view, "bsl", "auto", run, runs.stamp())
        if dtype == "f4":
            run_f4 = run
    # the tensor's GPU is not the current one: launched inside the producer's stream
    result = foreign.tensor_product(Tensor((2, 5), (5, 1), 2048), runs, "bsl", "auto")
    assert isinstance(result, Tensor) and result.shape == (6, 5)
    assert launched == [(2048, 4096, 1)] and streams == [1]
    # its GPU is current and PyTorch's stream is CuPy's: launched with no stream entered
    device[0] = 1
    foreign.tensor_product(Tensor((2, 5), (5, 1), 2048, "c64"), runs, "bsl", "auto")
    assert launched[1:] == [(2048, 4096, 1)] and streams == [1]
    torch_stream[0] = 8                 # another stream: entered
    foreign.tensor_product(Tensor((2, 5), (5, 1), 2048), runs, "bsl", "auto")
    assert launched[2:] == [(2048, 4096, 2)] and streams == [1, 1]
    for other in (Tensor((2, 5), (1, 2), 2048), Tensor((2, 5), (5, 1), 2048, "c64", conj=True),
                  Tensor((2, 5), (5, 1), 2048, neg=True),
                  Tensor((2, 5), (5, 1), 2048, requires_grad=True),
                  Tensor((2, 5), (5, 1), 2056)):
        assert foreign.tensor_product(other, runs, "bsl", "auto") is None
    assert foreign.tensor_product(Tensor((2, 5), (5, 1), 2048), runs, "bsf", "auto") is None
    assert len(launched) == 3
    # a vector's and a 3-D tensor's strides are scaled to bytes like a matrix's
    for shape, stride in (((10,), (2,)), ((2, 3, 5), (15, 5, 1))):
        view = types.SimpleNamespace(shape=shape, strides=tuple(4 * s for s in stride),
                                     dtype=numpy.dtype("f4"),
                                     data=types.SimpleNamespace(ptr=2048))
        runs.keep(view, "bsl", "auto", run_f4, runs.stamp())
        foreign.tensor_product(Tensor(shape, stride, 2048), runs, "bsl", "auto")
    assert len(launched) == 5
    del launched[3:]                    # the counts below are the matrix's

    # a 16-bit run that is one GEMM by a kept matrix: PyTorch's matmul by a view of that
    # matrix (made once per run, with no stream order asked for), D @ X in bsl and X @ D.T
    # in bsf; nothing launched. Under autocast, or float16 with PyTorch's float16
    # accumulation on, the run launches as before.
    class Matrix:                       # a kept matrix, and PyTorch's view of it
        def __init__(self, name, device=1):
            self.name, self.T, self.device = name, name + "ᵀ", types.SimpleNamespace(id=device)

        def __dlpack__(self, stream=None):
            assert stream == -1
            return self.name

    views, products, autocast, fp16_accumulation = [], [], [False], [False]
    torch.utils = types.SimpleNamespace(dlpack=types.SimpleNamespace(
        from_dlpack=lambda capsule: views.append(capsule) or Matrix("view of " + capsule)))
    torch.matmul = lambda A, B: products.append((A, B)) or "the product"
    deterministic = [False]
    torch.is_autocast_enabled = lambda: autocast[0]
    torch.are_deterministic_algorithms_enabled = lambda: deterministic[0]
    torch._C._get_cublas_allow_fp16_accumulation = lambda: fp16_accumulation[0]
    # a cache of its own for the stand-in's switch, the process's own restored after
    monkeypatch.setattr(foreign, "_fp16_accumulation_switch", functools.lru_cache(maxsize=1)(
        foreign._fp16_accumulation_switch.__wrapped__))
    for layout in ("bsl", "bsf"):
        run = KernelRun.__new__(KernelRun)
        run.launch, run.y_shape, run.dtype, run.kept = \
            (lambda x, y: launched.append((x, y))), (6, 5), numpy.dtype("f2"), ()
        run.gemm, run.groups, run.views = (Matrix("D " + layout), layout), None, {}
        view = types.SimpleNamespace(shape=(2, 5), strides=(10, 2), dtype=numpy.dtype("f2"),
                                     data=types.SimpleNamespace(ptr=2048))
        runs.keep(view, layout, "dense", run, runs.stamp())
        X = Tensor((2, 5), (5, 1), 2048, "f16")
        for _ in range(2):
            assert foreign.tensor_product(X, runs, layout, "dense") == "the product"
        assert views[-1] == "D " + layout and len(views) == (1 if layout == "bsl" else 2)
        named = [(getattr(A, "name", A), B) for A, B in products[-2:]]
        assert named == ([("view of D bsl", X)] * 2 if layout == "bsl" else
                         [(X, "view of D bsfᵀ")] * 2)
    assert len(launched) == 3 and len(products) == 4
    for switch in (autocast, fp16_accumulation, deterministic):
        switch[0] = True
        assert isinstance(foreign.tensor_product(X, runs, "bsf", "dense"), Tensor)
        switch[0] = False
    assert len(launched) == 6 and len(products) == 4
    run.gemm, run.views = (Matrix("D on GPU 0", device=0), "bsf"), {}   # the tensor is on 1
    assert isinstance(foreign.tensor_product(X, runs, "bsf", "dense"), Tensor)
    assert len(launched) == 7 and len(products) == 4

    # a 16-bit run that is one batched GEMM of the groups' blocks: PyTorch's bmm by a view of
    # the blocks (made once), on the tensor and on a result PyTorch allocates, both seen
    # through the run's sizes and strides; nothing launched
    torch.bmm = lambda W, X, out: products.append((W.name, X, out))
    Tensor.as_strided = lambda self, size, strides: (self._address, size, strides)
    run = KernelRun.__new__(KernelRun)
    run.launch, run.y_shape, run.dtype, run.kept = \
        (lambda x, y: launched.append((x, y))), (6, 5), numpy.dtype("f2"), ()
    groups = (Matrix("W"), (2, 1, 5), (5, 10, 1), (2, 3, 5), (5, 10, 1))
    run.gemm, run.groups, run.views = None, groups, {}
    runs.keep(view, "bsl", "bmm", run, runs.stamp())
    for _ in range(2):
        result = foreign.tensor_product(X, runs, "bsl", "bmm")
        assert isinstance(result, Tensor) and result.shape == (6, 5)
        assert products[-1] == ("view of W", (2048, (2, 1, 5), (5, 10, 1)),
                                (4096, (2, 3, 5), (5, 10, 1)))
    assert views[-1] == "W" and views.count("W") == 1
    assert len(launched) == 7 and len(products) == 6
    autocast[0] = True
    assert isinstance(foreign.tensor_product(X, runs, "bsl", "bmm"), Tensor)
    assert len(launched) == 8 and len(products) == 6
