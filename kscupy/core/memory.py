"""Refuse allocations that cannot fit, with a MemoryError that gives the figures.

Without this check, building ``ks.hadamard(2**30)`` or densifying a large factor asks the
host for hundreds of GiB and the process is killed by the operating system (or CuPy raises
an out-of-memory error halfway through). Factories and ``KSMatrix.random`` / ``todense``
call :func:`check_fits` with their estimate first.

Available memory: on the host, ``MemAvailable`` of ``/proc/meminfo`` (Linux), else the
physical memory (``os.sysconf``); on the GPU, the device's free memory plus the free blocks
held by CuPy's memory pool.
"""
from __future__ import annotations

import os

import numpy

__all__ = ["available_bytes", "check_fits", "check_fits_with_host"]


def _host_available_bytes():
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_bytes(xp=numpy):
    """Bytes that an allocation with ``xp`` (numpy: host, cupy: current GPU) can take now,
    or None when the platform does not say."""
    if xp is numpy:
        return _host_available_bytes()
    free, _total = xp.cuda.Device().mem_info
    return free + xp.get_default_memory_pool().free_bytes()


def check_fits(nbytes, xp, what):
    """Raise MemoryError when ``nbytes`` exceed :func:`available_bytes` for ``xp``.

    ``what`` names the allocation in the message, e.g. ``"hadamard(1073741824) values"``.
    """
    available = available_bytes(xp)
    if available is not None and nbytes > available:
        where = "host memory" if xp is numpy else f"free memory on GPU {xp.cuda.Device().id}"
        raise MemoryError(f"{what} need {nbytes / 2**30:,.1f} GiB but only "
                          f"{available / 2**30:,.1f} GiB of {where} are available")


def check_fits_with_host(nbytes, host_nbytes, xp, what):
    """:func:`check_fits` for ``nbytes`` kept with ``xp`` whose making also takes
    ``host_nbytes`` of host temporaries (values computed on the host, then moved): one check of
    the sum on the host for NumPy, one check on each side for CuPy."""
    if xp is numpy:
        check_fits(nbytes + host_nbytes, numpy, what)
    else:
        check_fits(nbytes, xp, what)
        check_fits(host_nbytes, numpy, f"the host temporaries of {what}")
