"""What kscupy knows of a GPU: its facts, read from the device, in one place.

The kernel families size their tiles from these facts (shared memory per block and per
SM, registers, threads, clusters) and the cost model prices products with them (SMs,
bandwidth, arithmetic rates). :func:`current` reads them off the current CUDA device, once
per device; where there is no GPU (the CPU test suite, and the scripts that replay a
benchmark file's plans on a CPU) it gives :data:`H200`, the facts of the GPU kscupy was
tuned on, so that what is planned there is what an H200 would run. :func:`from_record`
rebuilds the facts a benchmark file recorded (``"rates"``).
"""
from __future__ import annotations

import dataclasses
import functools
import threading

import numpy

__all__ = ["DeviceFacts", "current", "of", "from_record", "H200", "bind_context"]

KIB = 1024

# cudaDeviceAttr values read below (CUDA runtime API)
_CLOCK_RATE = 13                        # kHz
_MULTIPROCESSORS = 16
_MEMORY_CLOCK_RATE = 36                 # kHz
_MEMORY_BUS_WIDTH = 37                  # bits
_L2_CACHE_SIZE = 38
_THREADS_PER_SM = 39
_SMEM_PER_SM = 81
_REGISTERS_PER_SM = 82
_SMEM_PER_BLOCK_OPTIN = 97
_SMEM_RESERVED_PER_BLOCK = 111
_CLUSTER_LAUNCH = 120


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """One GPU as kscupy's kernels and cost model see it.

    ``compute_capability`` is ``10 * major + minor`` (90 for Hopper). Shared memory:
    ``smem_per_sm`` bytes are shared by the blocks resident on an SM, each of which also
    holds ``smem_reserved_per_block``; one block may ask for at most ``smem_per_block``
    (the opt-in maximum). ``max_cluster``: the most blocks of a thread-block cluster a
    kernel may launch with (1: no clusters). ``bandwidth`` (bytes/s of device memory),
    ``flops32`` and ``flops64`` (flop/s of the FMA units) are datasheet-level estimates
    from the clocks, widths and SM count; the cost model's constants are fractions of them.
    """
    name: str
    compute_capability: int = 90
    sms: int = 132
    smem_per_sm: int = 228 * KIB
    smem_per_block: int = 227 * KIB
    smem_reserved_per_block: int = 1 * KIB
    registers_per_sm: int = 65536
    threads_per_sm: int = 2048
    l2_bytes: int = 60 * 2**20
    max_cluster: int = 16
    memory: int = 0                 # bytes of device memory
    bandwidth: float = 4.8e12
    flops32: float = 6.69e13
    flops64: float = 3.35e13
    cuda_runtime: int = 0

    @property
    def tma(self) -> bool:
        """Whether the device has the Tensor Memory Accelerator (bulk copies): sm_90 on."""
        return self.compute_capability >= 90

    def blocks_per_sm(self, smem: int, threads: int) -> int:
        """Blocks of ``smem`` bytes of dynamic shared memory and ``threads`` threads that an SM
        holds at once, as shared memory and threads allow (registers not counted)."""
        return max(1, min(self.smem_per_sm // (smem + self.smem_reserved_per_block),
                          self.threads_per_sm // threads))

    def peak(self, dtype) -> float:
        """Peak flop/s of the FMA units in ``dtype``'s precision."""
        return self.flops64 if numpy.dtype(dtype) in (numpy.float64, numpy.complex128) \
            else self.flops32


#: An H200 SXM (the facts :func:`current` gives where there is no GPU).
H200 = DeviceFacts(name="NVIDIA H200", memory=143771 * 2**20)


def _max_cluster(compute_capability: int, cluster_launch: bool) -> int:
    """Blocks a cluster may take: 16 on Hopper, where kernels may opt in to clusters beyond
    the portable size (``ks_rows`` does); the portable 8 on later GPUs, whose non-portable
    limit kscupy has not measured; 1 where the device launches no clusters."""
    if not cluster_launch or compute_capability < 90:
        return 1
    return 16 if compute_capability == 90 else 8


@functools.lru_cache(maxsize=None)
def of(device_id: int) -> DeviceFacts:
    """The facts of CUDA device ``device_id``, read once."""
    import cupy
    rt = cupy.cuda.runtime

    def attribute(attr, default=0):
        try:
            return rt.deviceGetAttribute(attr, device_id)
        except Exception:           # an attribute this runtime does not know
            return default
    props = rt.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    major, minor = props["major"], props["minor"]
    cc = 10 * major + minor
    sms = props["multiProcessorCount"]
    clock_khz = attribute(_CLOCK_RATE) or 1_755_000
    mem_khz, bus_bits = attribute(_MEMORY_CLOCK_RATE), attribute(_MEMORY_BUS_WIDTH)
    bandwidth = 2 * mem_khz * 1e3 * bus_bits / 8 if mem_khz and bus_bits else 3.0e12
    # FP32 lanes per SM: 64 on sm_70 and sm_80, 128 on the others from sm_80 on
    fp32_per_sm = 128 if cc not in (80, 70) and major >= 8 else 64
    flops32 = 2 * fp32_per_sm * sms * clock_khz * 1e3
    # FP64 at half the FP32 rate on the data-centre parts (sm_70, sm_80, sm_90), 1/32 else
    flops64 = flops32 / 2 if major in (7, 9) or cc == 80 else flops32 / 32
    return DeviceFacts(
        name=name, compute_capability=cc, sms=sms,
        smem_per_sm=attribute(_SMEM_PER_SM, H200.smem_per_sm),
        smem_per_block=attribute(_SMEM_PER_BLOCK_OPTIN, H200.smem_per_block),
        smem_reserved_per_block=attribute(_SMEM_RESERVED_PER_BLOCK, 0),
        registers_per_sm=attribute(_REGISTERS_PER_SM, 65536),
        threads_per_sm=attribute(_THREADS_PER_SM, 2048),
        l2_bytes=attribute(_L2_CACHE_SIZE, props.get("l2CacheSize", 0)),
        max_cluster=_max_cluster(cc, bool(attribute(_CLUSTER_LAUNCH))),
        memory=props["totalGlobalMem"], bandwidth=bandwidth, flops32=flops32,
        flops64=flops64, cuda_runtime=rt.runtimeGetVersion())


def current() -> DeviceFacts:
    """The facts of the current CUDA device, or :data:`H200`'s where CuPy or a device is
    missing (see the module's docstring)."""
    try:
        import cupy
        device_id = cupy.cuda.Device().id
    except Exception:       # no CuPy, no driver or no device
        return H200
    return of(device_id)


def from_record(record: dict) -> DeviceFacts:
    """The facts a benchmark file recorded (its ``"rates"``: name, bandwidth, flops32,
    flops64, cuda_runtime, memory, sms and, in newer files, the rest); what it lacks is
    :data:`H200`'s."""
    fields = {f.name for f in dataclasses.fields(DeviceFacts)}
    return dataclasses.replace(H200, **{k: v for k, v in record.items() if k in fields})


_THREAD = threading.local()         # .bound: the devices whose context this thread has bound


def bind_context(device_id: int):
    """Make device ``device_id``'s primary context current in this thread, once per thread
    and device. CUDA driver calls (kscupy launches its kernels through ``cuLaunchKernel``)
    need a current context, which a thread gets only from a CUDA runtime call; a new thread
    whose products allocate from CuPy's memory pool may never make one."""
    bound = _THREAD.__dict__.setdefault("bound", set())
    if device_id not in bound:
        import cupy
        cupy.cuda.runtime.setDevice(device_id)      # binds the device's primary context
        bound.add(device_id)
