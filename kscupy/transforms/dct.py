"""DCT and DST of types 1 to 4 as the real part of a complex DFT operator (Makhoul's method).

With the even-odd reordering ``v = x[perm]``, ``perm = (0, 2, 4, ..., then the odd indices in
decreasing order)``, the DCT-II is (Makhoul, 1980, any ``n``)

    ``A x = Re(diag(2 e) F_n P x)``,  ``e_k = exp(-i pi k / (2n))``,  ``A[k, j] = 2 cos(pi k (2j+1) / (2n))``

so the real matrix ``A`` is ``Re(W)`` for the complex operator ``W = diag(2e) F_n P``: a DFT
operator with a row scaling and an input gather folded in (:func:`kscupy.transforms.fourier.framed_dft`:
a chain ``K_1 ... K_L`` for smooth ``n``, Bluestein's leading block otherwise).

Why a real-part operator and not one complex chain: ``x -> Re(W x)`` is linear only over the
reals, and no chain of complex factors equals ``A`` exactly. An exact real KS factorisation of
the DCT exists only for special sizes; Makhoul's reordering works for every ``n`` and reuses
the DFT operators, so :class:`~kscupy.KSRealPart` applies ``Re(W)`` as a linear map (complex
inputs: real and imaginary parts through ``W`` in one stacked batch). Its transpose is
``Re(W^T)``, which gives type 3 for free:

=========  ==============================================  ===========================================
transform  matrix (scipy.fft convention)                    operator
=========  ==============================================  ===========================================
DCT-II     ``diag(f) A``                                   ``Re(diag(2 f e) F P)``
DCT-III    ``A^T diag(g)``                                 ``Re(diag(2 g e) F P)^T``
DST-II     ``diag(f') R A S``                              ``Re(R diag(2 f'[::-1] e) F diag(s[perm]) P)``
DST-III    ``(R A S)^T diag(g')``                          ``Re(R diag(2 g'[::-1] e) F diag(s[perm]) P)^T``
=========  ==============================================  ===========================================

``R`` reverses the order (an output gather), ``S = diag((-1)^j)`` (since
``cos(pi (n-1-k)(2j+1)/(2n)) = (-1)^j sin(pi (k+1)(2j+1)/(2n))``, DST-II is DCT-II with signs
on the input and the output reversed). ``S P = diag(s[perm]) P`` becomes a column scaling.
Scalings: ``norm=None``: ``f = f' = 1``, ``g = (1/2, 1, ..., 1)``, ``g' = (1, ..., 1, 1/2)``;
``norm="ortho"``: ``f = g = (1/sqrt(4n), 1/sqrt(2n), ...)``, ``f' = g' = (..., 1/sqrt(2n),
1/sqrt(4n))`` (orthogonal matrices, type 3 the transpose of type 2).

Types 1 and 4 are blocks of a DFT of another size ``N`` (a :class:`~kscupy.KSSubmatrix`, the
leading ``n x n`` block of the size-``N`` DFT operator with the gathers and diagonals folded):

* DCT-IV: ``(2j+1)(2k+1) = 4jk + 2j + 2k + 1`` gives ``Re(diag(2 e'_k) F_{2n}[:n, :n]
  diag(e''_j))`` with ``e'_k = exp(-i pi (2k+1) / (4n))``, ``e''_j = exp(-i pi j / (2n))``;
  DST-IV is the same with ``2i e'`` (``sin t = Re(i exp(-i t))``).
* DCT-I: ``Re(F_{2n-2}[:n, :n] diag(1, 2, ..., 2, 1))`` (``n >= 2``).
* DST-I: ``Re(2i F_{2n+2}[1:n+1, 1:n+1])``; the shifted block becomes the leading one through
  the input gather ``(n, 0, 1, ..., n-1, n+1, ...)`` and the output gather
  ``(1, ..., n, 0, n+1, ...)``.

They cost a DFT of about twice the size (no half-length trick), which keeps them exact and
valid for every ``n``. ``norm="ortho"`` scales by ``1/sqrt(2n)`` (type 4), ``1/sqrt(2(n+1))``
(DST-I) and ``1/sqrt(2(n-1))`` with scipy's orthogonalisation (DCT-I: ``x_0, x_{n-1}`` times
``sqrt(2)``, ``y_0, y_{n-1}`` divided by ``sqrt(2)``).
"""
from __future__ import annotations

import numpy

from ..core import arrays
from ..core.argument_checks import positive_int
from .fourier import framed_dft
from ..operators.realpart import KSRealPart
from ..operators.submatrix import KSSubmatrix

__all__ = ["dct", "dst"]

_COMPLEX_OF = {numpy.dtype(numpy.float32): numpy.complex64,
               numpy.dtype(numpy.float64): numpy.complex128}


def _checked(n, type, norm, dtype, xp, max_radix):
    from .factories import _check_max_radix, check_values_fit
    n = positive_int("n", n)
    _check_max_radix(max_radix)
    if isinstance(type, bool) or type not in (1, 2, 3, 4):
        raise ValueError(f"type must be 1, 2, 3 or 4, got {type!r}")
    if norm not in (None, "backward", "ortho", "forward"):
        raise ValueError(f'norm must be None, "backward", "ortho" or "forward", got {norm!r}')
    dtype = arrays.check_dtype(dtype)
    if dtype not in _COMPLEX_OF:      # real, with a complex DFT inside (there is no complex32)
        raise TypeError(f"the DCT and DST are real matrices built on a complex DFT: dtype must "
                        f"be float32 or float64, got {dtype}")
    arrays.check_module(xp)
    check_values_fit(2 * n, _COMPLEX_OF[dtype], xp, f"type-{type} transform of size {n}")
    return n, dtype


def _real_part_of_dft_block(N, n, dtype, xp, max_radix, row_scale, col_scale=None,
                            input_gather=None, output_gather=None):
    """``Re`` of the leading ``n x n`` block of ``P_out diag(row) F_N diag(col) P_in``; the
    scales have length ``n`` (then zero-padded to ``N``: rows and columns beyond ``n`` are
    cropped) or ``N`` (indexed before the gathers)."""
    def padded(v):
        if v is None or len(v) == N:
            return v
        out = numpy.zeros(N, dtype=numpy.complex128)
        out[:n] = v
        return out
    W = framed_dft(N, row_scale=padded(row_scale), col_scale=padded(col_scale),
                   input_gather=input_gather, output_gather=output_gather,
                   dtype=_COMPLEX_OF[dtype], xp=xp, max_radix=max_radix)
    if n < N:      # a block of a block of a chain is a block of the chain
        W = KSSubmatrix(W.chain if isinstance(W, KSSubmatrix) else W, (n, n))
    return KSRealPart(W)


def _type4(n, norm, dtype, xp, max_radix, sine):
    k = numpy.arange(n)
    scale = {"ortho": numpy.sqrt(1 / (2 * n)), "forward": 1 / (2 * n)}.get(norm, 1.0)
    row = (2j if sine else 2.0) * scale * numpy.exp(-1j * numpy.pi * (2 * k + 1) / (4 * n))
    col = numpy.exp(-0.5j * numpy.pi * k / n)
    return _real_part_of_dft_block(2 * n, n, dtype, xp, max_radix, row, col)


def _makhoul(n):
    """The even-odd reordering ``perm`` and the twiddles ``2 e_k = 2 exp(-i pi k / (2n))``."""
    perm = numpy.concatenate([numpy.arange(0, n, 2), numpy.arange(1, n, 2)[::-1]])
    twiddle = 2 * numpy.exp(-0.5j * numpy.pi * numpy.arange(n) / n)
    return perm, twiddle


def _output_scale(n, type, norm, edge):
    """The real row scale of type 2 (``f``) or the column scale of type 3 (``g``); ``edge`` is
    the index that scipy treats apart (0 for the DCT, n-1 for the DST)."""
    scale = numpy.ones(n)
    if norm == "ortho":
        scale[:] = numpy.sqrt(1 / (2 * n))
        scale[edge] = numpy.sqrt(1 / (4 * n))
    elif type == 3:
        scale[edge] = 0.5
    if norm == "forward":      # scipy's forward scaling: 1 / (2n), the logical DFT size
        scale /= 2 * n
    return scale


def dct(n: int, type: int = 2, norm=None, dtype=numpy.float64, xp=numpy, *, max_radix=64):
    """The ``n x n`` DCT of type 1, 2, 3 or 4 as a :class:`~kscupy.KSRealPart` of a DFT operator.

    ``C @ X`` equals ``scipy.fft.dct(X, type=type, norm=norm, axis=0)`` (``X`` of shape
    ``(n,)`` or ``(n, B)``) and ``X @ C.T`` equals ``scipy.fft.dct(X, type=type, norm=norm,
    axis=-1)`` (``X`` of shape ``(B, n)``), for real and complex ``X``. ``C.T`` is the
    transposed matrix (for ``norm="ortho"``, the inverse: ``dct(n, 2, "ortho").T`` is
    ``dct(n, 3, "ortho")``). See the module docstring for the factors: for types 2 and 3 a
    permutation, the DFT chain of size ``n`` (Bluestein's operator when a prime factor of
    ``n`` exceeds ``max_radix``), a twiddle diagonal folded into its first factor, and the
    real part; types 1 and 4 take the leading block of a DFT of size ``2(n-1)`` or ``2n``.

    Parameters
    ----------
    n : size.
    type : 1, 2, 3 or 4 (type 1 needs ``n >= 2``).
    norm : None (scipy's default, "backward"), "ortho" or "forward" (the unnormalised
        transform divided by the logical DFT size: ``2(n-1)`` for type 1, ``2n`` otherwise),
        as in ``scipy.fft.dct``.
    dtype : float32 or float64 (the DFT inside runs in complex64 or complex128).
    xp : numpy or cupy.

    Examples
    --------
    >>> import numpy as np, scipy.fft, kscupy as ks
    >>> x = np.random.default_rng(0).standard_normal(12)
    >>> bool(np.allclose(ks.dct(12) @ x, scipy.fft.dct(x)))
    True
    >>> bool(np.allclose(ks.dct(12, type=3, norm="ortho") @ x, scipy.fft.dct(x, 3, norm="ortho")))
    True
    """
    n, dtype = _checked(n, type, norm, dtype, xp, max_radix)
    if type == 4:
        return _type4(n, norm, dtype, xp, max_radix, sine=False)
    if type == 1:
        if n < 2:
            raise ValueError(f"the DCT-I needs n >= 2, got n = {n}")
        col = numpy.full(n, 2.0)
        col[[0, -1]] = 1.0
        row = numpy.ones(n)
        if norm == "ortho":            # scipy's orthogonalised DCT-I
            col[[0, -1]] *= numpy.sqrt(2)
            row[[0, -1]] /= numpy.sqrt(2)
            row /= numpy.sqrt(2 * (n - 1))
        elif norm == "forward":        # 1 / the logical DFT size 2(n-1)
            row /= 2 * (n - 1)
        return _real_part_of_dft_block(2 * (n - 1), n, dtype, xp, max_radix, row, col)
    perm, twiddle = _makhoul(n)
    scale = _output_scale(n, type, norm, edge=0)
    W = framed_dft(n, row_scale=twiddle * scale, input_gather=perm, dtype=_COMPLEX_OF[dtype],
                   xp=xp, max_radix=max_radix)
    R = KSRealPart(W)
    return R if type == 2 else R.T


def dst(n: int, type: int = 2, norm=None, dtype=numpy.float64, xp=numpy, *, max_radix=64):
    """The ``n x n`` DST of type 1, 2, 3 or 4 as a :class:`~kscupy.KSRealPart` of a DFT operator.

    ``S @ X`` equals ``scipy.fft.dst(X, type=type, norm=norm, axis=0)`` and ``X @ S.T`` equals
    ``scipy.fft.dst(X, type=type, norm=norm, axis=-1)``. Built as :func:`dct` with alternating
    signs folded into the DFT operator's input side and the output order reversed (an output
    permutation), see the module docstring; type 1 is a shifted block of the DFT of size
    ``2(n+1)``, type 4 the DCT-IV's operator times ``i``. Parameters as :func:`dct` (the
    logical DFT size that ``norm="forward"`` divides by is ``2(n+1)`` for type 1).

    Examples
    --------
    >>> import numpy as np, scipy.fft, kscupy as ks
    >>> x = np.random.default_rng(0).standard_normal(12)
    >>> bool(np.allclose(ks.dst(12) @ x, scipy.fft.dst(x)))
    True
    """
    n, dtype = _checked(n, type, norm, dtype, xp, max_radix)
    if type == 4:
        return _type4(n, norm, dtype, xp, max_radix, sine=True)
    if type == 1:
        N = 2 * (n + 1)
        scale = {"ortho": numpy.sqrt(1 / N), "forward": 1 / N}.get(norm, 1.0)
        rest = numpy.arange(n + 1, N)
        # F_N[1:n+1, 1:n+1] as a leading block: x_j goes to position j + 1, row k + 1 to k
        to_shifted = numpy.concatenate([[n], numpy.arange(n), rest])
        from_shifted = numpy.concatenate([numpy.arange(1, n + 1), [0], rest])
        # the row scale applies before the output gather, at rows 1..n: scale every row
        return _real_part_of_dft_block(N, n, dtype, xp, max_radix, numpy.full(N, 2j * scale),
                                       input_gather=to_shifted, output_gather=from_shifted)
    perm, twiddle = _makhoul(n)
    scale = _output_scale(n, type, norm, edge=n - 1)
    signs = numpy.where(perm % 2 == 0, 1.0, -1.0)              # (-1)^j at position perm^-1(j)
    W = framed_dft(n, row_scale=twiddle * scale[::-1], col_scale=signs, input_gather=perm,
                   output_gather=numpy.arange(n)[::-1], dtype=_COMPLEX_OF[dtype], xp=xp,
                   max_radix=max_radix)
    R = KSRealPart(W)
    return R if type == 2 else R.T
