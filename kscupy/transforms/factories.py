"""Factories for structured transforms as KS chains (patterns from the paper's Table 4).

============================  ===============================================================
factory                       factors (a, b, c, d), left to right
============================  ===============================================================
``dft(n)``, ``idft(n)``       ``(r1...r_{l-1}, r_l, r_l, n / (r1...r_l))`` for ``n = r1...rL``;
                              a prime factor > ``max_radix``: Bluestein (:mod:`kscupy.transforms.fourier`)
``hadamard(2**L)``            ``(2**(l-1), 2, 2, 2**(L-l))``
``butterfly(2**L)``           ``(2**(l-1), 2, 2, 2**(L-l))`` (random values)
``block_butterfly(2**L*t)``   ``(2**(l-1), 2t, 2t, 2**(L-l))``
``monarch(M, N, blocks=p)``   ``(1, M/p, min(M,N)/p, p), (p, min(M,N)/p, N/p, 1)``
``low_rank(M, N, r)``         ``(1, M, r, 1), (1, r, N, 1)``
============================  ===============================================================

Default dtypes: random factories (``butterfly``, ``block_butterfly``, ``monarch``,
``low_rank``, like ``KSMatrix.random``) default to float32, the precision of learned
structured layers and the fastest GPU path; exact transforms (``dft``, ``idft``:
complex128, ``hadamard``: float64) default to double precision, what ``numpy.fft`` and
``scipy.linalg.hadamard`` return, so results compare one to one. Every factory takes
``dtype=``. Factories raise MemoryError, with the figures, when the values cannot fit in
the memory of ``xp`` (see :mod:`kscupy.core.memory`).
"""
from __future__ import annotations

import math

import numpy

from ..core import argument_checks, arrays, memory
from ..operators.chain import KSChain
from .fourier import dft_scale, framed_dft, mixed_radix_dft, needs_bluestein, prime_factors
from ..operators.matrix import KSMatrix
from ..core.pattern import KSPattern
from ..core.argument_checks import flag, positive_int
from ..core.structure import DFTStage

__all__ = ["dft", "idft", "hadamard", "butterfly", "block_butterfly", "monarch", "low_rank",
           "choose_pattern", "radix_factors"]


def _check_max_radix(max_radix):
    # radix 2 is the smallest prime: below it no size but 1 has a chain
    if positive_int("max_radix", max_radix) < 2:
        raise ValueError(f"max_radix must be at least 2, got {max_radix!r}")
    return int(max_radix)


def check_values_fit(count: int, dtype, xp, what: str):
    """MemoryError unless ``count`` values of ``dtype`` fit in the memory of ``xp``: a lower
    bound a factory checks before searching factors or divisors of a size, which for a huge
    size would run for minutes before the exact check."""
    memory.check_fits(count * numpy.dtype(dtype).itemsize, xp,
                      f"{what} (at least {count:,} values)")


def _power_of_two(name, n):
    n = positive_int(name, n)
    if n & (n - 1):
        raise ValueError(f"{name} must be a power of two, got {n}")
    return n.bit_length() - 1


def radix_factors(n: int, max_radix: int = 64) -> list:
    """The radices of kscupy's DFT chain for size ``n``: its prime factors, smallest first.

    Raises ValueError when a prime factor exceeds ``max_radix`` (its factor would be a dense
    ``p x p`` block: correct, but no longer a fast transform).
    """
    n = positive_int("n", n)
    max_radix = _check_max_radix(max_radix)
    radices = prime_factors(n)
    too_big = [r for r in radices if r > max_radix]
    if too_big:
        raise ValueError(f"n = {n} has the prime factor {too_big[0]} > max_radix = {max_radix}; "
                         f"kscupy builds DFTs for sizes whose prime factors are at most "
                         f"max_radix (raise it to accept dense {too_big[0]}x{too_big[0]} blocks)")
    return radices


def dft(n: int, dtype=numpy.complex128, norm=None, xp=numpy, *, inverse=False, max_radix=64):
    """The ``n x n`` DFT matrix as a KS chain (mixed-radix Cooley-Tukey, decimation in time),
    or as Bluestein's operator when ``n`` has a prime factor above ``max_radix``.

    ``F @ X`` equals ``numpy.fft.fft(X, axis=0, norm=norm)`` and ``X @ F.T`` equals
    ``numpy.fft.fft(X, axis=-1, norm=norm)``. With ``n = r_1 r_2 ... r_L`` (prime factors,
    :func:`radix_factors`), ``F_n = K_1 K_2 ... K_L Q`` where ``K_l`` has pattern
    ``(r_1...r_{l-1}, r_l, r_l, n / (r_1...r_l))`` and canonical values

        ``w[i, k, m, j] = exp(-2 pi i k m / r_l) * exp(-2 pi i m j / (r_l d_l))``

    (a size-``r_l`` DFT with the twiddle factors folded in), and ``Q`` is the digit-reversal
    permutation, stored as the chain's input permutation (a gather pass).

    **Sizes with a prime factor above max_radix** (e.g. primes ``> 64``) have no fast
    mixed-radix chain; for them ``dft`` returns Bluestein's chirp-z algorithm, a
    :class:`~kscupy.KSSubmatrix`: the leading ``n x n`` block of one ``m x m`` chain of
    ``2 log2 m`` radix-2 factors (``m`` the power of two ``>= 2n - 1``), with the chirps and the
    convolution filter folded into its factors (see :mod:`kscupy.transforms.fourier`). It has the same
    interface (both layouts, vectors, ``T``, ``H``, ``todense``, ``aslinearoperator``) and runs
    through the same planner and kernels; it is not a ``KSChain`` (no ``.factors``; it does not
    compose with ``@`` into longer chains).

    Parameters
    ----------
    n : size, any positive integer.
    dtype : complex64 or complex128.
    norm : None (unscaled forward), "ortho" (1/sqrt(n)) or "forward" (1/n), as in numpy.fft.
    xp : numpy or cupy.
    inverse : build the inverse transform (see :func:`idft`).
    max_radix : the largest prime radix of a chain factor; a larger prime factor of ``n``
        selects Bluestein's algorithm.

    Examples
    --------
    >>> import numpy as np, kscupy as ks
    >>> x = np.random.default_rng(0).standard_normal(97)     # 97 is prime: Bluestein
    >>> F = ks.dft(97)
    >>> type(F).__name__, bool(np.allclose(F @ x, np.fft.fft(x)))
    ('KSSubmatrix', True)
    >>> type(ks.dft(96)).__name__                                # 96 = 2^5 * 3: a chain
    'KSChain'
    """
    n = positive_int("n", n)
    max_radix = _check_max_radix(max_radix)
    inverse = flag("inverse", inverse)
    dtype = arrays.check_dtype(dtype)
    if dtype.kind != "c":
        raise TypeError(f"a DFT chain needs a complex dtype (complex64 or complex128), got {dtype}")
    scale = dft_scale(n, norm, inverse)
    arrays.check_module(xp)
    check_values_fit(2 * n, dtype, xp, f"dft({n})")      # every factor holds n * r >= 2n
    if needs_bluestein(n, max_radix):
        return framed_dft(n, dtype=dtype, norm=norm, xp=xp, inverse=inverse, max_radix=max_radix)
    return mixed_radix_dft(n, dtype, scale, inverse, xp)


def idft(n: int, dtype=numpy.complex128, norm=None, xp=numpy, *, max_radix=64):
    """The inverse DFT: ``F @ X == numpy.fft.ifft(X, axis=0, norm=norm)``; a KS chain, or
    Bluestein's :class:`~kscupy.KSSubmatrix` when ``n`` has a prime factor above ``max_radix``
    (see :func:`dft`)."""
    return dft(n, dtype=dtype, norm=norm, xp=xp, inverse=True, max_radix=max_radix)


def _check_chain_fits(patterns, dtype, xp, temporaries):
    """MemoryError unless the factors' values, plus ``temporaries`` arrays the size of the
    largest factor (built while a factor is made), fit in the memory of ``xp``."""
    sizes = [KSPattern.of(p).nnz for p in patterns]
    nbytes = numpy.dtype(dtype).itemsize * (sum(sizes) + temporaries * max(sizes))
    memory.check_fits(nbytes, xp, f"the values of {len(sizes)} KS factors ({numpy.dtype(dtype)}, "
                                  f"{sum(sizes):,} values)")


def _factor_chain(patterns, values_of, dtype, xp, structure=None):
    dtype = arrays.check_dtype(dtype)
    arrays.check_module(xp)
    _check_chain_fits(patterns, dtype, xp, temporaries=1)
    return KSChain([KSMatrix(numpy.asarray(values_of(i, KSPattern(*p)), dtype=dtype), structure,
                             xp=xp)
                    for i, p in enumerate(patterns)])


def hadamard(n: int, normalized=False, dtype=numpy.float64, xp=numpy):
    """The Sylvester-Hadamard matrix (``scipy.linalg.hadamard(n)``) as ``log2 n`` KS factors.

    ``H_n = ⊗^L H_2`` factors as ``prod_l I_{2^(l-1)} ⊗ H_2 ⊗ I_{2^(L-l)}``, patterns
    ``(2^(l-1), 2, 2, 2^(L-l))``. ``normalized=True`` scales by ``1/sqrt(n)`` (orthogonal).
    """
    L = _power_of_two("n", n)
    normalized = flag("normalized", normalized)
    h2 = numpy.array([[1.0, 1.0], [1.0, -1.0]]) / (math.sqrt(2) if normalized else 1.0)
    if L == 0:
        return _factor_chain([(1, 1, 1, 1)], lambda i, p: numpy.ones((1, 1, 1, 1)), dtype, xp)
    patterns = [(2 ** (l - 1), 2, 2, 2 ** (L - l)) for l in range(1, L + 1)]
    # each factor is a Hadamard stage, F_2 ⊗ I_d per group (declared: kernels compute it)
    stage = DFTStage(-1, twiddled=False, scale=1 / math.sqrt(2) if normalized else 1.0)
    return _factor_chain(patterns, lambda i, p: numpy.broadcast_to(h2[None, :, :, None], tuple(p)),
                         dtype, xp, stage)


def _random_chain(patterns, dtype, xp, seed):
    rng = numpy.random.default_rng(argument_checks.seed(seed))
    seeds = rng.integers(0, 2**63, size=len(patterns))
    arrays.check_module(xp)
    _check_chain_fits(patterns, arrays.check_dtype(dtype), xp, temporaries=3)
    return KSChain([KSMatrix.random(p, dtype=dtype, xp=xp, seed=int(s)) for p, s in zip(patterns, seeds)])


def butterfly(n: int, dtype=numpy.float32, xp=numpy, seed=None):
    """A random square dyadic butterfly: ``log2 n`` factors ``(2^(l-1), 2, 2, 2^(L-l))``."""
    L = _power_of_two("n", n)
    patterns = [(2 ** (l - 1), 2, 2, 2 ** (L - l)) for l in range(1, L + 1)] or [(1, 1, 1, 1)]
    return _random_chain(patterns, dtype, xp, seed)


def block_butterfly(n: int, t: int, dtype=numpy.float32, xp=numpy, seed=None):
    """A random block butterfly of size ``n = 2^L t``: factors ``(2^(l-1), 2t, 2t, 2^(L-l))``."""
    n, t = positive_int("n", n), positive_int("t", t)
    if n % t:
        raise ValueError(f"block_butterfly needs t to divide n, got n={n}, t={t}")
    L = _power_of_two("n / t", n // t)
    if L == 0:
        return _random_chain([(1, t, t, 1)], dtype, xp, seed)
    patterns = [(2 ** (l - 1), 2 * t, 2 * t, 2 ** (L - l)) for l in range(1, L + 1)]
    return _random_chain(patterns, dtype, xp, seed)


def monarch(M: int, N: int | None = None, *, blocks: int | None = None, dtype=numpy.float32,
            xp=numpy, seed=None):
    """A random Monarch matrix (Dao et al., ICML 2022) of shape ``(M, N)`` with ``blocks``
    diagonal blocks, as two KS factors ``(1, M/p, k/p, p)`` and ``(p, k/p, N/p, 1)``,
    ``p = blocks``, ``k = min(M, N)``.

    ``monarch(n, blocks=p)`` is square ``n x n`` (``blocks`` defaults to the largest
    divisor of ``n`` at most ``sqrt(n)``: ``sqrt(n)`` blocks of ``sqrt(n) x sqrt(n)`` when
    ``n`` is a square, as in the paper); ``monarch(M, N, blocks=p)`` is rectangular and
    needs ``blocks``. The block count is keyword-only: the paper writes Monarch matrices by
    their size and block count, and ``monarch(64, 8)`` must not silently mean a 64 x 8
    matrix, so a second positional argument without ``blocks`` raises TypeError.

    Random values as :meth:`KSMatrix.random`; ``dtype`` defaults to float32 like every
    random factory (exact transforms such as :func:`dft` default to double precision; see
    docs/concepts.md, "Default dtypes"). Raises ValueError when ``blocks`` does not divide
    ``M``, ``N`` and ``min(M, N)``, MemoryError when the values cannot fit.

    Examples
    --------
    >>> import kscupy as ks
    >>> ks.monarch(64, blocks=8).patterns
    (KSPattern(a=1, b=8, c=8, d=8), KSPattern(a=8, b=8, c=8, d=1))
    >>> ks.monarch(64, 256, blocks=8).shape
    (64, 256)
    """
    M = positive_int("M", M)
    if N is not None and blocks is None:
        square = (f"monarch({M}, blocks={N}) for a square {M} x {M} Monarch matrix with {N} "
                  f"blocks, or " if isinstance(N, (int, numpy.integer)) and 0 < N <= M
                  and M % N == 0 else "")
        raise TypeError(f"monarch({M}, {N}) is ambiguous: give the block count as a keyword, "
                        f"{square}monarch({M}, {N}, blocks=p) for a {M} x {N} one")
    N = M if N is None else positive_int("N", N)
    arrays.check_module(xp)
    check_values_fit(M + N, arrays.check_dtype(dtype), xp, f"monarch({M}, {N})")
    if blocks is None:
        blocks = max(q for q in range(1, math.isqrt(M) + 1) if M % q == 0)
    p = positive_int("blocks", blocks)
    if M % p or N % p:
        raise ValueError(f"monarch needs blocks to divide M, N and min(M, N); got M={M}, N={N}, "
                         f"blocks={p}")
    k = min(M, N) // p
    return _random_chain([(1, M // p, k, p), (p, k, N // p, 1)], dtype, xp, seed)


def low_rank(M: int, N: int, r: int, dtype=numpy.float32, xp=numpy, seed=None):
    """A random rank-``r`` product ``(1, M, r, 1) @ (1, r, N, 1)`` of shape ``(M, N)``.

    ``dtype`` defaults to float32 like every random factory (see docs/concepts.md, "Default
    dtypes"). Raises ValueError unless ``1 <= r <= min(M, N)`` (a larger inner dimension
    stores more values than the dense matrix and is not of rank ``r``).
    """
    M, N, r = positive_int("M", M), positive_int("N", N), positive_int("r", r)
    if r > min(M, N):
        raise ValueError(f"low_rank needs r <= min(M, N) = {min(M, N)}, got r={r}")
    return _random_chain([(1, M, r, 1), (1, r, N, 1)], dtype, xp, seed)


def _divisors(n: int) -> list:
    """The divisors of ``n``, by trial division up to ``sqrt(n)``."""
    small = [q for q in range(1, math.isqrt(n) + 1) if n % q == 0]
    return sorted(set(small) | {n // q for q in small})


def choose_pattern(M: int, N: int, density: float = 0.1) -> KSPattern:
    """A KS pattern of shape ``(M, N)`` for a target density: a heuristic.

    The paper's rule is to prefer patterns with a large ``h(b, c) = (b + c)/(b c)`` (the
    fused kernel's advantage over BMM grows with h) under a constraint on the number of
    non-zeros. For one factor of fixed shape, ``b = M/(a d)`` and ``c = N/(a d)``, so h grows
    with ``a*d`` exactly as the density ``1/(a d)`` falls: the rule reduces to taking the
    **largest density not above** ``density`` (the most expressive pattern allowed) and, among
    the splits of ``a*d``, the largest ``d`` (the kernel reads adjacent groups together).
    Raises ValueError when no pattern qualifies.
    """
    M, N = positive_int("M", M), positive_int("N", N)
    if isinstance(density, (bool, numpy.bool_)) or not isinstance(density, (int, float,
                                                                              numpy.number)):
        raise TypeError(f"density must be a number in (0, 1], got {type(density).__name__} "
                        f"{density!r}")
    if not 0 < density <= 1:
        raise ValueError(f"density must be in (0, 1], got {density}")
    g = math.gcd(M, N)
    divisors = _divisors(g)          # a and d range over them: a * d divides g
    candidates = [KSPattern(a, M // (a * d), N // (a * d), d)
                  for a in divisors for d in divisors
                  if (g // a) % d == 0 and a * d * density >= 1 - 1e-12]
    if not candidates:
        raise ValueError(f"no KS pattern of shape ({M}, {N}) has density <= {density}")
    return max(candidates, key=lambda p: (p.density, p.d))
