"""Factories of KS operators: structured transforms (DFT, DCT/DST, Hadamard), random
butterflies, Monarch and low-rank chains, and the projection of a dense matrix onto a chain
of KS patterns (:func:`factorize`)."""
from .factories import (dft, idft, hadamard, butterfly, block_butterfly, monarch, low_rank,
                        choose_pattern, radix_factors)
from .dct import dct, dst
from .factorization import factorize

__all__ = ["dft", "idft", "hadamard", "butterfly", "block_butterfly", "monarch", "low_rank",
           "choose_pattern", "radix_factors", "dct", "dst", "factorize"]
