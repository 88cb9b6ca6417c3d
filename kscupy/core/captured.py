"""The memory of products captured in a CUDA graph.

A captured kernel keeps the addresses it was given during the capture: every replay of the
graph reads and writes them again. A block that a product allocated during the capture (its
result, a transposed copy of the operand, a chain's intermediate) and gave back to a memory
pool when the call returned would go to the next array allocated, and each replay would
then overwrite that array. So while the current stream captures a graph, what kscupy
allocates stays the graph's:

- in a PyTorch capture (a tensor's product, computed on PyTorch's stream), CuPy allocates
  through PyTorch's caching allocator, which gives a capture's blocks to the graph's own
  pool until the graph is freed (CuPy's pool could not grow there anyway: PyTorch captures
  in CUDA's global mode, where ``cudaMalloc`` invalidates the capture);
- in a CuPy capture, blocks come from CuPy's allocator as usual and are held here, until
  :func:`release_captured_memory` (CuPy's graphs have no pool of their own).

Outside a capture nothing changes; a kernel run that allocates only its result (which the
caller holds for as long as the graph writes it) is not wrapped at all.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import numpy

__all__ = ["capturing", "memory", "release_captured_memory", "held_blocks",
           "refuse_in_capture"]

_HELD: list = []                    # blocks allocated in CuPy captures (MemoryPointers)
_HELD_LOCK = threading.Lock()
_THREAD = threading.local()         # .active: a capture's allocator is in effect here


def capturing() -> bool:
    """Whether CuPy's current stream captures a CUDA graph."""
    import cupy
    return cupy.cuda.get_current_stream().is_capturing()


def memory(xp, torch_stream: bool = False):
    """A context for the allocations of a product on ``xp``'s arrays: while the current
    stream captures a CUDA graph, they stay the graph's (see the module), else (and for
    NumPy) nothing. ``torch_stream``: the product runs on PyTorch's current stream (a
    tensor's product), whose capture PyTorch knows of. Nested uses keep the outer one's
    allocator."""
    if xp is numpy or getattr(_THREAD, "active", False):
        return contextlib.nullcontext()
    torch = sys.modules.get("torch") if torch_stream else None
    if torch is not None and torch.cuda.is_current_stream_capturing():
        return _allocating(_torch_malloc(torch))
    if capturing():
        return _allocating(_held_malloc(xp.cuda.get_allocator()))
    return contextlib.nullcontext()


@contextlib.contextmanager
def _allocating(malloc):
    import cupy
    _THREAD.active = True
    try:
        with cupy.cuda.using_allocator(malloc):
            yield
    finally:
        _THREAD.active = False


def _torch_malloc(torch):
    """CuPy's allocator function, allocating a PyTorch tensor of bytes on the current
    device and stream (the view keeps it alive)."""
    import cupy

    def malloc(size):
        device_id = cupy.cuda.runtime.getDevice()
        block = torch.empty(size, dtype=torch.uint8, device=f"cuda:{device_id}")
        memory = cupy.cuda.UnownedMemory(block.data_ptr(), size, block, device_id)
        return cupy.cuda.MemoryPointer(memory, 0)
    return malloc


def _held_malloc(allocate):
    """CuPy's allocator function ``allocate``, each block also held in :data:`_HELD`."""
    def malloc(size):
        block = allocate(size)
        with _HELD_LOCK:
            _HELD.append(block)
        return block
    return malloc


def refuse_in_capture(xp, what: str):
    """RuntimeError naming the fix where ``what`` (new values: copied, then waited for) is
    asked for while CuPy's current stream captures a CUDA graph; nothing for NumPy."""
    if xp is not numpy and capturing():
        raise RuntimeError(
            f"{what} while the current stream captures a CUDA graph: new values are copied "
            f"and waited for, which a capture cannot hold. Do it before capturing (a graph "
            f"replays products of the values it was captured with).")


def release_captured_memory():
    """Let go of the memory that products captured in CuPy's CUDA graphs allocated (their
    results, and copies and intermediates they used); it returns to CuPy's pool as the
    arrays that still use it are freed. Call it once those graphs are no longer launched:
    a replay would write into memory that other arrays then hold. (PyTorch's graphs keep
    their memory in their own pools; this does not concern them.)"""
    with _HELD_LOCK:
        del _HELD[:]


def held_blocks() -> int:
    """Blocks held for graphs captured in CuPy (:func:`release_captured_memory`)."""
    return len(_HELD)
