"""Every kind of kscupy operator, built fresh from random data, and its float64 oracle.

``operator_kinds(xp, rng, dtype)`` gives a KSMatrix, its T/H/conj views, a random chain, a
chain with permutations (a DFT, complex dtypes only), the views of a chain, a leading block of
a chain (KSSubmatrix) and the real part of a complex chain (KSRealPart, of the complex dtype
of the same precision) with their transposes. The oracle multiplies dense matrices built from
the canonical values by the definition (``conftest.dense_oracle``), applies the permutations
as row gathers of the identity, crops a block and keeps a real part.
"""
import numpy

import kscupy as ks
from conftest import dense_oracle, random_array, to_numpy

KIND_NAMES = ["matrix", "matrix.T", "matrix.H", "matrix.conj", "chain", "chain.T", "chain.H",
              "transform", "submatrix", "submatrix.T", "realpart", "realpart.T"]


def operator_kinds(xp, rng, dtype):
    """``{name: operator}`` for every name of KIND_NAMES, values of ``dtype`` on ``xp``."""
    K = ks.KSMatrix(xp.asarray(random_array(rng, (2, 3, 4, 5), dtype)))
    C = ks.KSChain([ks.KSMatrix(xp.asarray(random_array(rng, p, dtype)))
                    for p in [(1, 4, 3, 2), (3, 2, 4, 1), (2, 3, 2, 2)]])
    if numpy.dtype(dtype).kind == "c":
        transform = ks.dft(12, dtype=dtype, xp=xp)           # has an input permutation
    else:
        transform = ks.hadamard(16, dtype=dtype, xp=xp)
    S = ks.KSSubmatrix(C, (C.shape[0] - 1, C.shape[1] - 2))
    complex_dtype = numpy.result_type(dtype, numpy.complex64)
    W = ks.KSChain([ks.KSMatrix(xp.asarray(random_array(rng, p, complex_dtype)))
                    for p in [(2, 3, 2, 1), (1, 2, 3, 2)]])
    R = ks.KSRealPart(W)
    return {"matrix": K, "matrix.T": K.T, "matrix.H": K.H, "matrix.conj": K.conj(),
            "chain": C, "chain.T": C.T, "chain.H": C.H, "transform": transform,
            "submatrix": S, "submatrix.T": S.T, "realpart": R, "realpart.T": R.T}


def operator_oracle(op):
    """The dense complex128 matrix of a KSMatrix, KSChain, KSSubmatrix or KSRealPart, from
    the definition."""
    if isinstance(op, ks.KSSubmatrix):
        M, N = op.shape
        return operator_oracle(op.chain)[:M, :N]
    if isinstance(op, ks.KSRealPart):
        return operator_oracle(op.operator).real.astype(numpy.complex128)
    if isinstance(op, ks.KSMatrix):
        return dense_oracle(to_numpy(op.values))
    D = numpy.eye(op.shape[1], dtype=numpy.complex128)
    if op.input_permutation is not None:
        D = D[to_numpy(op.input_permutation)]
    for f in reversed(op.factors):
        D = dense_oracle(to_numpy(f.values)) @ D
    if op.output_permutation is not None:
        D = D[to_numpy(op.output_permutation)]
    return D
