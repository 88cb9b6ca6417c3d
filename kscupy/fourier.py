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

from . import _arrays, memory
from .chain import KSChain
from .matrix import KSMatrix
from .submatrix import KSSubmatrix

__all__ = ["framed_dft", "bluestein_length", "needs_bluestein", "largest_prime_factor"]


def largest_prime_factor(n: int) -> int:
    """The largest prime factor of ``n >= 1`` (1 for ``n = 1``), by trial division."""
    m, p, largest = n, 2, 1
    while p * p <= m:
        while m % p == 0:
            m //= p
            largest = p
        p += 1
    return max(largest, m)


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
    from .transforms import radix_factors
    values = 2 * m * sum(radix_factors(m, max_radix))           # forward and inverse chains
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
    dtype = _arrays.check_dtype(dtype)
    if norm not in _SCALE:
        raise ValueError(f'norm must be None, "backward", "ortho" or "forward", got {norm!r}')
    if needs_bluestein(n, max_radix):                  # before any length-n array
        _check_bluestein_fits(n, bluestein_length(n), dtype, xp, max_radix)
    ones = numpy.ones(n, dtype=numpy.complex128)
    r = ones if row_scale is None else numpy.asarray(row_scale, dtype=numpy.complex128)
    c = ones if col_scale is None else numpy.asarray(col_scale, dtype=numpy.complex128)
    g_in = numpy.arange(n) if input_gather is None else numpy.asarray(input_gather)
    g_out = numpy.arange(n) if output_gather is None else numpy.asarray(output_gather)
    from .transforms import dft
    if not needs_bluestein(n, max_radix):
        F = dft(n, dtype=numpy.complex128, norm=norm, xp=numpy, inverse=inverse, max_radix=max_radix)
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
    forward_m = dft(m, dtype=numpy.complex128, xp=numpy)
    inverse_m = dft(m, dtype=numpy.complex128, xp=numpy, inverse=True)     # carries the 1/m
    q = _permutation_or_identity(inverse_m, "input_permutation", m)
    left = _host_values(inverse_m)                   # K'_1 ... K'_L, then Q
    right = _host_values(forward_m.T)                # Q^T K_L^T ... K_1^T, Q^T on the output
    left[-1] = _scaled(left[-1], cols=spectrum[q])   # Q diag(H) Q^T = diag(H[q])
    scale = _SCALE[norm](n, inverse)
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
