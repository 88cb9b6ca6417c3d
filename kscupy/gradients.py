"""Gradients of KS products with respect to the factors' values and the operand, without a
deep-learning framework.

For ``Y = op @ X`` (``layout="bsl"``; ``Y = X @ op.T`` for ``"bsf"``) and the gradient
``G = dL/dY`` of a real loss ``L``, :func:`vjp` returns ``dL/dX = op^H G`` (``G @ conj(op)``
in bsf) and ``dL/dw`` for the values ``w = op.values``: per group the batch sum ``G_g X_g^H``
restricted to the support,

    dw[i, k, l, j] = sum_n G[i*b*d + k*d + j, n] * conj(X[i*c*d + l*d + j, n])      (bsl)

with ``(a, b, c, d) = op.pattern``. Complex values follow PyTorch's convention (the gradient
is ``dL/d(conj w)`` times two, the direction of steepest ascent); JAX's ``grad`` returns its
conjugate. Real values with complex operands get the real part (the gradient with respect
to real parameters). For a chain ``P_out K_1 ... K_L P_in`` the backward pass runs through
the factors right to left with the intermediates of the forward pass (kept, or recomputed
where they would not fit).

On CuPy the reduction over the batch runs on the tensor cores, output-stationary on the
values, on ``G`` and ``X`` where they lie, or on cuBLAS's batched GEMMs: for long batches
the way a shape's first gradient timed fastest, else a default
(:mod:`kscupy.engine.gradient_paths`); on NumPy
a transpose of each, then one batched product (:func:`kscupy.core.reference.blocks_gradient`).
The 16-bit dtypes are reduced in float32 and rounded once.
"""
from __future__ import annotations

import contextlib

import numpy

from .core import arrays, captured, foreign, memory, reference
from .core.argument_checks import check_layout
from .core.shuffle import inverse_permutation
from .engine import gradient_paths
from .operators.base import KSOperator
from .operators.chain import KSChain
from .operators.matrix import KSMatrix

__all__ = ["values_grad", "vjp", "by_factor"]

#: Intermediates of a chain's forward pass are kept while they take at most this fraction
#: of the memory available; beyond it each is recomputed from X when the backward pass
#: needs it (a product per factor and step: quadratic in the chain's length).
KEEP_FRACTION = 0.5


def values_grad(op, X, G, *, layout="bsl"):
    """The gradient of a real loss with respect to ``op.values``.

    Parameters
    ----------
    op : KSMatrix or KSChain (NumPy or CuPy values).
    X : the operand of the product, ``(N, B)`` or ``(N,)`` for ``layout="bsl"``, ``(B, N)``
        (or ``(N,)``) for ``"bsf"``, in ``op``'s array module (or another library's array
        of that memory, through DLPack: ``dX`` then comes back as that library's).
    G : the loss's gradient with respect to the product, of the product's shape.
    layout : {"bsl", "bsf"}

    Returns
    -------
    For a KSMatrix an array of shape ``op.pattern`` ``(a, b, c, d)``; for a KSChain a list
    with one such array per factor, ``None`` for a factor whose values are declared
    structured (a DFT stage from :func:`kscupy.dft`: fixed, no free values; writing its
    values makes it an ordinary factor). dtype: ``numpy.result_type`` of the values, ``X``
    and ``G``, real where the values are real. See :func:`vjp` for both gradients at once.
    The array is not always in C order: where the sums are computed one group ``(i, j)``
    at a time (cuBLAS's way on the GPU, the CPU's), it is a view of them as they lie in
    memory, group by group, rather than a reordered copy (a pass saved; what reads it next,
    an update of the values say, reads it in place). ``xp.ascontiguousarray`` makes a
    C-order copy where one is needed (before handing it to a library that takes C order
    only).

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> K = ks.KSMatrix.random((2, 3, 4, 2), dtype=np.float64, seed=0)
    >>> X = np.random.default_rng(1).standard_normal((16, 5))
    >>> G = np.ones((12, 5))                   # dL/dY for L = sum(K @ X)
    >>> dw = ks.values_grad(K, X, G)
    >>> dw.shape, bool(np.isclose(dw[0, 0, 0, 0], X[0].sum()))
    ((2, 3, 4, 2), True)
    """
    return vjp(op, X, G, layout=layout, wrt="values")[1]


def vjp(op, X, G, *, layout="bsl", wrt="both", intermediates="auto"):
    """The vector-Jacobian product of ``op.matmul(X, layout=layout)``: the gradients of a
    real loss with respect to ``X`` and to the values, given ``G``, its gradient with respect
    to the product.

    Parameters
    ----------
    op, X, G, layout : as for :func:`values_grad`.
    wrt : {"both", "values", "input"}
        Which gradients to compute (the other entry of the pair is None).
    intermediates : {"auto", "keep", "recompute"}
        A chain's backward pass needs the input of every factor: ``"keep"`` holds them from
        one forward pass, ``"recompute"`` recomputes each from ``X`` (memory of two
        intermediates, a product per factor more per step), ``"auto"`` keeps them where they
        take at most :data:`KEEP_FRACTION` of the memory available.

    Returns
    -------
    ``(dX, dvalues)``: ``dX`` of ``X``'s shape (``op^H G`` in bsl), ``dvalues`` as
    :func:`values_grad` returns it.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> C = ks.butterfly(8, dtype=np.float64, seed=0)
    >>> X = np.random.default_rng(1).standard_normal((8, 3))
    >>> dX, dws = ks.vjp(C, X, 2 * (C @ X))    # L = ||C X||^2
    >>> dX.shape, [dw.shape for dw in dws]
    ((8, 3), [(1, 2, 2, 4), (2, 2, 2, 2), (4, 2, 2, 1)])
    """
    if not isinstance(op, (KSMatrix, KSChain)):
        kind = "it is an operator without free values of its own" \
            if isinstance(op, KSOperator) else "got a " + type(op).__name__
        raise TypeError(f"gradients are taken through a KSMatrix or a KSChain ({kind}); for "
                        f"the gradient with respect to X alone use op.H")
    if wrt not in ("both", "values", "input"):
        raise ValueError(f'wrt must be "both", "values" or "input", got {wrt!r}')
    if intermediates not in ("auto", "keep", "recompute"):
        raise ValueError(f'intermediates must be "auto", "keep" or "recompute", got '
                         f'{intermediates!r}')
    back, stream = None, contextlib.nullcontext()
    signature = _signature(op, X, G, layout)
    checked = _CHECKED.get(signature)
    if checked is not None:                # operands like these passed the checks before
        layout, vector, dtype = checked
        if vector:
            X, G = X.reshape(-1, 1), G.reshape(-1, 1)
    else:
        if foreign.is_foreign(X):          # a PyTorch, JAX, ... array: through DLPack
            taken = foreign.take(X, "X")   # (computed on its producer's stream, as products)
            X, back, stream = taken.native, taken.back, taken.stream
        if foreign.is_foreign(G):
            with stream:
                G = foreign.native(G, "G")
        X, G, layout, vector = _operands(op, X, G, layout)
        dtype = arrays.result_dtype(op.dtype, X.dtype, G.dtype)
        if signature is not None:
            if len(_CHECKED) >= MAX_CHECKED:
                _CHECKED.clear()
            _CHECKED[signature] = (layout, vector, dtype)
    # in a CUDA graph capture, the memory the gradients allocate is the graph's
    with stream, captured.memory(op.xp, torch_stream=back is not None):
        return _vjp(op, X, G, layout, wrt, intermediates, dtype, vector, back)


def _vjp(op, X, G, layout, wrt, intermediates, dtype, vector, back):
    """:func:`vjp` on checked operands: ``dtype`` the gradients', ``vector`` whether ``X``
    came as a vector (now a batch of one), ``back`` None or what hands ``dX`` back as the
    caller's array type."""
    real_input = X.dtype.kind != "c"
    X, G = X.astype(dtype, copy=False), G.astype(dtype, copy=False)
    if isinstance(op, KSMatrix):
        dX = op.H.matmul(G, layout=layout) if wrt != "values" else None
        dw = _values_gradient(op, X, G, layout) if wrt != "input" else None
    else:
        dX, dw = _chain_vjp(op, X, G, layout, wrt, intermediates)
    if real_input and dX is not None and dX.dtype.kind == "c":
        # the gradient with respect to real inputs is real (as for real values)
        dX = op.xp.ascontiguousarray(dX.real)
    if vector and dX is not None:
        dX = dX.reshape(-1)
    if back is not None and dX is not None:
        dX = back(dX)
    return dX, dw


#: Signatures of operands that passed :func:`vjp`'s checks (:func:`_signature`), with what
#: the checks decided ``(layout, vector, dtype)``: a gradient repeated with operands like
#: these (a training loop) skips them, which cost small gradients a large share of their
#: host time. At most MAX_CHECKED, all dropped when a new one would exceed it.
_CHECKED: dict = {}
MAX_CHECKED = 256


def _signature(op, X, G, layout):
    """What :func:`vjp`'s checks read of the operands: the operator's kind, shape and dtype,
    the operands' shapes and dtypes and the layout; None unless ``X`` and ``G`` are plain
    arrays of the operator's module (exactly ``numpy.ndarray`` or ``cupy.ndarray``: other
    types are checked every time)."""
    array = op.xp.ndarray
    if type(X) is not array or type(G) is not array or not isinstance(layout, str):
        return None
    return (type(op), op.shape, op.dtype, X.shape, X.dtype, G.shape, G.dtype, layout)


def _operands(op, X, G, layout):
    """``(X, G, layout, vector)``: ``X`` and ``G`` checked against ``op`` and each other,
    vectors as batches of one in bsl (whatever ``layout`` said, as for products)."""
    check_layout(layout)
    op._check_operand(X, layout, "auto")
    G_module = arrays.plain_array_module(G, "G")
    arrays.check_operand_dtype(G.dtype, "G")
    if G_module is not op.xp:
        raise TypeError(f"G must be a {op.xp.__name__} array like the operator's values, got "
                        f"a {arrays.array_module(G).__name__} array")
    M, N = op.shape
    vector = X.ndim == 1
    if vector:
        X, layout = X.reshape(N, 1), "bsl"
        if G.shape != (M,):
            raise ValueError(f"G must have the product's shape ({M},), got {G.shape}")
        return X, G.reshape(M, 1), "bsl", True
    B = X.shape[1] if layout == "bsl" else X.shape[0]
    expected = (M, B) if layout == "bsl" else (B, M)
    if G.shape != expected:
        raise ValueError(f"G must have the product's shape {expected} (layout {layout!r}, "
                         f"X of shape {X.shape}), got {G.shape}")
    return X, G, layout, False


def _values_gradient(K, X, G, layout):
    """``dL/dw`` of one KSMatrix in canonical order ``(a, b, c, d)``, in the dtype of ``X``
    (real where ``K``'s values are); not always in C order (see :func:`values_grad`)."""
    xp = K.xp
    pattern = tuple(K.pattern)
    dtype = X.dtype if K.dtype.kind == "c" else arrays.real_dtype(X.dtype)

    def finish(dW):
        # the real part where the values are real (a compact copy, not a view that would
        # keep the complex sums alive), or the sums rounded to dtype: one pass, in the
        # sums' memory order; else the sums as they are (perhaps a view of blocks)
        if dW.dtype.kind == "c" and dtype.kind != "c":
            return dW.real.astype(dtype, copy=True)
        return dW.astype(dtype, copy=False)
    with arrays.device_of(X):
        if xp is not numpy:
            dW = gradient_paths.values_gradient(G, X, pattern, layout, finish)
            if dW is not None:
                return dW
        if arrays.is_half(X.dtype):       # NumPy, or beyond what cuBLAS addresses
            X, G = X.astype(numpy.float32), G.astype(numpy.float32)   # reduced in float32
        return finish(reference.blocks_gradient(G, X, pattern, layout, xp).transpose(0, 2, 3, 1))


def _gather(Z, perm, layout):
    """``P Z``: the features of ``Z`` reordered by the gather index ``perm``."""
    return Z[perm] if layout == "bsl" else Z[:, perm]


def by_factor(C, X, layout="bsl"):
    """``C.matmul(X, layout=layout)`` for a KSChain ``C`` applied one factor at a time, each
    through its own product (``auto``), the permutations as gathers: the path :func:`vjp`
    differentiates. A loop that writes the values every step (:func:`kscupy.fit`)
    multiplies this way: a chain's own plan depends on its values, and would be made again
    after every write."""
    if not isinstance(C, KSChain):
        raise TypeError(f"by_factor applies a KSChain factor by factor, got "
                        f"{type(C).__name__}")
    check_layout(layout)
    C._check_operand(X, layout, "auto")
    if X.ndim != 2:
        raise ValueError(f"by_factor takes a 2-D batch, got shape {X.shape}")
    perm_in, perm_out = C.input_permutation, C.output_permutation
    Z = _gather(X, perm_in, layout) if perm_in is not None else X
    for f in reversed(C.factors):
        Z = f.matmul(Z, layout=layout)
    return _gather(Z, perm_out, layout) if perm_out is not None else Z


def _chain_vjp(C, X, G, layout, wrt, intermediates):
    factors = C.factors
    xp = C.xp
    perm_in, perm_out = C.input_permutation, C.output_permutation
    X0 = _gather(X, perm_in, layout) if perm_in is not None else X

    def forward(Z, start):
        """The input of factor ``start`` (factors apply right to left) from the chain's."""
        for f in reversed(factors[start + 1:]):
            Z = f.matmul(Z, layout=layout)
        return Z

    keep = intermediates == "keep"
    if intermediates == "auto":
        B = X.shape[1] if layout == "bsl" else X.shape[0]
        total = sum(f.shape[1] for f in factors[:-1]) * B * X.dtype.itemsize
        available = memory.available_bytes(xp)       # None: not known here
        keep = available is None or total <= KEEP_FRACTION * available
    inputs = {}
    if keep and wrt != "input":
        Z = X0
        inputs[len(factors) - 1] = Z
        for idx in range(len(factors) - 1, 0, -1):
            Z = factors[idx].matmul(Z, layout=layout)
            inputs[idx - 1] = Z
    Gc = _gather(G, inverse_permutation(perm_out), layout) if perm_out is not None else G
    dws = []
    for idx, f in enumerate(factors):
        if wrt != "input":
            if f.structure is not None:
                dws.append(None)
            else:
                Z = inputs.pop(idx) if keep else forward(X0, idx)
                dws.append(_values_gradient(f, Z, Gc, layout))
        if idx + 1 < len(factors) or wrt != "values":
            Gc = f.H.matmul(Gc, layout=layout)
    if wrt == "values":
        return None, dws
    dX = _gather(Gc, inverse_permutation(perm_in), layout) if perm_in is not None else Gc
    return dX, (dws if wrt != "input" else None)
