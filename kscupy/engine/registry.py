"""The backend registry: every way to apply one KS factor, declared once.

A :class:`Backend` says where it runs (``devices``), how it runs (``prepare(factor, X,
layout, config) -> run(X)``: what depends only on the operand's shape, strides and dtype is
done once, so a repeated product is one call), what it costs (``seconds`` on the GPU and
``cpu_seconds`` with NumPy, :mod:`kscupy.engine.costs`; None where there is no model) and
whether ``backend="auto"`` may pick it (on the GPU ``in_auto``, by ``auto`` or, for the
backends of ``precision="tf32"``, by the opt-in ``auto_tf32``; on the CPU every backend
with a ``cpu_seconds``). The single-factor path (:mod:`kscupy.engine.single`), ``auto``'s
choice (:mod:`kscupy.engine.decide`), the tuner and the chain planner all read this
table, so they cannot disagree.

``prepare`` receives a :class:`~kscupy.core.factor.Factor` already in ``X.dtype``, a 2-D
operand with ``B >= 1`` (``(N, B)`` in ``"bsl"``, ``(B, N)`` in ``"bsf"``) and the
backend's configuration (a kernel tile configuration, or None). Every backend returns X's
dtype; for float16 every one sums in float32 and rounds once. Kernel backends also say how
to configure them: ``heuristic(problem)`` gives a tile configuration from the problem's
shape, ``candidates(problem)`` the ones the autotuner times, and ``config_type`` rebuilds a
configuration from the tuning cache.

To add a backend: write its ``prepare`` (and ``seconds`` / ``cpu_seconds`` if ``auto`` or
the planner should weigh it) and add one :class:`Backend` to :data:`REGISTRY`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy

from ..core import arrays, reference
from ..core.arrays import runs_at
from ..core.device import TENSOR_CORE_CC
from ..core.factor import DENSE_CACHE_BYTES, block_dense_bytes
from ..kernels import gemm, ks_direct, ks_matmul, ks_mma, ks_skinny
from .costs import cpu as cpu_costs, gpu as gpu_costs

__all__ = ["Backend", "Choice", "REGISTRY", "names", "get", "AUTO", "AUTO_TF32", "AUTOS"]

#: The backend name that asks for the best choice (a decision, not a registry entry).
AUTO = "auto"
#: Opt-in: the best choice among the backends of one TF32 product per term (about 1e-3
#: relative error; float32 and complex64, on the GPU).
AUTO_TF32 = "auto_tf32"
#: Each automatic choice and the precision of the backends it chooses among.
AUTOS = {AUTO: "default", AUTO_TF32: "tf32"}


@dataclasses.dataclass(frozen=True)
class Backend:
    """One way to apply one factor."""
    name: str
    devices: frozenset                      # subset of {"cpu", "gpu"}
    prepare: Callable                       # (factor, X, layout, config) -> run(X)
    seconds: Optional[Callable] = None      # (problem, device) -> modelled seconds (GPU)
    in_auto: bool = False                   # a candidate of auto on the GPU
    fits: Callable = lambda problem, device: True   # whether it runs on `device`
    doc: str = ""
    heuristic: Optional[Callable] = None    # (problem) -> tile configuration (kernels)
    candidates: Optional[Callable] = None   # (problem) -> configurations to time
    config_type: Optional[type] = None      # rebuilds a configuration from its tuple
    cpu_seconds: Optional[Callable] = None  # (problem) -> modelled seconds with NumPy/SciPy;
                                            # the backends that have one are auto's on the CPU
    precision: str = "default"              # "tf32": a candidate of auto_tf32 instead of auto
    min_compute_capability: int = 0         # the oldest GPU it runs on (10 * major + minor)

    def runs_on(self, device) -> bool:
        """Whether this backend runs on the GPU ``device`` (its compute capability)."""
        return device.compute_capability >= self.min_compute_capability

    def run(self, factor, X, layout, config):
        """The product once: :attr:`prepare` for ``X``, run on ``X``."""
        return self.prepare(factor, X, layout, config)(X)


@dataclasses.dataclass(frozen=True)
class Choice:
    """How to run a product: a registry ``backend``; ``config`` for a kernel backend (its
    ``config_type``), else None."""
    backend: str
    config: object = None


def _each_call(run):
    """``prepare`` of a backend that decides nothing ahead: ``run`` on every call."""
    return lambda factor, X, layout, config: lambda X: run(factor, X, layout, config)


def _prepare_mma_kernel(precision):
    return lambda factor, X, layout, config: ks_mma.prepare(factor, X, layout, config, precision)


def _mma_fits(precision):
    return lambda problem, device: ks_mma.supports(problem.dtype, precision)


def _half_in_single(run, devices):
    """``run`` for 16-bit operands (float16, bfloat16) on ``devices`` by way of float32: the
    product computed in float32 and rounded once to the operands' dtype. NumPy has no 16-bit
    GEMM (its loops are slow) and cuSPARSE none for CuPy's CSR; elsewhere (cuBLAS) they run
    as they are, with float32 accumulation."""
    def run_half(factor, X, layout, config):
        on = "gpu" if factor.xp is not numpy else "cpu"
        if not arrays.is_half(X.dtype) or on not in devices:
            return run(factor, X, layout, config)
        single = numpy.dtype(numpy.float32)
        return run(factor.in_dtype(single), X.astype(single), layout, config).astype(X.dtype)
    return run_half


def _run_reference(algorithm):
    return lambda factor, X, layout, config: algorithm(factor.blocks, X, layout, factor.xp)


def _run_dense(factor, X, layout, config):
    return reference.dense(factor.dense(), X, layout, factor.xp)


_run_dense_any = _half_in_single(_run_dense, {"cpu"})


def _prepare_dense(precision):
    """On CuPy, with the dense matrix kept (at most DENSE_CACHE_BYTES), one prepared cuBLAS
    call per product at ``precision`` (kernels/gemm.py), or where cuBLAS cannot take the
    operand as it is, at default precision, the general product on the kept matrix;
    otherwise, at default precision, the general path (the dense matrix formed for each
    product where it is not kept)."""
    def prepare(factor, X, layout, config):
        M, N = factor.shape
        if factor.xp is not numpy and factor.dtype.itemsize * M * N <= DENSE_CACHE_BYTES:
            # for some dtypes D in Fortran order, a view of the transpose's dense matrix (Dᵀ
            # in C order): the GEMM forms cuBLAS runs fastest there (kernels/gemm.py). The
            # one matrix kept serves every product of the factor (no second copy in C order)
            D = factor.T.dense().T if gemm.stores_transposed(factor.dtype, precision) \
                else factor.dense()
            run = gemm.prepare(D, X, layout, precision)
            if run is None and precision != "default" and not X.flags.c_contiguous:
                inner = gemm.prepare(D, X.copy(order="C"), layout, precision)
                if inner is not None:
                    run = lambda X: inner(X.copy(order="C"))   # noqa: E731
            if run is not None:
                return run
            if precision == "default":
                return lambda X: reference.dense(D, X, layout, factor.xp)
        if precision != "default":
            raise ValueError(f"dense at precision {precision!r} runs on CuPy with its dense "
                             f"matrix kept (at most {DENSE_CACHE_BYTES} bytes, here "
                             f"{factor.dtype.itemsize * M * N}) and sides below 2^31")
        return lambda X: _run_dense_any(factor, X, layout, config)
    return prepare


def _dense_tf32_fits(problem, device):
    """The dense matrix kept (at most DENSE_CACHE_BYTES) and a dtype that runs TF32."""
    M, N = problem.pattern.shape
    return runs_at(problem.dtype, "tf32") and problem.itemsize * M * N <= DENSE_CACHE_BYTES


def _prepare_groups(precision):
    """The BMM algorithm: on CuPy cuBLAS's strided-batched GEMM on every group where it lies
    (kernels/gemm.py: no permutation in bsl, nor in bsf with d = 1; two transposes in bsf
    with d > 1); on NumPy, and where cuBLAS cannot address the operand (a leading dimension
    of 2^31 elements or more), permute / batched matmul / permute at the dtype's precision."""
    permuting = _half_in_single(_run_reference(reference.bmm), {"cpu"})

    def prepare(factor, X, layout, config):
        run = None
        if factor.xp is not numpy:
            run = gemm.prepare_groups(factor, X, layout, precision)
        return run or (lambda X: permuting(factor, X, layout, config))
    return prepare


def _prepare_block_dense(factor, X, layout, config):
    """The BMM algorithm on the factor's dense diagonal blocks (:meth:`Factor.block_dense`),
    formed once where kept, else on every call."""
    groups = _prepare_groups("default")
    if block_dense_bytes(factor.pattern, factor.dtype.itemsize) <= DENSE_CACHE_BYTES:
        return groups(factor.block_dense(), X, layout, config)
    return lambda X: groups(factor.block_dense(), X, layout, config)(X)


def _block_dense_fits(problem, device):
    """Several rows of groups of several groups (with ``a = 1`` it is ``dense``, with
    ``d = 1`` ``bmm``), the diagonal blocks kept (at most DENSE_CACHE_BYTES)."""
    a, b, c, d = problem.pattern
    return a > 1 and d > 1 and \
        block_dense_bytes(problem.pattern, problem.itemsize) <= DENSE_CACHE_BYTES


def _groups_fit(precision):
    return lambda problem, device: runs_at(problem.dtype, precision)


def _run_sparse(factor, X, layout, config):
    return reference.sparse(factor.csr(), X, layout, factor.xp)


def _cpu_model(algorithm):
    return lambda problem: cpu_costs.cpu_seconds(problem, algorithm)


def _fma_kernel_seconds(problem, device):
    return gpu_costs.kernel_seconds(problem, device, ks_matmul.heuristic_config(problem).bk)


def _mma_kernel_seconds(precision):
    return lambda problem, device: gpu_costs.mma_kernel_seconds(
        problem, device, ks_mma.heuristic_config(problem), precision)


def _bmm_seconds(precision):
    return lambda problem, device: gpu_costs.bmm_seconds(problem, device, precision)


def _batch_last_fits(problem, device):
    """Batch-size-first operands only (in batch-size-last it is ``kernel``), with room for
    the transposed copies of X and Y beside them (at most a quarter of the device memory)."""
    M, N = problem.pattern.shape
    return (problem.layout == "bsf" and ks_mma.supports(problem.dtype)
            and problem.itemsize * problem.batch * (M + N) <= device.memory // 4)


def _batch_last_config(problem):
    return ks_mma.heuristic_config(problem.in_batch_last())


def _batch_last_seconds(problem, device):
    return gpu_costs.mma_batch_last_seconds(problem, device, _batch_last_config(problem))


def _dense_fits(problem, device):
    """The dense matrix must take at most a quarter of the device memory."""
    M, N = problem.pattern.shape
    return problem.itemsize * M * N <= device.memory // 4


def _dense_seconds(precision):
    def seconds(problem, device):
        M, N = problem.pattern.shape
        kept = problem.itemsize * M * N <= DENSE_CACHE_BYTES
        return gpu_costs.dense_seconds(problem, device, kept, precision)
    return seconds


def _small_batch(problem, device):
    """auto weighs the small-batch kernel up to batches of ks_skinny.AUTO_MAX_BATCH: wider
    ones run in passes that re-read the weights and X."""
    return problem.batch <= ks_skinny.AUTO_MAX_BATCH


_BOTH = frozenset({"cpu", "gpu"})
REGISTRY = {b.name: b for b in (
    Backend("kernel", frozenset({"gpu"}), _prepare_mma_kernel("default"),
            min_compute_capability=TENSOR_CORE_CC,
            seconds=_mma_kernel_seconds("default"),
            in_auto=True, fits=_mma_fits("default"),
            heuristic=ks_mma.heuristic_config, candidates=ks_mma.candidate_configs,
            config_type=ks_mma.MmaConfig,
            doc="the fused output-stationary kernel on the tensor cores "
                "(kernels_cu/ks_mma.cu): 3xTF32 for float32 and complex64 (float32-grade "
                "accuracy), DMMA for float64 and complex128, float16 products summed in "
                "float32"),
    Backend("kernel_bsl", frozenset({"gpu"}), ks_mma.prepare_batch_last,
            min_compute_capability=TENSOR_CORE_CC,
            seconds=_batch_last_seconds, in_auto=True,
            fits=_batch_last_fits, heuristic=_batch_last_config,
            candidates=lambda problem: ks_mma.candidate_configs(problem.in_batch_last()),
            config_type=ks_mma.MmaConfig,
            doc="the tensor-core kernel in its batch order: a batch-size-first operand is "
                "transposed to (N, B) (kernels_cu/transpose.cu), multiplied batch-size-last "
                "and the result transposed back; two extra passes over X and Y that pay for "
                "large blocks. In batch-size-last it is kernel"),
    Backend("kernel_tf32", frozenset({"gpu"}), _prepare_mma_kernel("tf32"),
            min_compute_capability=TENSOR_CORE_CC,
            seconds=_mma_kernel_seconds("tf32"),
            in_auto=True, precision="tf32",
            fits=_mma_fits("tf32"), heuristic=ks_mma.heuristic_config,
            candidates=ks_mma.candidate_configs, config_type=ks_mma.MmaConfig,
            doc="opt-in: the tensor-core kernel with one TF32 product per term (float32 and "
                "complex64 only; about 1e-3 relative error). A candidate of auto_tf32, "
                "never of auto"),
    Backend("kernel_fma", frozenset({"gpu"}), ks_matmul.prepare, seconds=_fma_kernel_seconds,
            in_auto=True, heuristic=ks_matmul.heuristic_config,
            candidates=ks_matmul.candidate_configs, config_type=ks_matmul.KernelConfig,
            doc="the fused output-stationary kernel on the FMA units "
                "(kernels_cu/ks_matmul.cu): any dtype (float16 summed in float32), fastest "
                "for the smallest blocks"),
    Backend("kernel_skinny", frozenset({"gpu"}), ks_skinny.prepare,
            seconds=gpu_costs.skinny_seconds, in_auto=True, fits=_small_batch,
            heuristic=ks_skinny.heuristic_config, candidates=ks_skinny.candidate_configs,
            config_type=ks_skinny.SkinnyConfig,
            doc="the fused kernel for small batches (kernels_cu/ks_skinny.cu): streams each "
                "weight once in 16-byte loads, FMA units, any dtype (float16 summed in "
                "float32); slow for wide batches, which it runs in passes of 8 columns"),
    Backend("direct", frozenset({"gpu"}), ks_direct.prepare,
            doc="one thread per output element (kernels_cu/ks_direct.cu), any dtype: "
                "quick to compile, slow for wide blocks and batches; what auto runs "
                "while a tuned kernel compiles in the background, never auto's choice"),
    Backend("bmm", _BOTH, _prepare_groups("default"), _bmm_seconds("default"),
            in_auto=True, cpu_seconds=_cpu_model("bmm"),
            doc="one GEMM per group: on the GPU cuBLAS's strided-batched GEMM on the groups "
                "where they lie (no permutation in bsl, nor in bsf with d = 1; X and Y "
                "transposed in bsf with d > 1), float16 summed in float32; on the CPU "
                "permute / batched matmul / permute"),
    Backend("bmm_tf32", frozenset({"gpu"}), _prepare_groups("tf32"),
            _bmm_seconds("tf32"), in_auto=True, precision="tf32", fits=_groups_fit("tf32"),
            doc="opt-in: bmm with cuBLAS allowed one TF32 product per term (float32 and "
                "complex64 only; about 1e-3 relative error; cuBLAS may keep float32 for "
                "blocks too small for the tensor cores, and beyond its 2^31 leading "
                "dimensions this runs bmm's permuting form at default precision). A "
                "candidate of auto_tf32, never of auto"),
    Backend("block_dense", frozenset({"gpu"}), _prepare_block_dense,
            gpu_costs.block_dense_seconds, in_auto=True, fits=_block_dense_fits,
            doc="one GEMM per row of groups on the dense matrix's diagonal block (b*d x "
                "c*d, d times bmm's arithmetic): cuBLAS's strided-batched GEMM on operands "
                "where they lie, with no transposes in either layout, float16 summed in "
                "float32; the blocks formed on first use and kept when at most "
                "DENSE_CACHE_BYTES"),
    Backend("dense", _BOTH, _prepare_dense("default"), _dense_seconds("default"),
            in_auto=True, fits=_dense_fits,
            doc="GEMM on the dense matrix, formed on first use and kept when at most "
                "DENSE_CACHE_BYTES (kscupy.KSMatrix.clear_cache releases it)"),
    Backend("dense_tf32", frozenset({"gpu"}), _prepare_dense("tf32"),
            _dense_seconds("tf32"), in_auto=True, precision="tf32", fits=_dense_tf32_fits,
            doc="opt-in: dense with cuBLAS allowed one TF32 product per term (float32 and "
                "complex64; about 1e-3 relative error), for dense matrices it keeps (at most "
                "DENSE_CACHE_BYTES). A candidate of auto_tf32, never of auto"),
    Backend("einsum", _BOTH, _each_call(_half_in_single(_run_reference(reference.einsum),
                                                         _BOTH)),
            cpu_seconds=_cpu_model("einsum"),
            doc="one tensor contraction over the (a, c, d) view of the input"),
    Backend("sparse", _BOTH, _each_call(_half_in_single(_run_sparse, _BOTH)),
            cpu_seconds=_cpu_model("sparse"),
            doc="CSR sparse product (scipy.sparse / cuSPARSE), the CSR matrix formed on "
                "first use and kept (kscupy.KSMatrix.clear_cache releases it)"),
)}


def names() -> tuple:
    """Backend names a single factor accepts: ``"auto"``, ``"auto_tf32"`` and the
    registry's."""
    return tuple(AUTOS) + tuple(REGISTRY)


def get(name: str) -> Backend:
    return REGISTRY[name]
