"""DCT and DST of types 2 and 3 as the real part of a complex DFT operator (Makhoul's method).

With the even-odd reordering ``v = x[perm]``, ``perm = (0, 2, 4, ..., then the odd indices in
decreasing order)``, the DCT-II is (Makhoul, 1980, any ``n``)

    ``A x = Re(diag(2 e) F_n P x)``,  ``e_k = exp(-i pi k / (2n))``,  ``A[k, j] = 2 cos(pi k (2j+1) / (2n))``

so the real matrix ``A`` is ``Re(W)`` for the complex operator ``W = diag(2e) F_n P``: a DFT
operator with a row scaling and an input gather folded in (:func:`kscupy.fourier.framed_dft`:
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
"""
from __future__ import annotations

import numpy

from . import _arrays
from .fourier import framed_dft
from .realpart import KSRealPart

__all__ = ["dct", "dst"]

_COMPLEX_OF = {numpy.dtype(numpy.float32): numpy.complex64,
               numpy.dtype(numpy.float64): numpy.complex128}


def _checked(n, type, norm, dtype, xp):
    from .transforms import _check_size, _check_xp
    n = _check_size("n", n)
    if isinstance(type, bool) or type not in (2, 3):
        raise ValueError(f"type must be 2 or 3 (types 1 and 4 are not implemented), got {type!r}")
    if norm not in (None, "backward", "ortho"):
        raise ValueError(f'norm must be None, "backward" or "ortho", got {norm!r}')
    dtype = _arrays.check_dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"the DCT and DST are real matrices: dtype must be float32 or float64, "
                        f"got {dtype}")
    _check_xp(xp)
    return n, dtype


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
    return scale


def dct(n: int, type: int = 2, norm=None, dtype=numpy.float64, xp=numpy, *, max_radix=64):
    """The ``n x n`` DCT of type 2 or 3 as a :class:`~kscupy.KSRealPart` of a DFT operator.

    ``C @ X`` equals ``scipy.fft.dct(X, type=type, norm=norm, axis=0)`` (``X`` of shape
    ``(n,)`` or ``(n, B)``) and ``X @ C.T`` equals ``scipy.fft.dct(X, type=type, norm=norm,
    axis=-1)`` (``X`` of shape ``(B, n)``), for real and complex ``X``. ``C.T`` is the
    transposed matrix (for ``norm="ortho"``, the inverse: ``dct(n, 2, "ortho").T`` is
    ``dct(n, 3, "ortho")``). See the module docstring for the factors: a permutation, the DFT
    chain of size ``n`` (Bluestein's operator when a prime factor of ``n`` exceeds
    ``max_radix``), a twiddle diagonal folded into its first factor, and the real part.

    Parameters
    ----------
    n : size.
    type : 2 or 3.
    norm : None (scipy's default, "backward") or "ortho".
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
    n, dtype = _checked(n, type, norm, dtype, xp)
    perm, twiddle = _makhoul(n)
    scale = _output_scale(n, type, norm, edge=0)
    W = framed_dft(n, row_scale=twiddle * scale, input_gather=perm, dtype=_COMPLEX_OF[dtype],
                   xp=xp, max_radix=max_radix)
    R = KSRealPart(W)
    return R if type == 2 else R.T


def dst(n: int, type: int = 2, norm=None, dtype=numpy.float64, xp=numpy, *, max_radix=64):
    """The ``n x n`` DST of type 2 or 3 as a :class:`~kscupy.KSRealPart` of a DFT operator.

    ``S @ X`` equals ``scipy.fft.dst(X, type=type, norm=norm, axis=0)`` and ``X @ S.T`` equals
    ``scipy.fft.dst(X, type=type, norm=norm, axis=-1)``. Built as :func:`dct` with alternating
    signs folded into the DFT operator's input side and the output order reversed (an output
    permutation), see the module docstring. Parameters as :func:`dct`.

    Examples
    --------
    >>> import numpy as np, scipy.fft, kscupy as ks
    >>> x = np.random.default_rng(0).standard_normal(12)
    >>> bool(np.allclose(ks.dst(12) @ x, scipy.fft.dst(x)))
    True
    """
    n, dtype = _checked(n, type, norm, dtype, xp)
    perm, twiddle = _makhoul(n)
    scale = _output_scale(n, type, norm, edge=n - 1)
    signs = numpy.where(perm % 2 == 0, 1.0, -1.0)              # (-1)^j at position perm^-1(j)
    W = framed_dft(n, row_scale=twiddle * scale[::-1], col_scale=signs, input_gather=perm,
                   output_gather=numpy.arange(n)[::-1], dtype=_COMPLEX_OF[dtype], xp=xp,
                   max_radix=max_radix)
    R = KSRealPart(W)
    return R if type == 2 else R.T
