"""Load, cache and launch the CUDA kernels of ``kernels_cu/`` through ``cupy.RawModule``.

Each kernel instantiation is compiled by NVRTC on first use and cached for the process here,
and on disk by CuPy's kernel cache. ``ks_matmul`` (one factor) is instantiated per scalar
type × tile configuration: the batch size, the pattern and the strides are run-time
arguments. ``ks_chain`` (a fused segment of a chain) is instantiated per scalar type ×
segment patterns × tile configuration: a chain's plan compiles once per process.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

import numpy

__all__ = ["KernelConfig", "source_dir", "launch", "launch_segment"]

_SCALAR = {numpy.dtype(numpy.float32): "float", numpy.dtype(numpy.float64): "double",
           numpy.dtype(numpy.complex64): "ks::cplx<float>",
           numpy.dtype(numpy.complex128): "ks::cplx<double>"}

#: Tile axis that neighbouring threads walk in global memory (see kernels_cu/ks_matmul.cu).
ORDER_BATCH, ORDER_GROUP, ORDER_INGROUP = 0, 1, 2


def source_dir() -> Path:
    """Directory of the CUDA sources: inside the installed package, else the source tree."""
    installed = Path(__file__).with_name("kernels_cu")
    return installed if installed.is_dir() else Path(__file__).resolve().parent.parent / "kernels_cu"


def _vec_width(itemsize: int, run: int) -> int:
    """The kernel's vec_width: widest shared-memory vector (<= 16 bytes, <= 4 elements)."""
    cap = min(4, 16 // itemsize)
    return cap if run % cap == 0 else (2 if run % 2 == 0 and cap >= 2 else 1)


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Tile configuration of ``ks_matmul`` (names as in kernels_cu/ks_matmul.cu).

    ``jt`` groups × ``bm`` rows × ``bn`` batch columns per block, reduction chunk ``bk``,
    ``tm × tn`` outputs per thread, ``order`` the axis contiguous in global memory.
    """
    jt: int
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    order: int

    def __post_init__(self):
        if min(self.jt, self.bm, self.bn, self.bk, self.tm, self.tn) < 1:
            raise ValueError(f"tile sizes must be positive: {self}")
        if self.bm % self.tm or self.bn % self.tn:
            raise ValueError(f"micro-tile must divide the tile: {self}")
        if self.order not in (ORDER_BATCH, ORDER_GROUP, ORDER_INGROUP):
            raise ValueError(f"order must be 0, 1 or 2: {self}")
        if not 1 <= self.threads <= 1024:
            raise ValueError(f"{self.threads} threads per block: {self}")

    @property
    def threads(self) -> int:
        return self.jt * (self.bm // self.tm) * (self.bn // self.tn)

    def smem_bytes(self, itemsize: int) -> int:
        """Dynamic shared memory: group offset tables and two stages of X and W chunks
        (mirrors the kernel's layout)."""
        vm, vn = _vec_width(itemsize, self.tm), _vec_width(itemsize, self.tn)
        xs = self.jt * (self.bk * (self.bn + vn) + vn)
        ws = self.jt * (self.bk * (self.bm + vm) + vm)
        return 16 * self.jt + 2 * itemsize * ((xs + 3) // 4 * 4 + (ws + 3) // 4 * 4)

    def name(self, dtype) -> str:
        return (f"ks::ks_matmul<{_SCALAR[numpy.dtype(dtype)]}, {self.jt}, {self.bm}, {self.bn}, "
                f"{self.bk}, {self.tm}, {self.tn}, {self.order}>")

    def as_tuple(self):
        return dataclasses.astuple(self)


@functools.lru_cache(maxsize=None)
def _source(filename: str):
    """A kernel source, prefixed with a digest of every file in kernels_cu/ so that CuPy's
    on-disk cache (keyed by source text) notices edits to included headers too."""
    directory = source_dir()
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.cu*")):
        digest.update(path.name.encode() + path.read_bytes())
    return f"// kernels_cu digest {digest.hexdigest()}\n" + (directory / filename).read_text()


@functools.lru_cache(maxsize=None)
def _compiled(filename: str, name: str, smem: int, device_id: int, prefer_shared=False):
    import cupy
    module = cupy.RawModule(code=_source(filename), options=("-std=c++17", f"-I{source_dir()}"),
                            name_expressions=[name])
    fn = module.get_function(name)
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    if prefer_shared:
        # all of the SM's unified storage that L1 can spare goes to shared memory, so that
        # several blocks, each holding a whole tile, fit per SM
        fn.preferred_shared_memory_carveout = 100
    return fn


def _function(dtype, config: KernelConfig, device_id: int):
    smem = config.smem_bytes(numpy.dtype(dtype).itemsize)
    return _compiled("ks_matmul.cu", config.name(dtype), smem, device_id)


def _element_strides(A):
    itemsize = A.dtype.itemsize
    if any(s % itemsize for s in A.strides):
        return None
    return tuple(s // itemsize for s in A.strides)


def _operands(X, layout, M):
    """``(X, Y, B, (sx_f, sx_b, sy_f, sy_b))``: the operand (copied once if its strides are
    not whole elements), a new C-contiguous result with ``M`` features, the batch size and
    the element strides along the feature and batch axes of both."""
    import cupy
    strides = _element_strides(X)
    if strides is None:
        X = cupy.ascontiguousarray(X)
        strides = _element_strides(X)
    if layout == "bsl":
        B = X.shape[1]
        Y = cupy.empty((M, B), dtype=X.dtype)
        return X, Y, B, (strides[0], strides[1], B, 1)
    B = X.shape[0]
    Y = cupy.empty((B, M), dtype=X.dtype)
    return X, Y, B, (strides[1], strides[0], 1, M)


def launch(K, X, layout, config: KernelConfig):
    """``K @ X`` (``layout="bsl"``, X ``(N, B)``) or ``X @ K.T`` (``"bsf"``, X ``(B, N)``).

    ``K.dtype == X.dtype`` is required (the caller promotes). ``X`` may have any strides that
    are whole elements (other views are copied once). Launches on CuPy's current stream and
    returns a new C-contiguous result without synchronising.
    """
    import cupy
    dtype = X.dtype
    if K.dtype != dtype:
        raise TypeError(f"kernel operands must share a dtype, got {K.dtype} and {dtype}")
    a, b, c, d = K.pattern
    X, Y, B, (sx_f, sx_b, sy_f, sy_b) = _operands(X, layout, K.shape[0])
    if B == 0:
        return Y
    # A_g[k, l] = W[g*b*c + k*w_sk + l*w_sl]: the stored block, or its transpose (a view).
    w_sk, w_sl = (1, b) if K._transposed else (c, 1)
    groups = a * d
    ktiles = -(-b // config.bm)
    ntiles = -(-B // config.bn)
    gtiles = -(-groups // config.jt)
    tiles = ktiles * ntiles * gtiles
    fn = _function(dtype, config, cupy.cuda.Device().id)
    i32, i64 = numpy.int32, numpy.int64
    # 1-D grid, capped: the kernel strides over tile ids beyond the grid.
    fn((min(tiles, 2**31 - 1),), (config.threads,),
       (X, Y, K._tiles, i32(groups), i32(b), i32(c), i32(d), i64(B),
        i64(sx_f), i64(sx_b), i64(sy_f), i64(sy_b), i32(w_sk), i32(w_sl),
        i32(1 if K._conjugated else 0), i32(ktiles), i32(gtiles), i64(tiles)),
       shared_mem=config.smem_bytes(dtype.itemsize))
    return Y


def segment_name(segment, dtype) -> str:
    """The ``ks_chain`` instantiation of a fused segment (see kscupy.planner.FusedSegment)."""
    factors = ", ".join(f"ks::Factor<{p.a}, {p.b}, {p.c}, {p.d}, {tm}, {rw}, {tr}, {vec}>"
                        for p, (tm, rw), (tr, vec) in zip(segment.patterns, segment.work,
                                                          segment.reads))
    return (f"ks::ks_chain<{_SCALAR[numpy.dtype(dtype)]}, {segment.rows}, {segment.slots}, "
            f"{segment.threads}, {factors}>")


def launch_segment(segment, X, layout):
    """Apply a fused segment: ``K_F ... K_1 X`` (bsl, X ``(N, B)``) or the same on the rows
    of ``X`` (bsf, ``(B, N)``). Same contract as :func:`launch`; the segment's factors must
    have X's dtype."""
    import cupy
    dtype = X.dtype
    AS, DS, nin, nout, _, _ = segment.geometry
    M = AS * DS * nout
    X, Y, B, (sx_f, sx_b, sy_f, sy_b) = _operands(X, layout, M)
    if B == 0:
        return Y
    smem = segment.smem_bytes(dtype.itemsize)
    fn = _compiled("ks_chain.cu", segment_name(segment, dtype), smem, cupy.cuda.Device().id,
                   prefer_shared=True)
    tiles = -(-B // segment.rows) * (AS * DS // segment.slots)
    i32, i64 = numpy.int32, numpy.int64
    null = numpy.uint64(0)
    table = lambda t: null if t is None else t  # noqa: E731
    # column offsets within a row fit in 32 bits: the kernel's cheap addressing applies
    narrow = max(abs(sx_f) * X.shape[1 if layout == "bsf" else 0], abs(sy_f) * M) < 2**31
    fn((min(tiles, 2**31 - 1),), (segment.threads,),
       (X, Y, segment.meta, i64(B), i64(sx_f), i64(sx_b), i64(sy_f), i64(sy_b),
        table(segment.src), table(segment.dst), table(segment.gorder),
        i32(segment.load_order), i32(segment.store_order), i32(narrow), i64(tiles)),
       shared_mem=smem)
    return Y
