"""PyTorch's products as benchmark baselines (the paper's BMM, and the dense product with
TF32 allowed): what the repository's benchmarks add to the package's suites
(``bench_suite.py``). PyTorch is optional and never a dependency of the package: every
function returns None, and :data:`TORCH` adds nothing, when torch does not import or sees
no GPU."""
from __future__ import annotations

import contextlib

from kscupy.bench.baselines import Baselines

try:
    import torch
except ImportError:      # the benchmarks time the other baselines
    torch = None


def torch_available() -> bool:
    return torch is not None and torch.cuda.is_available()


@contextlib.contextmanager
def allow_tf32(enabled: bool):
    """PyTorch's matmuls with TF32 allowed or not (``torch.backends.cuda.matmul.allow_tf32``),
    restored on exit."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _tensors():
    """``tensor(X)``: PyTorch's view of a CuPy operand, made once per operand (by address,
    shape, strides and dtype) and kept: a PyTorch user holds tensors, and ``torch.from_dlpack``
    costs the host about 10 us a call, which the baselines should not pay on every call."""
    views = {}

    def tensor(X):
        key = (X.data.ptr, X.shape, X.strides, X.dtype.str)
        found = views.get(key)
        if found is None:
            found = views[key] = torch.from_dlpack(X)
        return found
    return tensor


def torch_bmm(blocks, layout, tf32=False):
    """The paper's PyTorch baseline as a function of a CuPy operand: permute the input to
    (a*d, c, B) (bsl) or (a*d, B, c) (bsf), ``torch.bmm`` with the (a, d, b, c) blocks,
    permute back. Shares the CuPy arrays through DLPack (no copies). ``tf32`` allows
    TF32 tensor cores (``torch.backends.cuda.matmul.allow_tf32``), as a user opting in
    would. None when torch or CUDA is missing."""
    if not torch_available():
        return None
    a, d, b, c = blocks.shape
    W = torch.from_dlpack(blocks.copy()).reshape(a * d, b, c)
    Wt = W.transpose(1, 2)
    tensor = _tensors()

    def run(X):
        x = tensor(X)
        with allow_tf32(tf32):
            if layout == "bsl":
                B = x.shape[1]
                xp = x.reshape(a, c, d, B).permute(0, 2, 1, 3).reshape(a * d, c, B)
                y = torch.bmm(W, xp)                                   # (a*d, b, B)
                return y.reshape(a, d, b, B).permute(0, 2, 1, 3).reshape(a * b * d, B)
            B = x.shape[0]
            xp = x.reshape(B, a, c, d).permute(1, 3, 0, 2).reshape(a * d, B, c)
            y = torch.bmm(xp, Wt)                                      # (a*d, B, b)
            return y.reshape(a, d, B, b).permute(2, 0, 3, 1).reshape(B, a * b * d)
    return run


def torch_bmm_values_grad(blocks, layout):
    """The weights' gradient of :func:`torch_bmm`'s product by PyTorch's autograd, as a
    function ``(X, G) -> dW`` of CuPy operands: the forward (permute, ``torch.bmm``,
    permute) is recorded once per operand and only the backward to the weights is run on
    each call (``torch.autograd.grad`` with the graph kept). None without torch or CUDA."""
    if not torch_available():
        return None
    a, d, b, c = blocks.shape
    W = torch.from_dlpack(blocks.copy()).reshape(a * d, b, c).requires_grad_(True)
    recorded = {}

    def forward(x):
        if layout == "bsl":
            B = x.shape[1]
            xp = x.reshape(a, c, d, B).permute(0, 2, 1, 3).reshape(a * d, c, B)
            y = torch.bmm(W, xp)
            return y.reshape(a, d, b, B).permute(0, 2, 1, 3).reshape(a * b * d, B)
        B = x.shape[0]
        xp = x.reshape(B, a, c, d).permute(1, 3, 0, 2).reshape(a * d, B, c)
        y = torch.bmm(xp, W.transpose(1, 2))
        return y.reshape(a, d, B, b).permute(2, 0, 3, 1).reshape(B, a * b * d)

    tensor = _tensors()

    def run(X, G):
        key = X.data.ptr        # the benchmark cycles through a few operands: one graph each
        if key not in recorded:
            recorded[key] = forward(tensor(X))
        (dW,) = torch.autograd.grad(recorded[key], W, tensor(G), retain_graph=True)
        return dW
    return run


def torch_dense_graph(D, X, layout):
    """``(replay, out)``: PyTorch's dense product of the CuPy operand ``X`` (``torch.mv``
    where it is one vector, else ``torch.mm``) captured in a ``torch.cuda.CUDAGraph`` after
    a warm-up on the capturing stream; ``replay()`` launches the graph on the legacy default
    stream, ``out`` is the result every replay writes. None without torch or CUDA."""
    if not torch_available():
        return None
    Dt, x = torch.from_dlpack(D), torch.from_dlpack(X)
    if layout == "bsl":
        product = (lambda: torch.mv(Dt, x[:, 0])) if x.shape[1] == 1 else (lambda: Dt @ x)
    else:
        product = (lambda: torch.mv(Dt, x[0])) if x.shape[0] == 1 else (lambda: x @ Dt.T)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        product()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = product()
    legacy = torch.cuda.default_stream()

    def replay():
        with torch.cuda.stream(legacy):
            graph.replay()
    return replay, out


def torch_dense(D, layout, tf32=False):
    """cuBLAS on the dense matrix ``D`` through PyTorch (for the TF32 baseline: CuPy's
    matmul does not switch TF32 at run time), as a function of a CuPy operand."""
    if not torch_available():
        return None
    Dt = torch.from_dlpack(D)
    tensor = _tensors()

    def run(X):
        x = tensor(X)
        with allow_tf32(tf32):
            return Dt @ x if layout == "bsl" else x @ Dt.T
    return run


class _Torch(Baselines):
    """:class:`kscupy.bench.baselines.Baselines` through PyTorch."""
    name = "torch"

    @property
    def version(self):
        return torch.__version__ if torch is not None else None

    def bmm(self, blocks, layout, tf32=False):
        return torch_bmm(blocks, layout, tf32)

    def dense(self, D, layout, tf32=False):
        return torch_dense(D, layout, tf32)

    def bmm_values_grad(self, blocks, layout):
        return torch_bmm_values_grad(blocks, layout)

    def dense_graph(self, D, X, layout):
        return torch_dense_graph(D, X, layout)

    def tensor(self, X):
        return torch.from_dlpack(X) if torch_available() else None

    def tf32_gemm_flops(self):
        """The rate of an 8192^3 GEMM with TF32 allowed (the TF32 rows' ceiling)."""
        if not torch_available():
            return None
        from kscupy.bench.timing import time_fn
        m = 8192
        T = torch.randn(m, m, device="cuda")
        with allow_tf32(True):
            return 2 * m**3 / time_fn(lambda x: T @ x, [T.clone()], max_repeat=20)

    def release(self):
        if torch_available():
            torch.cuda.empty_cache()


#: PyTorch's baselines where torch sees a GPU, else none.
TORCH = _Torch() if torch_available() else Baselines()
