"""What the tensor-core kernel's configurations cost in registers, compiled as kscupy
compiles them (NVRTC) to sm_90 machine code, without a GPU: ptxas reports each kernel's
registers and spills (``benchmarks/kernel_resources.py``). A spill is silent: the kernel stays
correct and only runs slower, so no GPU test would notice one that a source change adds."""
import pathlib
import sys

import numpy
import pytest

import kscupy as ks
from kscupy.bench.grid import paper_grid, stratified_sample
from kscupy.core import arrays
from kscupy.core.problem import Problem
from kscupy.kernels import ks_mma
from nvrtc_program import LIBRARY

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
from kernel_resources import tile_usage  # noqa: E402

pytestmark = pytest.mark.skipif(LIBRARY is None, reason="NVRTC is not installed (the test "
                                "extra installs nvidia-cuda-nvrtc-cu12 on Linux x86-64)")

HALF = [numpy.dtype(numpy.float16)] + \
    ([numpy.dtype(arrays.BFLOAT16)] if arrays.BFLOAT16 is not None else [])


def _problem(pattern, B, dtype, layout):
    # (a C-order operand: its batch is contiguous in batch-size-last only)
    return Problem(ks.KSPattern(*pattern), B, dtype, layout, layout == "bsl", False)


def test_16_bit_heuristic_tiles_do_not_spill():
    """float16 and bfloat16 run at the bandwidth limit or near it: every tile the heuristic
    picks for them on a sample of the paper's grid (both layouts, long and short batches)
    keeps its values in registers."""
    configs = [(ks_mma.heuristic_config(_problem(pattern, B, dtype, layout)), dtype)
               for pattern in stratified_sample(paper_grid(), 40)
               for dtype in HALF for layout in ("bsl", "bsf") for B in (25088, 64)]
    usage = tile_usage(configs)
    spilled = {name: u[2:] for (_, name), u in usage.items() if u[3]}
    assert not spilled, f"ptxas spills (registers, spill bytes): {spilled}"


def test_four_blocks_an_sm_fit_without_spills():
    """The tuner's four-blocks-per-SM candidates (launch bounds of 128 registers for the
    16-bit 128-thread blocks) get their registers without spilling, in both layouts."""
    configs = []
    for pattern in stratified_sample(paper_grid(), 40):
        for dtype in HALF:
            for layout, B in (("bsl", 25088), ("bsl", 64), ("bsf", 25088)):
                p = _problem(pattern, B, dtype, layout)
                configs += [(c, dtype) for c in ks_mma.candidate_configs(p)
                            if c.min_blocks == 4]
    usage = tile_usage(configs)
    assert len(usage) >= 4
    for (_, name), (_, _, registers, spills) in usage.items():
        assert registers <= 128 and not spills, (name, registers, spills)
