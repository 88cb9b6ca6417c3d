"""The paper's benchmark grid of KS patterns (Gonon et al., ICML 2025, Appendix E, Figure 7)."""
import itertools

import numpy

from ..core.pattern import KSPattern

PAPER_BATCH = 25_088          # 196 tokens x 128 sequences
SIZE_LIMIT = 2_147_483_647    # the paper keeps every tensor under 2^31 elements


def paper_grid():
    """The 627 patterns of the paper's Figure 7 (same rules, same lists)."""
    a_list = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]
    bc_list = [48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
    d_list1 = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]
    d_list2 = [4, 16, 64]
    excluded = {(1024, 256), (256, 1024), (128, 512), (512, 128), (64, 256), (256, 64)}
    out = []

    def add(a, b, c, d):
        if (PAPER_BATCH * a * c * d <= SIZE_LIMIT and PAPER_BATCH * a * b * d <= SIZE_LIMIT
                and a * b * c * d <= SIZE_LIMIT):
            out.append((a, b, c, d))

    for b, c, d in itertools.product(bc_list, bc_list, d_list1):
        if b == c or b == 4 * c or c == 4 * b:
            add(1, b, c, d)
    for a, b, c, d in itertools.product(a_list, bc_list, bc_list, d_list2):
        if a != 1 and (b, c) not in excluded and (b == c or b == 4 * c or c == 4 * b):
            add(a, b, c, d)
    return out


def stratified_sample(patterns, count, shift=0.0):
    """``count`` patterns spread evenly over h(b, c) and over matrix size within each h.

    ``shift`` in [0, 1) moves every pick by that fraction of the spacing: ``shift=0.5``
    gives a sample disjoint from ``shift=0`` (a held-out set for checking fitted models).
    """
    ordered = sorted(patterns, key=lambda p: (KSPattern(*p).h, KSPattern(*p).nnz))
    if count >= len(ordered):
        return ordered
    # one pick: its spacing is the whole range (shift 0.5 picks the middle pattern)
    spacing = (len(ordered) - 1) / max(count - 1, 1)
    idx = numpy.clip(numpy.linspace(0, len(ordered) - 1, count) + shift * spacing, 0,
                     len(ordered) - 1)
    return [ordered[i] for i in numpy.unique(idx.round().astype(int))]


