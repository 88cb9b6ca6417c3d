"""Fit a KS chain to an operator known as a matrix, a KS operator, a LinearOperator or a
function: gradient-based refinement of the chain's values on probe batches.

The loss is the relative squared error on a batch of probes ``P`` (``N x batch``),
``||C P - T P||_F^2 / ||T P||_F^2``, its gradient with respect to every factor's values
from :func:`kscupy.vjp`. Two optimisers:

* ``"lbfgs"`` (default): SciPy's L-BFGS-B on one fixed probe batch (a deterministic loss,
  for a few hundred to a few thousand steps; the values travel to the host as one vector per
  step, small beside the products). Where the dense target is at hand the probes are the
  identity (``probes="auto"``), and the loss is the exact relative Frobenius error, which
  then only decreases from the start;
* ``"adam"``: Adam written here on fresh probes each step (a stochastic loss, for targets
  too large for one batch to pin down).

A start from :func:`kscupy.factorize` needs the dense target: given for a matrix, and taken
as ``T @ I`` for the other targets up to :data:`DENSE_PROBE_LIMIT` columns. Early stop: the
loss reaches ``tol``, or the held-out error has not improved for ``patience`` steps
(checked every ``check_every``).
"""
from __future__ import annotations

import dataclasses
import time

import numpy

from .core import argument_checks, arrays, foreign
from .core.argument_checks import flag, positive_int
from .core.pattern import KSPattern
from .core.shuffle import check_permutation, inverse_permutation
from .gradients import by_factor, vjp
from .operators.base import KSOperator
from .operators.chain import KSChain
from .operators.matrix import KSMatrix

__all__ = ["fit", "FitResult"]

#: The early stop counts a held-out error as better when it is below the best so far by at
#: least this fraction.
IMPROVEMENT = 1e-3
#: Targets other than matrices are made dense (``T @ I``) for a start from factorize when
#: they have at most this many columns.
DENSE_PROBE_LIMIT = 4096
#: L-BFGS-B may evaluate the loss this many times per step (its line searches) before the
#: evaluations, not the steps, stop it (reported as ``"steps"``).
LINE_SEARCH_EVALUATIONS = 20


@dataclasses.dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    chain : KSChain, the fitted chain (its own values; the target is not referenced).
    history : list of float, the training loss (relative squared error on the probes): with
        L-BFGS after each step, with Adam of each step's batch at the values it started
        from.
    heldout_relerr : float, ``||C Q - T Q||_F / ||T Q||_F`` on held-out probes ``Q`` drawn
        apart from the training probes.
    start_relerr : float, the same of the starting chain (of ``factorize``'s when it started
        there).
    start : str, ``"factorize"``, ``"random"`` or ``"given"``.
    steps : int, optimiser steps taken.
    stopped : str, ``"tol"`` (the loss reached ``tol``), ``"patience"`` (the held-out error
        stopped improving), ``"converged"`` (L-BFGS's relative decrease vanished),
        ``"stalled"`` (L-BFGS's line search found no descent) or ``"steps"`` (the steps, or
        for L-BFGS ``LINE_SEARCH_EVALUATIONS`` evaluations a step, ran out).
    seconds : float, wall time of the whole fit, start included.
    """
    chain: KSChain
    history: list
    heldout_relerr: float
    start_relerr: float
    start: str
    steps: int
    stopped: str
    seconds: float


class _Target:
    """The target as ``apply(P) = T @ P`` with its shape, dtype and array module, and its
    dense matrix where one is cheap (``dense()``, else None)."""

    def __init__(self, target, shape, xp):
        self.dense_matrix = None
        if foreign.is_foreign(target):          # a PyTorch, JAX, ... matrix: through DLPack
            target = foreign.native(target, "target")
        if isinstance(target, KSOperator):
            self.apply, self.shape, self.dtype, self.xp = target.matmul, target.shape, \
                numpy.dtype(target.dtype), target.xp
        elif hasattr(target, "ndim") and hasattr(target, "dtype") and not callable(target):
            module = arrays.plain_array_module(target, "target")
            if target.ndim != 2:
                raise ValueError(f"a dense target must be 2-D, got shape {target.shape}")
            arrays.check_operand_dtype(target.dtype, "target")
            self.dense_matrix = target
            self.apply, self.shape, self.dtype, self.xp = target.__matmul__, target.shape, \
                numpy.dtype(target.dtype), module
        elif hasattr(target, "matmat") and hasattr(target, "shape"):   # a LinearOperator
            self.apply, self.shape, self.dtype = target.matmat, tuple(target.shape), \
                numpy.dtype(target.dtype)
            self.xp = xp or _module_of_linear_operator(target)
        elif callable(target):
            if shape is None:
                raise TypeError("a function target needs shape=(M, N): fit cannot tell how "
                                "many columns its probes need")
            if not hasattr(shape, "__len__") or len(shape) != 2:
                raise ValueError(f"shape must be (M, N), got {shape!r}")
            self.shape = tuple(positive_int(name, n) for name, n in zip(("M", "N"), shape))
            self.xp = xp or numpy
            self.apply = target
            self.dtype = None       # read from its first result
            shape = None
        else:
            raise TypeError(f"target must be a 2-D array, a KS operator, a LinearOperator or "
                            f"a function X -> T @ X; got a {type(target).__name__}")
        if shape is not None and tuple(shape) != tuple(self.shape):
            raise ValueError(f"shape={tuple(shape)!r} but the target has shape "
                             f"{tuple(self.shape)} (shape is for function targets)")
        if xp is not None and xp is not self.xp:
            raise TypeError(f"xp={xp.__name__} but the target's arrays are "
                            f"{self.xp.__name__}'s")

    def __call__(self, P):
        Y = self.apply(P)
        M = self.shape[0]
        if getattr(Y, "shape", None) != (M, P.shape[1]):
            raise ValueError(f"the target maps probes of shape {P.shape} to "
                             f"{getattr(Y, 'shape', type(Y).__name__)}, expected "
                             f"{(M, P.shape[1])}")
        if arrays.plain_array_module(Y, "the target's result") is not self.xp:
            raise TypeError(f"the target returned a {arrays.array_module(Y).__name__} array "
                            f"for {self.xp.__name__} probes")
        arrays.check_operand_dtype(Y.dtype, "the target's result")
        if self.dtype is None:
            self.dtype = numpy.dtype(Y.dtype)
        return Y

    def dense(self):
        if self.dense_matrix is None and self.shape[1] <= DENSE_PROBE_LIMIT:
            dtype = self.dtype or numpy.float64
            self.dense_matrix = self(self.xp.eye(self.shape[1], dtype=dtype))
        return self.dense_matrix


def _module_of_linear_operator(target):
    """CuPy for a cupyx LinearOperator (or a subclass of one, as kscupy.aslinearoperator
    makes), else NumPy."""
    if any(cls.__module__.startswith("cupyx") for cls in type(target).__mro__):
        return arrays.gpu_module()[0]
    return numpy


def fit(target, patterns, *, start="auto", shape=None, dtype=None, xp=None,
        optimizer="lbfgs", probes="auto", steps=1000, batch=None, lr=1e-2, tol=1e-14, patience=100,
        check_every=10, heldout=64, seed=None, progress=False,
        input_permutation=None, output_permutation=None) -> FitResult:
    """Fit the values of a KS chain of ``patterns`` to ``target``.

    Parameters
    ----------
    target : the operator ``T`` (``M x N``) to approximate: a NumPy or CuPy 2-D array, a
        kscupy operator, a SciPy or cupyx ``LinearOperator`` (its ``matmat``), or a function
        ``P -> T @ P`` on ``(N, B)`` arrays (then give ``shape``).
    patterns : the chain's patterns, left to right (as for :func:`kscupy.factorize`; the
        string ``"butterfly"`` too), with ``output_permutation``/``input_permutation`` the
        chain's fixed permutations, if any.
    start : ``"auto"`` (``"factorize"`` where the dense target is at hand, see the module
        docstring, else ``"random"``: random values scaled to the target's gain),
        ``"factorize"``, ``"random"`` or a KSChain to start from (copied; its patterns and
        permutations are the fit's: give ``patterns=None`` or its patterns).
    shape : ``(M, N)``, for a function target.
    dtype : the chain's dtype; default the target's (float64 for a function, read from its
        first result).
    xp : numpy or cupy: the array module of the probes (default the target's).
    optimizer : ``"lbfgs"`` or ``"adam"``.
    probes : ``"auto"``, ``"gaussian"`` or ``"identity"``: L-BFGS's fixed probes (Adam
        draws Gaussian ones each step). ``"auto"``: the identity where the dense target is at
        hand (the loss is then the relative Frobenius error), else ``batch`` Gaussian ones.
    steps : the most optimiser steps (L-BFGS iterations or Adam updates).
    batch : probes per step; default ``min(N, 1024)`` for L-BFGS, 64 for Adam.
    lr : Adam's step size (relative to the values' scale).
    tol : stop when the training loss falls below it.
    patience : stop when the held-out error has not improved (by :data:`IMPROVEMENT` of
        itself) for this many steps.
    check_every : steps between held-out checks.
    heldout : held-out probes for ``heldout_relerr`` and the early stop.
    seed : seed of the probes and of a random start.
    progress : show a tqdm progress bar (needs tqdm).

    Returns
    -------
    :class:`FitResult`.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> planted = ks.butterfly(64, dtype=np.float64, seed=0)
    >>> result = ks.fit(lambda P: planted @ P, "butterfly", shape=(64, 64), seed=1)
    >>> result.start, result.heldout_relerr < 1e-10
    ('factorize', True)
    """
    t0 = time.perf_counter()
    if optimizer not in ("lbfgs", "adam"):
        raise ValueError(f'optimizer must be "lbfgs" or "adam", got {optimizer!r}')
    if probes not in ("auto", "gaussian", "identity"):
        raise ValueError(f'probes must be "auto", "gaussian" or "identity", got {probes!r}')
    steps, patience, check_every, heldout = (
        positive_int(name, value) for name, value in (
            ("steps", steps), ("patience", patience), ("check_every", check_every),
            ("heldout", heldout)))
    batch = None if batch is None else positive_int("batch", batch)
    seed = argument_checks.seed(seed)
    progress = flag("progress", progress)
    lr = argument_checks.real_number("lr", lr)
    tol = argument_checks.real_number("tol", tol, positive=False)
    if xp is not None:
        arrays.check_module(xp)
    T = _Target(target, shape, xp)
    xp = T.xp
    rng = numpy.random.default_rng(seed)
    M, N = T.shape
    if T.dtype is None:                     # a function: one probe tells its dtype
        T(xp.asarray(rng.standard_normal((N, 1))))
    dtype = arrays.check_dtype(numpy.dtype(dtype) if dtype is not None else
                               arrays.result_dtype(T.dtype, numpy.float32))
    if arrays.is_half(dtype):
        raise TypeError(f"fit computes in float32, float64, complex64 or complex128 ({dtype} "
                        f"gradients are too coarse for the line searches); fit in float32 and "
                        f"convert the chain's factors with astype")
    if T.dtype.kind == "c" and dtype.kind != "c":
        raise TypeError(f"the target is complex ({T.dtype}) but dtype={dtype} is real: a "
                        f"real chain would fit its real part only; give a complex dtype")
    if probes == "identity" and T.dense() is None:
        raise ValueError(f"probes='identity' applies the target to all {N} columns of the "
                         f"identity, more than DENSE_PROBE_LIMIT = {DENSE_PROBE_LIMIT}: use "
                         f"probes='gaussian'")
    chain, start_kind = _start(T, patterns, start, dtype, rng, input_permutation,
                               output_permutation)
    factors = [f for f in chain.factors if f.structure is None]
    if not factors:
        raise ValueError("every factor of the chain is declared structured: nothing to fit")

    def draw(columns):
        P = rng.standard_normal((N, columns))
        if dtype.kind == "c":
            P = P + 1j * rng.standard_normal((N, columns))
        return xp.asarray(P.astype(dtype))

    Q = draw(heldout)
    TQ = T(Q)
    if TQ.dtype.kind == "c" and dtype.kind != "c":
        raise TypeError(f"the target returns complex values ({TQ.dtype}) but the fit is in "
                        f"{dtype}: a real chain would fit their real part only; give a "
                        f"complex dtype")
    TQ = TQ.astype(dtype, copy=False)
    size = float(_norm(TQ, xp))
    if not numpy.isfinite(size) or size == 0:
        raise ValueError("the target gives " + ("zero" if size == 0 else "non-finite values")
                         + " on random probes: nothing to fit")
    if start_kind == "random":              # the chain's gain made the target's
        gain = (size / float(_norm(by_factor(chain, Q), xp))) ** (1 / len(factors))
        for f in factors:
            f.values = f.values * gain

    def heldout_relerr():
        return float(_norm(by_factor(chain, Q) - TQ, xp)) / size

    start_relerr = heldout_relerr()
    run = _lbfgs if optimizer == "lbfgs" else _adam
    bar = _progress_bar(progress, steps)
    history, stopped = run(chain, factors, T, draw, dict(
        steps=steps, batch=batch, lr=lr, tol=tol, patience=patience, probes=probes,
        check_every=check_every, heldout_relerr=heldout_relerr, bar=bar, N=N, xp=xp))
    if bar is not None:
        bar.close()
    return FitResult(chain=chain, history=history, heldout_relerr=heldout_relerr(),
                     start_relerr=start_relerr, start=start_kind, steps=len(history),
                     stopped=stopped, seconds=time.perf_counter() - t0)


def _norm(A, xp):
    """The Frobenius norm of ``A``, with ``A`` divided by ``max |A|`` before squaring."""
    unit = xp.max(xp.abs(A)) if A.size else 0
    if not unit or not bool(xp.isfinite(unit)):
        return xp.asarray(unit) * 1.0
    return unit * xp.sqrt(xp.sum(xp.abs(A / unit) ** 2))


def _progress_bar(progress, steps):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        raise ImportError("progress=True draws a tqdm progress bar: pip install tqdm") from None
    return tqdm(total=steps, desc="fit")


def _start(T, patterns, start, dtype, rng, input_permutation, output_permutation):
    """The starting chain (its own storage) and how it was made."""
    from .transforms.factorization import factorize, _butterfly_patterns
    xp = T.xp
    if isinstance(start, KSChain):
        if input_permutation is not None or output_permutation is not None:
            raise ValueError("a start chain carries its own permutations: give them to "
                             "KSChain, not to fit")
        if start.xp is not xp:
            raise TypeError(f"the start chain holds {start.xp.__name__} values but the "
                            f"target's are {xp.__name__}'s")
        if start.dtype.kind == "c" and dtype.kind != "c":
            raise TypeError(f"the start chain is complex ({start.dtype}) but the fit is in "
                            f"{dtype}: give dtype={start.dtype}")
        wanted = patterns if not isinstance(patterns, str) else None
        if patterns is not None and (wanted is None or [tuple(KSPattern.of(p)) for p in wanted]
                                     != [tuple(p) for p in start.patterns]):
            raise ValueError(f"the start chain's patterns {[tuple(p) for p in start.patterns]} "
                             f"are not patterns={patterns!r} (give patterns=None with a "
                             f"start chain)")
        if start.shape != tuple(T.shape):
            raise ValueError(f"the start chain has shape {start.shape}, the target "
                             f"{tuple(T.shape)}")
        made = [KSMatrix(f.values.astype(dtype), structure=f.structure) for f in start.factors]
        return KSChain(made, input_permutation=start.input_permutation,
                       output_permutation=start.output_permutation), "given"
    if patterns is None:
        raise TypeError("patterns must be a sequence of patterns (or \"butterfly\"); None is "
                        "for a start chain, which has its own")
    if start not in ("auto", "factorize", "random"):
        raise ValueError(f'start must be "auto", "factorize", "random" or a KSChain, got '
                         f'{start!r}')
    if isinstance(patterns, str):
        if patterns != "butterfly":
            raise ValueError(f'patterns must be a sequence of patterns or "butterfly", got '
                             f'{patterns!r}')
        patterns = _butterfly_patterns(numpy.empty(T.shape))
    patterns = KSPattern.list_of(patterns)
    chain_shape = (patterns[0].shape[0], patterns[-1].shape[1])
    if chain_shape != tuple(T.shape):
        raise ValueError(f"the patterns {[tuple(p) for p in patterns]} give a chain of shape "
                         f"{chain_shape}, but the target has shape {tuple(T.shape)}")
    for perm, n, which in ((input_permutation, T.shape[1], "input"),
                           (output_permutation, T.shape[0], "output")):
        if perm is not None:
            check_permutation(perm, n, f"the {which} permutation")
    perms = dict(input_permutation=input_permutation, output_permutation=output_permutation)
    dense = T.dense() if start in ("auto", "factorize") else None
    if start == "factorize" and dense is None:
        raise ValueError(f"start='factorize' needs the dense target, and this one has "
                         f"{T.shape[1]} columns (more than DENSE_PROBE_LIMIT = "
                         f"{DENSE_PROBE_LIMIT}): use start='random'")
    if dense is not None:
        # the chain P_out C P_in approximates T: factorize P_out^T T P_in^T
        D = dense.astype(dtype, copy=False)
        if output_permutation is not None:
            D = D[inverse_permutation(output_permutation)]
        if input_permutation is not None:
            D = D[:, input_permutation]
        try:
            C = factorize(D, patterns)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"fit's start from the dense target (start={start!r}, "
                            f"factorize of the target and the patterns): {exc}") from None
        return KSChain(_balanced(C.factors), **perms), "factorize"
    made = [KSMatrix.random(tuple(p), dtype=dtype, xp=xp, seed=int(rng.integers(2**31)))
            for p in patterns]                    # fit() scales them to the target's gain
    return KSChain(made, **perms), "random"


def _balanced(factors):
    """The factors with their norms made equal, their product unchanged: ``factorize`` puts
    the target's whole scale into one factor, which the line searches take badly."""
    free = [f for f in factors if f.structure is None]
    norms = [float(_norm(f.values, f.xp)) for f in free]
    if not norms or not all(numpy.isfinite(norms)) or min(norms) == 0:
        return list(factors)
    mean = float(numpy.exp(numpy.mean(numpy.log(norms))))     # the norms' geometric mean
    scaled = {id(f): KSMatrix(f.values * (mean / n)) for f, n in zip(free, norms)}
    return [scaled.get(id(f), f) for f in factors]


def _loss_and_gradients(chain, factors, P, TP):
    """The relative squared error ``||C P - T P||^2 / ||T P||^2`` and its gradient with
    respect to each fitted factor's values, with both sides divided by ``max |T P|`` first
    (squares of tiny or huge values would underflow or overflow)."""
    xp = chain.xp
    unit = float(xp.max(xp.abs(TP)))
    R = (by_factor(chain, P) - TP) / unit      # by_factor: a plan would change every step
    scale = float(xp.sum(xp.abs(TP / unit) ** 2))
    loss = float(xp.sum(xp.abs(R) ** 2)) / scale
    _, dws = vjp(chain, P, (2 / (scale * unit)) * R, wrt="values")
    of_factor = dict(zip(map(id, chain.factors), dws))
    return loss, [of_factor[id(f)] for f in factors]


def _real_view(w):
    """The values as real numbers: ``(..., 2)`` of real and imaginary parts where complex."""
    return w if w.dtype.kind != "c" else w.view(arrays.real_dtype(w.dtype))


def _lbfgs(chain, factors, T, draw, o):
    import scipy.optimize
    xp = o["xp"]
    identity = o["probes"] == "identity" or (o["probes"] == "auto" and T.dense() is not None)
    if identity:
        P = xp.eye(o["N"], dtype=chain.dtype)
        TP = T.dense().astype(chain.dtype, copy=False)
    else:
        P = draw(o["batch"] or min(o["N"], 1024))
        TP = T(P).astype(chain.dtype, copy=False)
    shapes = [f.values.shape for f in factors]
    sizes = [_real_view(xp.ascontiguousarray(f.values)).size for f in factors]
    dtype = chain.dtype

    def unpack(vector):
        out, at = [], 0
        for shape, size in zip(shapes, sizes):
            part = xp.asarray(vector[at:at + size].astype(arrays.real_dtype(dtype)))
            out.append(part.view(dtype).reshape(shape) if dtype.kind == "c"
                       else part.reshape(shape))
            at += size
        return out

    def pack(arrays_):
        parts = [_real_view(xp.ascontiguousarray(a)).ravel() for a in arrays_]
        flat = xp.concatenate(parts)
        return numpy.asarray(flat.get() if hasattr(flat, "get") else flat, dtype=numpy.float64)

    def objective(vector):
        for f, w in zip(factors, unpack(vector)):
            f.values = w
        # a line search's trial step may overflow (a target of 1e-180 has factors near
        # 1e-45, and a first step near 1): its infinite loss sends the search back, which
        # NumPy need not warn of
        with numpy.errstate(over="ignore", invalid="ignore"):
            loss, grads = _loss_and_gradients(chain, factors, P, TP)
        return loss, pack(grads)

    history, state = [], {"best": numpy.inf, "since": 0, "stopped": "steps"}

    def callback(intermediate_result):
        history.append(float(intermediate_result.fun))
        if o["bar"] is not None:
            o["bar"].update(1)
            o["bar"].set_postfix(loss=f"{history[-1]:.3g}")
        if history[-1] <= o["tol"]:
            state["stopped"] = "tol"
            raise StopIteration
        if _patience_runs_out(history, state, o):
            raise StopIteration

    result = scipy.optimize.minimize(
        objective, pack([f.values for f in factors]), jac=True, method="L-BFGS-B",
        callback=callback, options=dict(maxiter=o["steps"], maxfun=LINE_SEARCH_EVALUATIONS
                                        * o["steps"], ftol=0.0, gtol=0.0, maxcor=20))
    for f, w in zip(factors, unpack(result.x)):
        f.values = w
    if state["stopped"] == "steps" and len(history) < o["steps"] and result.status != 1:
        # L-BFGS-B stopped on its own (status 1 is the evaluations' budget: "steps"): no
        # relative decrease left (converged), or a line search that found no descent
        # (stalled: at a minimum to rounding, or badly scaled)
        state["stopped"] = "converged" if result.status == 0 and history else "stalled"
    return history, state["stopped"]


def _patience_runs_out(history, state, o):
    """Every ``check_every`` steps: True (and ``state["stopped"] = "patience"``) once the
    held-out error has not improved for ``patience`` steps."""
    if len(history) % o["check_every"]:
        return False
    err = o["heldout_relerr"]()
    if err < state["best"] * (1 - IMPROVEMENT):
        state["best"], state["since"] = err, 0
    else:
        state["since"] += o["check_every"]
    if state["since"] >= o["patience"]:
        state["stopped"] = "patience"
        return True
    return False


def _adam(chain, factors, T, draw, o, beta1=0.9, beta2=0.999, eps=1e-12):
    xp = chain.xp
    batch = o["batch"] or 64
    m = [xp.zeros_like(f.values) for f in factors]
    v = [xp.zeros(f.values.shape, dtype=arrays.real_dtype(chain.dtype)) for f in factors]
    scale = [float(xp.sqrt(xp.mean(xp.abs(f.values) ** 2))) or 1.0 for f in factors]
    history, state = [], {"best": numpy.inf, "since": 0, "stopped": "steps"}
    for step in range(1, o["steps"] + 1):
        P = draw(batch)
        loss, grads = _loss_and_gradients(chain, factors, P, T(P).astype(chain.dtype,
                                                                         copy=False))
        history.append(loss)
        if loss <= o["tol"]:                     # these values met tol: keep them
            return history, "tol"
        for idx, (f, g) in enumerate(zip(factors, grads)):
            m[idx] = beta1 * m[idx] + (1 - beta1) * g
            v[idx] = beta2 * v[idx] + (1 - beta2) * xp.abs(g) ** 2
            m_hat = m[idx] / (1 - beta1 ** step)
            v_hat = v[idx] / (1 - beta2 ** step)
            f.values = f.values - (o["lr"] * scale[idx]) * m_hat / (xp.sqrt(v_hat) + eps)
        if o["bar"] is not None:
            o["bar"].update(1)
            o["bar"].set_postfix(loss=f"{loss:.3g}")
        if _patience_runs_out(history, state, o):
            return history, "patience"
    return history, "steps"
