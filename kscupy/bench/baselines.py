"""What a user would run instead of kscupy, timed in the same run: CuPy's BMM (the paper's
permute / batched GEMM / permute), cuBLAS on the dense matrix and cuFFT (in the chains
suite), and what a caller adds (:class:`Baselines`).

The package never imports a deep-learning framework: the repository's
``benchmarks/bench_suite.py`` runs these suites with PyTorch's BMM and dense products added
(``benchmarks/torch_baselines.py``), as the project's published figures were measured.
"""
from __future__ import annotations

__all__ = ["Baselines", "NONE"]


class Baselines:
    """Baselines beyond CuPy's, as functions of a CuPy operand (None where there is none).

    ``bmm(blocks, layout, tf32)``: the paper's permute / batched GEMM / permute with the
    ``(a, d, b, c)`` blocks; ``dense(D, layout, tf32)``: the dense matrix's product;
    ``tf32_gemm_flops()``: the rate of a large TF32 GEMM (the TF32 rows' ceiling);
    ``bmm_values_grad(blocks, layout)``: ``(X, G) -> dW``, the weights' gradient of that
    BMM by the framework's own backward; ``dense_graph(D, X, layout)``: ``(replay, out)``,
    the dense product of the operand ``X`` captured in the framework's CUDA graph (a
    matrix-vector product where ``X`` holds one vector), ``replay()`` launching it on the
    legacy default stream and ``out`` its result; ``tensor(X)``: the framework's array
    sharing the CuPy operand ``X`` through DLPack, for timing kscupy on the arrays a
    framework's user holds; ``release()``: hand cached memory back between rows. ``name``
    and ``version`` go in the results file."""
    name = None
    version = None

    def bmm(self, blocks, layout, tf32=False):
        return None

    def dense(self, D, layout, tf32=False):
        return None

    def tf32_gemm_flops(self):
        return None

    def bmm_values_grad(self, blocks, layout):
        return None

    def dense_graph(self, D, X, layout):
        return None

    def tensor(self, X):
        return None

    def release(self):
        pass


#: No baselines beyond CuPy's.
NONE = Baselines()
