"""kscupy: Kronecker-sparse matrices on the GPU with CuPy (and on the CPU with NumPy).

A Kronecker-sparse (KS) matrix of pattern ``(a, b, c, d)`` has support
``I_a ⊗ 1_{b×c} ⊗ I_d``; products of such factors give butterflies, Monarch matrices and
FFT-style fast transforms. See ``docs/concepts.md`` for the conventions.
"""
from .core.pattern import KSPattern
from .core.structure import DFTStage
from .core.shuffle import (perfect_shuffle, inverse_perfect_shuffle, inverse_permutation,
                           perfect_shuffle_matrix, bit_reversal, block_diagonal_permutations,
                           block_diagonalize)
from .core.arrays import SUPPORTED_DTYPES, gpu_module
from .core.captured import release_captured_memory
from .operators import KSMatrix, KSChain, KSSubmatrix, KSRealPart
from .transforms import (dft, idft, dct, dst, hadamard, butterfly, block_butterfly, monarch,
                         low_rank, choose_pattern, factorize)
from .linalg import aslinearoperator
from .gradients import values_grad, vjp
from .fitting import fit, FitResult
from .streaming import stream_matmul
from .storage import save, load
from . import testing
from .engine import tune
from .warmup import warmup

__version__ = "0.1.0"

__all__ = ["KSPattern", "KSMatrix", "DFTStage", "KSChain", "KSSubmatrix", "KSRealPart", "dft", "idft",
           "dct", "dst", "factorize", "hadamard", "butterfly", "block_butterfly", "monarch",
           "low_rank", "choose_pattern", "perfect_shuffle", "inverse_perfect_shuffle",
           "inverse_permutation", "perfect_shuffle_matrix", "bit_reversal",
           "block_diagonal_permutations", "block_diagonalize", "aslinearoperator", "save",
           "load", "values_grad", "vjp", "fit", "FitResult", "stream_matmul", "testing", "tune", "warmup", "release_captured_memory", "SUPPORTED_DTYPES", "gpu_module", "__version__"]
