"""DFTs of every size as KS operators, with diagonals and permutations folded into the factors.

:func:`framed_dft` builds ``P_out diag(r) F_n diag(c) P_in`` (``F_n`` the DFT of size ``n``,
``P_in``/``P_out`` gathers, ``r``/``c`` diagonals). The diagonals are folded exactly into the
values of the outermost factors (a row scaling of the left factor, a column scaling of the
right one) and the permutations become the chain's input and output permutations, so the
result is applied by the same planner and kernels as any chain.

* ``n`` whose prime factors are at most ``max_radix``: the mixed-radix chain of
  :func:`kscupy.dft`, ``F_n = K_1 ... K_L Q``.
* any other ``n``: Bluestein's chirp-z algorithm. With ``w_t = exp(-i pi t^2 / n)``,
  ``jk = (j^2 + k^2 - (k - j)^2) / 2`` gives ``F_n[k, j] = w_k * conj(w_{k-j}) * w_j``: a chirp
  diagonal, a convolution with ``conj(w)``, a chirp diagonal. The convolution of length
  ``2n - 1`` runs as a circular one of length ``m`` (the power of two ``>= 2n - 1``):
  ``IF_m diag(F_m h) F_m``. Since ``F_m`` is symmetric, ``F_m = Q^T K_L^T ... K_1^T`` (the
  transposed decimation-in-time chain has its digit reversal on the output side), and the two
  digit reversals meet around the filter: ``Q diag(H) Q^T = diag(H[q])``, a diagonal folded
  into the inverse chain. The whole convolution is one ``m x m`` chain of ``2 log2 m``
  radix-2 factors with no permutation in the middle, and ``F_n`` is its leading ``n x n``
  block (:class:`kscupy.KSSubmatrix`): the zero padding ``n -> m`` and the cropping are slices
  (with ``gcd(m, n) = 1`` they are not cheap KS factors).

All values are computed in complex128 on the host and converted to the requested dtype once;
the chirp phase ``t^2 mod 2n`` is exact integer arithmetic (``exp(-i pi t^2 / n)`` has period
``2n`` in ``t^2``), so no accuracy is lost to large phases at ``n ~ 1e5``.
"""
from __future__ import annotations

import math

import numpy

from ..core import arrays, memory
from ..operators.chain import KSChain
from ..operators.matrix import KSMatrix
from ..core.shuffle import perfect_shuffle
from ..core.structure import DFTStage
from ..operators.submatrix import KSSubmatrix

__all__ = ["framed_dft", "mixed_radix_dft", "dft_scale", "bluestein_length", "needs_bluestein",
           "prime_factors", "largest_prime_factor"]


def prime_factors(n: int) -> list:
    """The prime factors of ``n >= 1``, smallest first, with multiplicity (none for ``n = 1``),
    by trial division."""
    factors, m, p = [], n, 2
    while p * p <= m:
        while m % p == 0:
            factors.append(p)
            m //= p
        p += 1
    if m > 1:
        factors.append(m)
    return factors


def largest_prime_factor(n: int) -> int:
    """The largest prime factor of ``n >= 1`` (1 for ``n = 1``)."""
    return max(prime_factors(n), default=1)


def needs_bluestein(n: int, max_radix: int) -> bool:
    """True when ``n`` has a prime factor above ``max_radix`` (no mixed-radix chain)."""
    return largest_prime_factor(n) > max_radix


def bluestein_length(n: int) -> int:
    """The power of two ``m >= 2n - 1`` on which Bluestein's convolution of size ``n`` runs."""
    return 1 << max(0, (2 * n - 2).bit_length())


# numpy.fft's normalisations: the forward transform is scaled by 1, 1/sqrt(n), 1/n and the
# inverse by 1/n, 1/sqrt(n), 1 for "backward" (None), "ortho", "forward".
_SCALE = {None: lambda n, inv: 1.0 / n if inv else 1.0,
          "backward": lambda n, inv: 1.0 / n if inv else 1.0,
          "ortho": lambda n, inv: 1 / math.sqrt(n),
          "forward": lambda n, inv: 1.0 if inv else 1.0 / n}


def dft_scale(n: int, norm, inverse: bool) -> float:
    """The factor numpy.fft scales a DFT of size ``n`` by, for ``norm`` (None, "backward",
    "ortho" or "forward") and the direction."""
    if norm not in _SCALE:
        raise ValueError(f'norm must be None, "backward", "ortho" or "forward", got {norm!r}')
    return _SCALE[norm](n, inverse)


def mixed_radix_dft(n: int, dtype, scale: float, inverse: bool, xp) -> KSChain:
    """``scale`` times the DFT of size ``n`` (the inverse's unscaled kernel with ``inverse``)
    as a mixed-radix chain (decimation in time), ``F_n = K_1 ... K_L Q``: one factor a prime
    factor ``r_l`` of ``n``, smallest first (:func:`prime_factors`), pattern ``(r_1...r_{l-1},
    r_l, r_l, n / (r_1...r_l))``, each a size-``r_l`` DFT with its twiddles folded in and
    declared as a :class:`~kscupy.DFTStage`; ``Q`` the digit reversal, the chain's input
    permutation. The caller has checked ``n`` and ``dtype`` (:func:`kscupy.dft`)."""
    sign = 1 if inverse else -1
    radices = prime_factors(n) or [1]                 # n = 1: one 1 x 1 factor
    _check_dft_fits(n, radices, dtype, xp)
    factors, perm, a = [], numpy.arange(n), 1
    for level, r in enumerate(radices):
        d = n // (a * r)
        # a size-r DFT with the twiddles folded in (the values of kscupy.core.structure.DFTStage,
        # declared so that kernels may compute the stage instead of loading it); the
        # normalisation goes on the first-applied factor
        stage = DFTStage(int(sign), True, scale if level == len(radices) - 1 else 1.0)
        w = stage.values((a, r, r, d))
        factors.append(KSMatrix(w.astype(dtype), structure=stage, xp=xp))
        # this level's input split: I_a ⊗ P_{d, r} (decimation by r within each of a blocks)
        split = (numpy.arange(a)[:, None] * (r * d) + perfect_shuffle(d, r)[None, :]).ravel()
        perm = perm[split]
        a *= r
    identity = bool((perm == numpy.arange(n)).all())
    return KSChain(factors, input_permutation=None if identity else xp.asarray(perm))


def _check_dft_fits(n, radices, dtype, xp):
    """MemoryError unless the DFT chain's values (``n * r`` per radix ``r``) fit in the memory
    of ``xp``, and the complex128 temporaries of its largest factor (its values and their
    scaled copy, computed on the host) in host memory."""
    what = f"dft({n}) ({numpy.dtype(dtype)}, {n * sum(radices):,} values)"
    values = n * sum(radices) * numpy.dtype(dtype).itemsize
    temporaries = 2 * n * max(radices) * numpy.dtype(numpy.complex128).itemsize
    memory.check_fits_with_host(values, temporaries, xp, what)


def _scaled(values, rows=None, cols=None):
    """Canonical values (a, b, c, d) times ``diag(rows)`` on the left and ``diag(cols)`` on the
    right. Row ``i*b*d + k*d + j`` of the factor is ``rows.reshape(a, b, d)[i, k, j]``, column
    ``i*c*d + l*d + j`` is ``cols.reshape(a, c, d)[i, l, j]``."""
    a, b, c, d = values.shape
    if rows is not None:
        values = values * rows.reshape(a, b, 1, d)
    if cols is not None:
        values = values * cols.reshape(a, 1, c, d)
    return values


def _gather_or_none(perm, xp):
    return None if bool((perm == numpy.arange(perm.shape[0])).all()) else xp.asarray(perm)


def _chain_of(values_list, dtype, xp, input_permutation, output_permutation):
    factors = [KSMatrix(numpy.asarray(w, dtype=dtype), xp=xp) for w in values_list]
    return KSChain(factors, input_permutation=_gather_or_none(input_permutation, xp),
                   output_permutation=_gather_or_none(output_permutation, xp))


def _host_values(chain):
    return [numpy.array(f.values, dtype=numpy.complex128) for f in chain.factors]


def _permutation_or_identity(chain, which, n):
    perm = getattr(chain, which)
    return numpy.arange(n) if perm is None else numpy.asarray(perm)


def _check_bluestein_fits(n, m, dtype, xp, max_radix):
    """MemoryError unless Bluestein's two size-``m`` chains fit: their values in ``dtype`` on
    ``xp``, and on the host the two complex128 chains they are computed from plus the copies
    that get scaled (four complex128 chains at the peak), and the length-``m`` diagonals."""
    values = 2 * m * sum(prime_factors(m))                      # forward and inverse chains
    what = f"dft({n}) by Bluestein (two size-{m} chains, {values:,} values)"
    frame = 8 * m * numpy.dtype(numpy.complex128).itemsize     # diagonals, chirps, gathers
    host = 2 * values * numpy.dtype(numpy.complex128).itemsize + frame
    memory.check_fits_with_host(values * numpy.dtype(dtype).itemsize, host, xp, what)


def framed_dft(n, *, row_scale=None, col_scale=None, input_gather=None, output_gather=None,
               dtype=numpy.complex128, norm=None, xp=numpy, inverse=False, max_radix=64):
    """``P_out diag(row_scale) F diag(col_scale) P_in`` as a KS operator, ``F`` the DFT of size
    ``n`` (``numpy.fft.fft`` convention and ``norm``; the inverse DFT with ``inverse=True``).

    ``P_in x = x[input_gather]``, ``P_out y = y[output_gather]``; ``row_scale`` and
    ``col_scale`` are length-``n`` arrays (default: ones). Returns a :class:`KSChain` when
    every prime factor of ``n`` is at most ``max_radix``, else (Bluestein) a
    :class:`KSSubmatrix` of an ``m x m`` chain, ``m = bluestein_length(n)``. Shapes: ``(n, n)``.
    """
    dtype = arrays.check_dtype(dtype)
    scale = dft_scale(n, norm, inverse)
    if needs_bluestein(n, max_radix):                  # before any length-n array
        _check_bluestein_fits(n, bluestein_length(n), dtype, xp, max_radix)
    ones = numpy.ones(n, dtype=numpy.complex128)
    r = ones if row_scale is None else numpy.asarray(row_scale, dtype=numpy.complex128)
    c = ones if col_scale is None else numpy.asarray(col_scale, dtype=numpy.complex128)
    g_in = numpy.arange(n) if input_gather is None else numpy.asarray(input_gather)
    g_out = numpy.arange(n) if output_gather is None else numpy.asarray(output_gather)
    if not needs_bluestein(n, max_radix):
        F = mixed_radix_dft(n, numpy.complex128, scale, inverse, numpy)
        values = _host_values(F)
        q = _permutation_or_identity(F, "input_permutation", n)
        # F = K_1 ... K_L Q with Q x = x[q]: diag(r) scales K_1's rows; Q diag(c) = diag(c[q]) Q
        # scales K_L's columns; Q P_in gathers by g_in[q].
        values[0] = _scaled(values[0], rows=r)
        values[-1] = _scaled(values[-1], cols=c[q])
        return _chain_of(values, dtype, xp, g_in[q], g_out)

    m = bluestein_length(n)
    sign = 1.0 if inverse else -1.0
    t = numpy.arange(n, dtype=numpy.int64)
    chirp = numpy.exp(sign * 1j * numpy.pi * ((t * t) % (2 * n)) / n)     # w_t, exact phase
    h = numpy.zeros(m, dtype=numpy.complex128)       # conj(w) at the offsets -(n-1) .. n-1, mod m
    h[:n] = chirp.conj()
    h[m - n + 1:] = chirp.conj()[1:][::-1]
    spectrum = numpy.fft.fft(h)                      # the filter's DFT, precomputed once
    forward_m = mixed_radix_dft(m, numpy.complex128, 1.0, False, numpy)
    inverse_m = mixed_radix_dft(m, numpy.complex128, dft_scale(m, None, True), True, numpy)
    q = _permutation_or_identity(inverse_m, "input_permutation", m)
    left = _host_values(inverse_m)                   # K'_1 ... K'_L, then Q
    right = _host_values(forward_m.T)                # Q^T K_L^T ... K_1^T, Q^T on the output
    left[-1] = _scaled(left[-1], cols=spectrum[q])   # Q diag(H) Q^T = diag(H[q])
    out_diag = numpy.zeros(m, dtype=numpy.complex128)   # rows n..m are cropped: zero them
    out_diag[:n] = scale * r * chirp
    in_diag = numpy.zeros(m, dtype=numpy.complex128)    # columns n..m only see padding zeros
    in_diag[:n] = chirp * c
    left[0] = _scaled(left[0], rows=out_diag)
    right[-1] = _scaled(right[-1], cols=in_diag)
    # P_out Crop = Crop P_out' and Pad P_in = P_in' Pad with P' = P on the first n, identity after
    pad = numpy.arange(n, m)
    chain = _chain_of(left + right, dtype, xp, numpy.concatenate([g_in, pad]),
                      numpy.concatenate([g_out, pad]))
    return KSSubmatrix(chain, (n, n))
