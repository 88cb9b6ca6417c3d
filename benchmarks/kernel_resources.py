"""What the tensor-core kernel's tiles cost an SM, without a GPU: registers and spills as
ptxas reports them (NVRTC, as kscupy compiles them, to machine code for the architecture),
shared memory, and from those the blocks and warps one SM holds.

    python3 benchmarks/kernel_resources.py 1,96,96,2:bsl:bfloat16:25088 [--candidates]
    python3 benchmarks/kernel_resources.py --grid 40 --dtypes float16,float32 --arch 89

A row per distinct instantiation: the heuristic's tile (``*``) and with ``--candidates``
the autotuner's; with ``--grid N`` the heuristic's tiles of N patterns of the paper's grid
(both layouts, B = 25088 and 64), spills first. ``--arch`` other than 90 uses the facts an
emulated device of that capability has (``KSCUPY_EMULATE_ARCH``: its shared memory and
threads per SM), and compiles for it. Emulation on a Hopper GPU runs these tiles at
Hopper's occupancy; this is what the real chip's register file and shared memory allow.
Needs the ``test`` extra's NVRTC (``nvidia-cuda-nvrtc-cu12``), no GPU.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import pathlib
import sys

import numpy

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import kscupy as ks  # noqa: E402
from kscupy.bench.grid import paper_grid, stratified_sample  # noqa: E402
from kscupy.core import arrays, device  # noqa: E402
from kscupy.core.problem import Problem  # noqa: E402
from kscupy.kernels import ks_mma, nvrtc  # noqa: E402
from nvrtc_program import LIBRARY, resource_usage  # noqa: E402

#: Registers are allocated to a warp in units of this many (every architecture kscupy's
#: tensor-core kernels run on).
REGISTER_UNIT = 256


def _dtype(name):
    return numpy.dtype(arrays.BFLOAT16 if name == "bfloat16" else name)


def problems(args):
    """``[Problem]`` the command line names."""
    if args.grid:
        return [Problem(ks.KSPattern(*pattern), B, _dtype(name), layout, layout == "bsl", False)
                for pattern in stratified_sample(paper_grid(), args.grid)
                for name in args.dtypes.split(",") for layout in ("bsl", "bsf")
                for B in (25088, 64)]
    out = []
    for spec in args.problems:
        pattern, layout, name, B = spec.split(":")
        out.append(Problem(ks.KSPattern(*(int(v) for v in pattern.split(","))), int(B),
                           _dtype(name), layout, layout == "bsl", False))
    return out


def resident(config, dtype, registers, facts) -> int:
    """Blocks of ``config`` one SM of ``facts`` holds at ``registers`` a thread."""
    warps = config.threads // 32
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    by_registers = facts.registers_per_sm // (per_warp * warps)
    by_smem = facts.smem_per_sm // (config.smem_bytes(dtype.itemsize)
                                    + facts.smem_reserved_per_block)
    return min(by_registers, by_smem, facts.threads_per_sm // config.threads)


def tile_usage(tiles, arch: int = 90) -> dict:
    """``{(file, name): (config, dtype, registers, spill bytes)}`` of each distinct kernel
    instantiation of ``tiles`` (``[(MmaConfig, dtype)]``, contiguous operands: copies of 16
    bytes), compiled for ``sm_<arch>`` eight names a program, two programs at once."""
    found = {}
    for config, dtype in tiles:
        vector = 16 // dtype.itemsize
        vx = min(vector, config.slots) if config.order == ks_mma.ORDER_GROUP else vector
        found.setdefault(config.source(dtype, "default", False, vx, vector), (config, dtype))
    by_file = {}
    for filename, name in found:
        by_file.setdefault(filename, []).append(name)
    usage = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(resource_usage, nvrtc._source(f), names[i:i + 8],
                            nvrtc.source_dir(), f"sm_{arch}")
                for f, names in by_file.items() for i in range(0, len(names), 8)]
        for job in jobs:
            usage.update(job.result())
    return {key: (*tile, *usage[key[1]]) for key, tile in found.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", help="a,b,c,d:layout:dtype:batch")
    parser.add_argument("--grid", type=int, default=0, help="a sample of N grid patterns")
    parser.add_argument("--dtypes", default="float16,bfloat16,float32")
    parser.add_argument("--candidates", action="store_true",
                        help="the autotuner's candidates too")
    parser.add_argument("--arch", type=int, default=90)
    args = parser.parse_args(argv)
    if LIBRARY is None:
        parser.error("NVRTC is not installed (pip install nvidia-cuda-nvrtc-cu12)")
    facts = device.current() if args.arch == 90 else device.emulating(device.H200, args.arch)
    device.current = lambda: facts          # the tiles kscupy picks on such a device
    tiles, heuristics = [], set()
    for problem in problems(args):
        heuristic = ks_mma.heuristic_config(problem)
        heuristics.add((heuristic, problem.dtype))
        tiles.append((heuristic, problem.dtype))
        if args.candidates:
            tiles += [(c, problem.dtype) for c in ks_mma.candidate_configs(problem)]
    usage = tile_usage(tiles, args.arch)
    print(f"sm_{args.arch}: {facts.registers_per_sm} registers, {facts.smem_per_sm} bytes of "
          f"shared memory, {facts.threads_per_sm} threads an SM")
    rows = []
    for (_, name), (config, dtype, registers, spills) in usage.items():
        blocks = resident(config, dtype, registers, facts)
        rows.append((-spills, blocks * config.threads // 32, (config, dtype) in heuristics,
                     name, registers, spills, blocks, config.smem_bytes(dtype.itemsize)))
    for _, warps, heuristic, name, registers, spills, blocks, smem in sorted(rows):
        print(f"{'*' if heuristic else ' '} {name}: {registers} registers, {spills} bytes "
              f"spilled, {smem} bytes of shared memory -> {blocks} blocks, {warps} warps an SM")


if __name__ == "__main__":
    main()
