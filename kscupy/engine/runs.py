"""Prepared runs: what an operator keeps on the GPU so that a repeated product is one
dictionary lookup and one launch.

An operator's :class:`PreparedRuns` maps what decides a product (the operand's shape,
strides, dtype and 16-byte alignment, the layout, the backend and the device) to the run
prepared for the first such product, and a chain's to its plans. Each run is stamped with
:meth:`PreparedRuns.stamp`: the decisions it was built under
(:data:`kscupy.engine.decide.epoch`), the kernels compiled so far
(:data:`kscupy.kernels.nvrtc.compiles_finished`, so that a run of the direct kernel gives way
to the compiled one) and the values of the target's factors (their storages' write counts).
A run whose stamp is not the current one is prepared anew in its place, except while the
current stream captures a CUDA graph, where nothing can be prepared: a run that is stale
only by the decisions or the kernels compiled since still computes the product of the same
values, and is run (a background compile finishing between a user's first product and the
capture would otherwise refuse the captured one).
"""
from __future__ import annotations

from ..core import captured
from ..core.factor import Factor
from ..kernels import nvrtc
from ..kernels.launcher import KernelRun
from . import decide

__all__ = ["PreparedRuns", "runs_of", "for_vectors", "MAX_PREPARED_RUNS"]

#: Prepared runs an operator keeps (one per operand shape, strides, dtype and alignment, per
#: layout and backend); beyond this many they are all dropped and rebuilt as used.
MAX_PREPARED_RUNS = 64


class PreparedRuns:
    """The prepared runs (and, for a chain, the plans) of one GPU operator's target (a
    Factor or a FactorChain); ``current_device()`` gives the current CUDA device's id
    (default: CuPy's), ``capturing()`` whether the current stream captures a CUDA graph
    (default: CuPy's current stream)."""
    __slots__ = ("_factors", "_runs", "_replaced", "_current_device", "_capturing", "plans")

    def __init__(self, target, current_device=None, capturing=None):
        if current_device is None:
            import cupy
            current_device = cupy.cuda.runtime.getDevice
        if capturing is None:
            capturing = captured.capturing
        #: the id of the current CUDA device (a run is prepared for the device it ran on)
        self._current_device = current_device
        #: whether the current stream is capturing a CUDA graph
        self._capturing = capturing
        # the factors themselves, not their caches: a write replaces a factor's cache
        self._factors = (target,) if isinstance(target, Factor) else target.factors
        self._runs = {}
        #: runs a newer one replaced under their key: a CUDA graph captured with one may
        #: still read what it alone holds (tables, copies it keeps); kept while the
        #: operator lives (a key is replaced when a kernel finishes compiling or a decision
        #: changes: at most once per kernel the process compiles and per decision)
        self._replaced = []
        #: the chain's plans (:func:`kscupy.engine.planner.cached_plan`)
        self.plans = {}

    def __len__(self) -> int:
        return len(self._runs)

    def items(self):
        """``(key, (stamp, run))`` of the runs kept."""
        return self._runs.items()

    def _key(self, X, layout, backend):
        return _described(X.shape, X.strides, X.dtype, X.data.ptr, layout, backend,
                          self._current_device())

    def _current(self, key):
        """The run kept under ``key`` where its stamp is the current one (while a CUDA graph
        is captured: where its factors' values are, see the module), else None."""
        found = self._runs.get(key)
        if found is None:
            return None
        stamp, run = found
        current = self.stamp()
        if stamp == current:
            return run
        # stamp[2:]: the factors' write counts
        return run if stamp[2:] == current[2:] and self._capturing() else None

    def kernel_run(self, shape, strides, dtype, address, layout, backend, device):
        """The run kept for CuPy operands of ``shape``, ``strides`` (bytes), ``dtype`` and
        ``address`` on ``device`` in ``layout`` with ``backend``, where it is current and a
        :class:`~kscupy.kernels.launcher.KernelRun` of that dtype (which reads the operand's
        address only and writes a new C-order result), else None: what a PyTorch tensor's
        product reuses with no CuPy array made on either side
        (:func:`kscupy.core.foreign.tensor_product`)."""
        run = self._current(_described(shape, strides, dtype, address, layout, backend,
                                       device))
        return run if isinstance(run, KernelRun) and run.dtype == dtype else None

    def stamp(self) -> tuple:
        """What a run prepared from now on is valid for: the decisions' epoch, the kernels
        compiled so far and the generation of each factor's cache (see the module). Every
        repeated product asks for it, so a single factor's is built without a loop."""
        factors = self._factors
        if len(factors) == 1:
            return decide.epoch, nvrtc.compiles_finished, factors[0].cache.generation
        return (decide.epoch, nvrtc.compiles_finished, *[f.cache.generation for f in factors])

    def get(self, X, layout: str, backend: str):
        """The run kept for CuPy operands like ``X`` in ``layout`` with ``backend``, or None
        where none is kept or the one kept is stale."""
        return self._current(self._key(X, layout, backend))

    def keep(self, X, layout: str, backend: str, run, valid_for: tuple):
        """Keep ``run``, prepared for operands like ``X`` after :meth:`stamp` gave
        ``valid_for``, in place of a stale one; returns it. (The stamp is taken before the
        run is prepared: values written or kernels compiled while it was prepared make it
        stale, never a run of the old values current. Its decisions are read after: a
        close call that the preparation settled against the model expires what was built
        before the verdict (:func:`~kscupy.engine.decide.settle`), not the run that holds
        the verdict, which the next product, perhaps one captured in a CUDA graph, reuses.)"""
        valid_for = (decide.epoch,) + tuple(valid_for[1:])
        key = self._key(X, layout, backend)
        if key not in self._runs and len(self._runs) >= MAX_PREPARED_RUNS:
            self._runs.clear()
        replaced = self._runs.get(key)
        if replaced is not None:
            self._replaced.append(replaced[1])
        self._runs[key] = (valid_for, run)
        return run


def _described(shape, strides, dtype, address, layout, backend, device) -> tuple:
    """The key of the runs kept for operands so described: their shape, strides (bytes),
    dtype and 16-byte alignment, the layout, the backend and the device."""
    return (shape, strides, dtype, address & 15, layout, backend, device)


def runs_of(factor: Factor) -> PreparedRuns:
    """The prepared runs of a factor's view, kept in the cache its views share: a write of
    the values (which clears that cache) drops them, with the converted copies and dense
    matrices they hold."""
    key = ("prepared runs", factor.transposed, factor.conjugated)
    runs = factor.cache.get(key)
    if runs is None:
        runs = factor.cache[key] = PreparedRuns(factor)
    return runs


def for_vectors(run, M: int):
    """``run`` (prepared for the ``(N, 1)`` view of a vector) for the vectors themselves,
    returning ``(M,)``: a kernel's run reads only X's address, so it serves the vector as it
    is and allocates Y as a vector (a CuPy reshape costs host time); another run
    is wrapped in the reshapes."""
    if isinstance(run, KernelRun):
        return run.with_result_shape((M,))
    return lambda X: run(X.reshape(-1, 1)).reshape(M)
