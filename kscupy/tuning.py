"""How a KS product runs on the GPU: kernel tile configuration and the ``auto`` backend choice.

Three layers, each falling back on the next:

1. **Tuning cache** — winners found by :func:`tune` (or by ``auto`` itself when the
   environment variable ``KSCUPY_AUTOTUNE=1`` is set), stored in
   ``$KSCUPY_CACHE_DIR/tuning.json`` (default ``~/.cache/kscupy/tuning.json``, or under
   ``$XDG_CACHE_HOME``), keyed by GPU name, CUDA runtime version and problem (layout, dtype,
   pattern, transposition, batch-size bucket). Never written inside the installed package.
2. **Cost model** — :func:`choose` estimates each candidate's time as
   ``max(bytes / bandwidth, flops / (efficiency * peak))`` with the device's peak rates and
   per-algorithm constants, and picks the smallest.
3. **Heuristic** — :func:`heuristic_config` gives a tile configuration for any problem with
   no table.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import threading
from pathlib import Path

import numpy

from ._kernels import ORDER_BATCH, ORDER_GROUP, ORDER_INGROUP, KernelConfig
from .pattern import KSPattern

__all__ = ["Problem", "Choice", "heuristic_config", "candidate_configs", "choose", "tune",
           "cache_path", "clear_cache"]

# Group tiles for kernel ORDER 1 (powers of two keep the number of compiled variants small;
# a tile that straddles two values of i is still correct, just less contiguous).
_GROUP_TILES = (32, 16, 8, 4, 2, 1)


@dataclasses.dataclass(frozen=True)
class Problem:
    """What determines how a product should run (everything but the values)."""
    pattern: KSPattern      # effective pattern of the operator applied
    batch: int
    dtype: numpy.dtype
    layout: str             # "bsl" or "bsf"
    batch_contiguous: bool  # the operand's batch stride is 1
    transposed: bool        # the operator reads its stored blocks transposed

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def access(self) -> str:
        """"bsl" when the batch is contiguous (threads can walk it), else "bsf"."""
        return "bsl" if self.layout == "bsl" and self.batch_contiguous else "bsf"

    def batch_bucket(self) -> int:
        """Batch sizes within a factor of two share tuning results."""
        return 1 << max(0, int(self.batch) - 1).bit_length()

    def key(self) -> str:
        a, b, c, d = self.pattern
        return (f"{self.layout}|{self.dtype}|{a},{b},{c},{d}|T{int(self.transposed)}"
                f"|B{self.batch_bucket()}|s{int(self.batch_contiguous)}")


@dataclasses.dataclass(frozen=True)
class Choice:
    """How to run a product: ``backend`` in {"kernel", "bmm", "dense"}; ``config`` for kernel."""
    backend: str
    config: KernelConfig | None = None


# -- heuristic ----------------------------------------------------------------------------------
_SMEM_LIMIT = 48 * 1024       # bytes of shared memory a block may use without opting in
_ROWS_PER_BLOCK = 64          # batch-size-first: rows (groups x k) one block computes


def _accumulator_budget(itemsize: int) -> int:
    """Outputs one thread may accumulate: 64 float32 registers' worth."""
    return max(4, 256 // itemsize)


def _largest_divisor(n: int, at_most: int) -> int:
    return max(t for t in range(1, min(n, at_most) + 1) if n % t == 0)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _row_tile(b: int, at_most: int) -> int:
    """Rows per tile, from a short menu (few compiled variants): a power of two covering a
    small ``b``, else the tile that wastes fewest padded rows, larger on ties."""
    if b <= 16 and _pow2_at_least(b) <= at_most:
        return _pow2_at_least(b)
    tiles = [t for t in (128, 96, 64, 48, 32, 16, 8, 4, 2, 1) if t <= at_most]
    return min(tiles, key=lambda t: (-(-b // t) * t, -t))


def heuristic_config(problem: Problem) -> KernelConfig:
    """A good tile configuration for ``problem`` from its shape alone (no table).

    The rules follow the autotuner's winners on an H200 (benchmarks/tune_report.py):

    * batch-size-last with a contiguous batch of at least 32 (kernel ORDER 0, threads walk
      the batch): large blocks take 128 x 64 tiles with 8 x 4 outputs per thread; blocks of
      up to 16 rows take all rows and 1024 batch columns per block;
    * otherwise (batch-size-first, or a thin batch) threads walk the features. For ``d == 1``
      (ORDER 2) 64 x 128 tiles; for ``d > 1`` (ORDER 1) eight adjacent groups per block when
      the blocks are small (so 32-byte runs of columns are read together), else one group
      per block in small tiles (32 x 32 when d >= 8, 64 x 64 below).
    """
    a, b, c, d = problem.pattern
    B = problem.batch
    budget = _accumulator_budget(problem.itemsize)
    # Power-of-two chunk and a short menu of row tiles: few compiled variants; tails masked.
    bk = min(_pow2_at_least(c), 8 if problem.itemsize <= 8 else 4)
    if problem.batch_contiguous and B >= 32:
        order, jt = ORDER_BATCH, 1
        if b > 16:
            bm = _row_tile(b, 128)
            tm, threads_n, tn = max(1, bm // 16), 16, 4
        else:
            bm = tm = _pow2_at_least(b)
            threads_n, tn = 256, 4
    elif d == 1:
        order, jt = ORDER_INGROUP, max(1, min(8, 32 // _pow2_at_least(c)))
        bm = _row_tile(b, max(1, 64 // jt))
        tm = max(1, bm // 16) if bm >= 16 else bm
        threads_n, tn = max(1, 256 // (jt * (bm // tm))) // 8, 8
    elif b <= 8:
        order, jt = ORDER_GROUP, min(8, 1 << (d.bit_length() - 1))
        bm = tm = _pow2_at_least(b)
        threads_n, tn = max(1, 256 // jt), 8
    elif b <= 64 and d >= 8:
        order, jt = ORDER_GROUP, 8
        bm = _row_tile(b, 32)
        tm, threads_n, tn = max(1, bm // 8), 4, 8
    else:
        order, jt = ORDER_GROUP, 1
        bm = _row_tile(b, 32 if d >= 8 else 64)
        tm, threads_n, tn = max(1, bm // 8), (4 if d >= 8 else 8), 8
    while bm % tm:
        tm -= 1
    while tm * tn > budget:                      # wide dtypes: fewer outputs per thread
        if tn > 1:
            tn //= 2
            threads_n *= 2
        else:
            tm = _largest_divisor(bm, tm - 1)
    bn = max(1, threads_n) * tn
    if bn > _pow2_at_least(B):                   # thin batch: threads along the rows instead
        bn = _pow2_at_least(B)
        tn = min(tn, bn)
        while jt * (bm // tm) * (bn // tn) < 128 and tm > 1:
            tm = _largest_divisor(bm, tm - 1)
    config = KernelConfig(jt=jt, bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, order=order)
    return _fit(config, problem.itemsize)


def _fit(config: KernelConfig, itemsize: int) -> KernelConfig:
    """Shrink the batch tile, then the reduction chunk, until the block fits the limits."""
    while config.smem_bytes(itemsize) > _SMEM_LIMIT or config.threads > 1024:
        if config.bn > 1:
            bn = config.bn // 2
            config = dataclasses.replace(config, bn=bn, tn=min(config.tn, bn))
        elif config.bk > 1:
            config = dataclasses.replace(config, bk=config.bk // 2)
        else:
            break
    return config


def candidate_configs(problem: Problem):
    """Configurations the autotuner times: the heuristic one and variations of its tiles."""
    base = heuristic_config(problem)
    seen, out = set(), []

    def add(**changes):
        try:
            cfg = dataclasses.replace(base, **changes)
        except ValueError:
            return
        if cfg not in seen and cfg.smem_bytes(problem.itemsize) <= _SMEM_LIMIT:
            seen.add(cfg)
            out.append(cfg)

    add()
    for bk in (4, 8, 16, 32):
        if bk <= max(problem.pattern.c, 4):
            add(bk=bk)
    for tn in (1, 2, 4, 8):
        add(tn=tn, bn=base.bn // base.tn * tn)
    for tm in (1, 2, 4, 8):
        add(tm=tm, bm=base.bm // base.tm * tm)
    if base.order == ORDER_BATCH:
        for bm, tm in ((128, 8), (64, 4), (64, 8), (32, 4), (32, 2)):
            add(bm=bm, tm=tm)
    else:
        for jt in _GROUP_TILES:
            if jt != base.jt:
                add(jt=jt)
    return out


# -- cost model ---------------------------------------------------------------------------------
# Modelled seconds of one product:
#     bytes_factor * bytes / bandwidth + flops * (m + m0) / (efficiency * peak * m) + overhead
# with bytes = itemsize * (B * (M + N) + nnz), m = 2bc/(b+c) (harmonic mean of the block
# sides: small blocks run GEMMs less efficiently) and the constants fitted, per algorithm and
# layout, to the heuristic configurations' times on 120 patterns of the paper's grid on an
# H200 (two disjoint stratified samples, benchmarks/bench_patterns.py --shift 0 / 0.5).
# RMS error of log time: BSL 0.15 (kernel) and 0.06 (BMM), BSF about 0.3. Fitted on one
# sample and applied to the other, auto came within 0.93 of the best baseline on every BSL
# pattern and within 0.68 on every BSF pattern (docs/performance.md). BMM's bytes_factor
# includes its two permutation passes. The autotuner replaces the model where it has run.
_MODEL = {  # (bytes_factor, efficiency, m0)
    ("kernel", "bsl"): (1.515, 0.424, 40.1), ("kernel", "bsf"): (0.835, 0.206, 25.8),
    ("bmm", "bsl"): (2.432, 0.883, 244.7), ("bmm", "bsf"): (3.237, 1.123, 670.7),
}
# The kernel is chosen over BMM only when predicted faster by this factor. In BSL the model
# is unbiased (median predicted/measured ratio 1.02, correlation 0.87) and any margin above
# 1 gave away the kernel's wins (median 1.13 -> 1.00 at 1.2) without fewer losses; in BSF a
# wrong pick of the kernel costs up to 2x and the kernel's real wins are several x.
_KERNEL_MARGIN = {"bsl": 1.0, "bsf": 1.5}
_DENSE_EFFICIENCY = 0.75          # cuBLAS GEMM, fraction of FP32/FP64 peak
#: auto keeps a dense copy of a factor (KSMatrix.dense_cached) only below this size.
DENSE_CACHE_BYTES = 256 * 2**20
# Fixed costs measured at B = 1 on an H200: launches (BMM: three kernels and two copies),
# and for an uncached dense matrix the ~15 small launches that form it.
_OVERHEAD_SECONDS = {"kernel": 10e-6, "bmm": 45e-6, "dense_cached": 15e-6, "dense": 300e-6}
# Each block walks the reduction in chunks of bk, one after the other: a product takes at
# least this long per chunk (a global-memory round trip), whatever its size. It dominates
# thin batches with long reductions (B = 1, c = 1024: 128 chunks, 0.17 ms measured).
_CHUNK_SECONDS = 1.2e-6


@dataclasses.dataclass(frozen=True)
class DeviceRates:
    bandwidth: float      # bytes/s, device memory
    flops32: float        # float32 FMA rate x 2, flop/s
    flops64: float
    name: str
    cuda_runtime: int


def _attribute(cupy, attr, dev):
    try:
        return cupy.cuda.runtime.deviceGetAttribute(attr, dev)
    except Exception:
        return 0


def device_rates() -> DeviceRates:
    """Peak rates of the current device from its attributes (datasheet-level estimates)."""
    import cupy
    return _device_rates(cupy.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _device_rates(dev) -> DeviceRates:
    import cupy
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(dev)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sms = props["multiProcessorCount"]
    major = props["major"]
    clock_khz = _attribute(cupy, 13, dev) or 1_755_000             # cudaDevAttrClockRate
    mem_khz = _attribute(cupy, 36, dev)                              # cudaDevAttrMemoryClockRate
    bus_bits = _attribute(cupy, 37, dev)                             # cudaDevAttrGlobalMemoryBusWidth
    bandwidth = 2 * mem_khz * 1e3 * bus_bits / 8 if mem_khz and bus_bits else 3.0e12
    fp32_per_sm = 128 if (major, props["minor"]) not in ((8, 0), (7, 0)) and major >= 8 else 64
    flops32 = 2 * fp32_per_sm * sms * clock_khz * 1e3
    flops64 = flops32 / 2 if major in (7, 9) or (major, props["minor"]) == (8, 0) else flops32 / 32
    return DeviceRates(bandwidth, flops32, flops64, name, rt.runtimeGetVersion())


def estimate_seconds(problem: Problem, backend: str, rates: DeviceRates) -> float:
    """Modelled time of one product with ``backend`` (see the cost-model constants)."""
    a, b, c, d = problem.pattern
    M, N = problem.pattern.shape
    B, isz = problem.batch, problem.itemsize
    flops = 2.0 * B * (4 if problem.dtype.kind == "c" else 1)
    peak = rates.flops64 if problem.dtype in (numpy.float64, numpy.complex128) else rates.flops32
    io = isz * B * (M + N)
    if backend == "dense":
        # A small factor's dense copy is kept after the first call (dense_cached); a larger
        # one would be formed on every call (zero-fill, scatter, ~15 small launches).
        if isz * M * N <= DENSE_CACHE_BYTES:
            formation, overhead = 0.0, _OVERHEAD_SECONDS["dense_cached"]
        else:
            formation = 2 * isz * M * N + (16 + isz) * problem.pattern.nnz
            overhead = _OVERHEAD_SECONDS["dense"]
        return ((io + formation + isz * M * N) / rates.bandwidth
                + flops * M * N / (_DENSE_EFFICIENCY * peak) + overhead)
    bytes_factor, efficiency, m0 = _MODEL[(backend, problem.access)]
    if backend == "bmm" and d == 1 and problem.layout == "bsl" and problem.batch_contiguous:
        bytes_factor /= 3      # (a, c, 1, B) -> (a, 1, c, B) is a view: no permutation passes
    m = 2.0 * b * c / (b + c)
    seconds = (bytes_factor * (io + isz * problem.pattern.nnz) / rates.bandwidth
               + flops * problem.pattern.nnz * (m + m0) / (efficiency * peak * m))
    if backend == "kernel":
        chunks = -(-c // heuristic_config(problem).bk)
        seconds = max(seconds, chunks * _CHUNK_SECONDS)
    return seconds + _OVERHEAD_SECONDS[backend]


def _dense_fits(problem: Problem) -> bool:
    import cupy
    M, N = problem.pattern.shape
    need = problem.itemsize * M * N
    return need <= cupy.cuda.Device().mem_info[0] // 4


def choose(problem: Problem) -> Choice:
    """The backend and configuration ``auto`` uses: tuning cache, else the cost model.

    Memoized per process (and cache file): a multiply pays the decision once per problem.
    """
    # keyed by what decides the cache file (cheaper than building its path on every call)
    key = (os.environ.get("KSCUPY_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"), problem)
    choice = _CHOICES.get(key)
    if choice is None:
        choice = _CHOICES[key] = _choose(problem)
    return choice


_CHOICES: dict = {}


def _choose(problem: Problem) -> Choice:
    rates = device_rates()
    cached = _cache().get(_cache_key(problem, rates))
    if cached is not None:
        return cached
    if os.environ.get("KSCUPY_AUTOTUNE", "0") not in ("", "0"):
        return tune(problem, progress=False)
    options = ["kernel", "bmm"] + (["dense"] if _dense_fits(problem) else [])
    margin = {"kernel": _KERNEL_MARGIN[problem.access]}
    best = min(options, key=lambda be: estimate_seconds(problem, be, rates) * margin.get(be, 1.0))
    return Choice(best, heuristic_config(problem) if best == "kernel" else None)


def kernel_config(problem: Problem) -> KernelConfig:
    """The configuration for ``backend="kernel"``: a tuned one if cached, else the heuristic.

    Memoized per process like :func:`choose`.
    """
    key = ("kernel", os.environ.get("KSCUPY_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"), problem)
    config = _CHOICES.get(key)
    if config is None:
        cached = _cache().get(_cache_key(problem, device_rates()))
        config = cached.config if cached is not None and cached.config is not None \
            else heuristic_config(problem)
        _CHOICES[key] = config
    return config


# -- tuning cache ---------------------------------------------------------------------------------
def cache_path() -> Path:
    """Where tuning results live (never inside the installed package)."""
    root = os.environ.get("KSCUPY_CACHE_DIR")
    if root:
        return Path(root) / "tuning.json"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kscupy" / "tuning.json"


class _TuningCache:
    """JSON file of ``key -> {"backend": ..., "config": [...] | None, "seconds": ...}``."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        try:
            self._entries = json.loads(path.read_text())
            if not isinstance(self._entries, dict):
                self._entries = {}
        except (OSError, ValueError):
            self._entries = {}

    def get(self, key: str) -> Choice | None:
        entry = self._entries.get(key)
        if not entry:
            return None
        try:
            config = KernelConfig(*entry["config"]) if entry.get("config") else None
            return Choice(entry["backend"], config)
        except (KeyError, TypeError, ValueError):
            return None   # an entry from another version: ignore it

    def put(self, key: str, choice: Choice, seconds: dict):
        with self._lock:
            self._entries[key] = {"backend": choice.backend,
                                  "config": list(choice.config.as_tuple()) if choice.config else None,
                                  "seconds": seconds}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self._entries, indent=1, sort_keys=True))
            tmp.replace(self.path)    # atomic: a concurrent reader sees the old or new file

    def __len__(self):
        return len(self._entries)


_CACHE: dict = {}


def _cache() -> _TuningCache:
    path = cache_path()
    if path not in _CACHE:
        _CACHE[path] = _TuningCache(path)
    return _CACHE[path]


def clear_cache():
    """Forget all tuning results (deletes the cache file)."""
    path = cache_path()
    _CACHE.pop(path, None)
    _CHOICES.clear()
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _cache_key(problem: Problem, rates: DeviceRates) -> str:
    return f"{rates.name}|cuda{rates.cuda_runtime}|{problem.key()}"


# -- autotuner -----------------------------------------------------------------------------------
def problem_of(K, X, layout) -> Problem:
    """The :class:`Problem` of ``K`` applied to ``X`` in ``layout``."""
    batch_axis = 1 if layout == "bsl" else 0
    return Problem(pattern=K.pattern, batch=int(X.shape[batch_axis]), dtype=numpy.dtype(X.dtype),
                   layout=layout, batch_contiguous=X.strides[batch_axis] == X.dtype.itemsize,
                   transposed=K._transposed)


def tune(problem_or_matrix, batch=None, *, layout="bsl", dtype=None, progress=True,
         n_repeat=20) -> Choice:
    """Time the candidates for a problem on the current GPU and cache the winner.

    Call as ``tune(K, B, layout="bsl")`` with a CuPy :class:`~kscupy.KSMatrix` (``dtype``
    defaults to ``K.dtype``), or with a :class:`Problem`. Candidates: the kernel
    configurations of :func:`candidate_configs`, CuPy BMM, and cuBLAS dense where it fits.
    Shows a progress bar when ``progress`` and tqdm is installed. Returns the winning
    :class:`Choice`, which ``auto`` and ``kernel`` then use for this problem.
    """
    import cupy
    from cupyx.profiler import benchmark

    from . import _reference
    from .matrix import KSMatrix
    if isinstance(problem_or_matrix, Problem):
        problem = problem_or_matrix
        K = KSMatrix.random(problem.pattern.transpose() if problem.transposed else problem.pattern,
                            dtype=problem.dtype, xp=cupy, seed=0)
        K = K.T if problem.transposed else K
    else:
        K = problem_or_matrix
        if batch is None:
            raise TypeError("tune(K, batch, layout=...) needs the batch size")
        dt = numpy.dtype(dtype or K.dtype)
        if K.xp is not cupy:
            raise TypeError("tune needs a KSMatrix holding CuPy values")
        if K.dtype != dt:
            K = K.astype(dt)
        problem = Problem(K.pattern, int(batch), dt, layout, True, K._transposed)
    M, N = K.shape
    rng = cupy.random.default_rng(0)
    shape = (N, problem.batch) if problem.layout == "bsl" else (problem.batch, N)
    X = rng.standard_normal(shape, dtype=numpy.float64).astype(problem.dtype)
    if not problem.batch_contiguous:
        X = cupy.asfortranarray(X)

    from . import _kernels
    runs = {f"kernel{cfg.as_tuple()}": (Choice("kernel", cfg),
                                        lambda cfg=cfg: _kernels.launch(K, X, problem.layout, cfg))
            for cfg in candidate_configs(problem)}
    runs["bmm"] = (Choice("bmm"), lambda: _reference.bmm(K.blocks, X, problem.layout, cupy))
    if _dense_fits(problem):   # as auto runs it: kept when small, else formed on each call
        M, N = K.shape
        if problem.itemsize * M * N <= DENSE_CACHE_BYTES:
            D = K.todense()
            runs["dense"] = (Choice("dense"), lambda: _reference.dense(D, X, problem.layout, cupy))
        else:
            runs["dense"] = (Choice("dense"),
                             lambda: _reference.dense(K.todense(), X, problem.layout, cupy))
    items = list(runs.items())
    if progress:
        try:
            from tqdm.auto import tqdm
            items = tqdm(items, desc=f"tuning {problem.key()}", leave=False)
        except ImportError:
            pass
    seconds = {}
    for label, (_, fn) in items:
        seconds[label] = float(numpy.median(benchmark(fn, n_repeat=n_repeat, n_warmup=3).gpu_times))
    best = min(seconds, key=seconds.get)
    choice = runs[best][0]
    _cache().put(_cache_key(problem, device_rates()), choice, seconds)
    _CHOICES.clear()
    return choice
