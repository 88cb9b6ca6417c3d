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
import os
import threading

import numpy

__all__ = ["DeviceFacts", "current", "of", "from_record", "H200", "bind_context",
           "EMULATE_ARCH", "EMULATED_LIMITS", "TENSOR_CORE_CC", "emulated_arch", "emulating"]

KIB = 1024
#: The compute capability kscupy's tensor-core kernels need (DeviceFacts.tensor_cores).
TENSOR_CORE_CC = 80

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
    emulated_on: str = ""           # the real device's name, where these facts are emulated

    @property
    def tma(self) -> bool:
        """Whether the device has the Tensor Memory Accelerator (bulk copies): sm_90 on."""
        return self.compute_capability >= 90

    @property
    def tensor_cores(self) -> bool:
        """Whether kscupy's tensor-core kernels run here: they use the ``mma.sync`` shapes
        (m16n8k8 TF32 and FP64, m16n8k16 FP16) and the ``cp.async`` copies of sm_80 on.
        Older GPUs run the FMA kernels."""
        return self.compute_capability >= TENSOR_CORE_CC

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


#: ``KSCUPY_EMULATE_ARCH``: a compute capability (``80``, ``sm_89``) whose limits kscupy
#: then applies to the real device, to test on one GPU what kscupy does on another
#: (:func:`emulating`).
EMULATE_ARCH = "KSCUPY_EMULATE_ARCH"

#: The limits of each emulated compute capability: shared memory per SM and per block (the
#: opt-in maximum) of the data-centre or most common part of that capability. Clusters need
#: sm_90 and are off below it; the cost model prices the emulated device as unknown.
EMULATED_LIMITS = {
    75: dict(smem_per_sm=64 * KIB, smem_per_block=64 * KIB, threads_per_sm=1024),
    80: dict(smem_per_sm=164 * KIB, smem_per_block=163 * KIB),
    86: dict(smem_per_sm=100 * KIB, smem_per_block=99 * KIB, threads_per_sm=1536),
    89: dict(smem_per_sm=100 * KIB, smem_per_block=99 * KIB, threads_per_sm=1536),
    90: dict(),
}


def emulated_arch() -> int | None:
    """The compute capability ``KSCUPY_EMULATE_ARCH`` asks kscupy to emulate, or None."""
    value = os.environ.get(EMULATE_ARCH, "").strip().lower()
    if not value:
        return None
    digits = value.removeprefix("sm_").removeprefix("compute_")
    if not digits.isdigit() or int(digits) not in EMULATED_LIMITS:
        raise ValueError(f"{EMULATE_ARCH}={value!r}: expected one of "
                         f"{', '.join(str(cc) for cc in EMULATED_LIMITS)} (or sm_80, ...)")
    return int(digits)


def emulating(facts: DeviceFacts, cc: int) -> DeviceFacts:
    """``facts`` as a device of compute capability ``cc`` would have them: that
    capability's shared memory and threads (:data:`EMULATED_LIMITS`), clusters only from
    sm_90, and the name ``sm_<cc> emulated``, which no cost-model file matches: the unknown
    device's constants price it. The clocks,
    bandwidth and SM count stay the real device's: emulation tests the choices and limits,
    not the speed of another chip."""
    if cc > facts.compute_capability:
        raise ValueError(f"cannot emulate sm_{cc} on {facts.name} (sm_{facts.compute_capability})")
    limits = EMULATED_LIMITS[cc]
    return dataclasses.replace(
        facts, name=f"sm_{cc} emulated", emulated_on=facts.name, compute_capability=cc,
        max_cluster=facts.max_cluster if cc >= 90 else 1,
        **{key: min(value, getattr(facts, key)) for key, value in limits.items()})


def of(device_id: int) -> DeviceFacts:
    """The facts of CUDA device ``device_id``, read once, as emulated where
    ``KSCUPY_EMULATE_ARCH`` asks (read on every call, so tests may set it)."""
    cc = emulated_arch()
    facts = _read(device_id)
    return facts if cc is None else _emulated(facts, cc)


@functools.lru_cache(maxsize=None)
def _emulated(facts: DeviceFacts, cc: int) -> DeviceFacts:
    return emulating(facts, cc)


@functools.lru_cache(maxsize=None)
def _read(device_id: int) -> DeviceFacts:
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
        cc = emulated_arch()
        return H200 if cc is None else _emulated(H200, cc)
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
