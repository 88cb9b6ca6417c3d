"""What crosses from the operators to the layers below them: :class:`Factor` and
:class:`FactorChain`.

A :class:`~kscupy.KSMatrix` is the user's object; the layers below it (the execution
engine, the kernel families) see only its :class:`Factor`: the stored blocks, the stored
pattern, whether the operator reads them transposed and/or conjugated, and a cache shared
by all views of the same storage (a :class:`Storage`). A :class:`~kscupy.KSChain` hands them its
:class:`FactorChain`: its factors' Factors and its permutations. Nothing below
:mod:`kscupy.operators` reads an operator's private fields.

Storage. ``tiles`` has shape ``(a, d, b0, c0)`` for the stored pattern ``(a, b0, c0, d)``
and is C-contiguous: the dense ``b0 × c0`` block of group ``g = i*d + j`` starts at element
``g*b0*c0``. The factor represents ``op(stored)`` with ``op`` one of identity, transpose,
conjugate, adjoint, so its own pattern is ``(a, b, c, d)`` with ``(b, c) = (c0, b0)`` when
transposed. Element ``(k, l)`` (``k < b`` output row, ``l < c`` reduction index) of group
``g``'s block is ``tiles.ravel()[g*b*c + k*sk + l*sl]`` with ``(sk, sl) =``
:attr:`Factor.weight_strides`.
"""
from __future__ import annotations

import dataclasses
import itertools
import uuid

import numpy

from . import arrays, captured
from .reference import tocsr, todense
from .pattern import KSPattern

__all__ = ["Factor", "FactorCache", "FactorChain", "Storage", "DENSE_CACHE_BYTES",
           "block_dense_bytes"]

#: A factor keeps its dense matrix (see :meth:`Factor.dense`) only up to this size.
DENSE_CACHE_BYTES = 256 * 2**20

def block_dense_bytes(pattern, itemsize: int) -> int:
    """The bytes of the ``a`` dense ``(b*d) x (c*d)`` diagonal blocks of a factor of
    ``pattern`` (:meth:`Factor.block_dense`): ``d`` times its values."""
    a, b, c, d = pattern
    return itemsize * a * b * c * d * d


#: The cache key of the verdict of :attr:`Factor.structure` (True or False).
_STRUCTURE_HOLDS = "structure holds"


#: Generations are numbered from one counter for the whole process, so that no two caches,
#: nor a cache before and after its values changed, ever share a number.
_GENERATIONS = itertools.count(1)


class FactorCache(dict):
    """What is derived from one set of stored values (dense and CSR matrices, converted
    copies, prepared GPU runs), shared by the views of the storage.

    ``values_id`` names the values themselves, unique across processes (a UUID): copies
    of an operator (pickled, deep-copied, moved) carry it, a write gives the new values a
    new one, so that what depends on the values alone (a chain's plan) can be shared by
    every copy of them (:func:`kscupy.engine.planner.cached_plan`).

    ``generation`` names the values the cache derives from: a new cache takes a new number,
    and so does one whose values were replaced (:meth:`invalidate`). Whoever keeps something
    derived from the values outside this dict (a chain plan keeps merged factors, a chain's
    prepared runs) records the generation and rebuilds when it differs. The numbers are
    unique in the process: a product that read the old values just before a write (its
    pinned factor holds the old cache) records the old cache's new number, which no live
    cache has, so what it derives from the old values is never taken for the new ones'.
    """

    def __init__(self):
        super().__init__()
        self.generation = next(_GENERATIONS)
        self.values_id = uuid.uuid4().hex

    def invalidate(self):
        """The values changed: drop everything derived from them."""
        self.clear()
        self.generation = next(_GENERATIONS)


class Storage:
    """The stored values of one KS factor and their cache, shared by the views of the factor.

    ``state`` is the pair ``(tiles, cache)``, read and replaced as one reference (atomic
    under the GIL): a write (:meth:`replace`) puts new tiles with an empty cache in place
    of the old pair, so whoever read the pair before (a product running in another thread,
    a prepared run holding the old tiles) goes on with the old values and what was derived
    from them, and whoever reads it after sees only the new ones. Values are never written
    in place, so a product never sees a mix.
    """
    __slots__ = ("state",)

    def __init__(self, tiles, cache=None):
        self.state = (tiles, FactorCache() if cache is None else cache)

    def replace(self, tiles):
        """Put ``tiles`` (new values, complete) in place of the old ones, with a new empty
        cache (a new generation). The old cache is invalidated too (another new generation),
        so that whoever watches it (a prepared run, a plan) sees that the values moved on."""
        old = self.state[1]
        self.state = (tiles, FactorCache())
        old.invalidate()


@dataclasses.dataclass(frozen=True, eq=False)
class Factor:
    """One KS factor as stored: a :class:`Storage` (blocks and cache), the stored pattern,
    view flags.

    ``cache`` holds arrays derived from ``tiles`` (a dense copy, converted copies for mixed
    dtype products); every view of the same storage shares it. The values change only
    through :meth:`write`, which replaces tiles and cache together, so nothing derived is
    ever stale. Methods that read the values and keep something derived from them read the
    pair once; a product reads every factor through :meth:`pinned`, so that all it reads
    belongs to one write.
    ``declared``: a structure claimed for the stored values (:mod:`kscupy.core.structure`), or
    None; :attr:`structure` says whether they still have it.
    """
    storage: Storage = dataclasses.field(repr=False)
    stored: KSPattern
    transposed: bool = False
    conjugated: bool = False
    declared: object = None
    #: The pattern of the operator (the stored one, transposed for a transposed view);
    #: computed once, it is read on every launch.
    pattern: KSPattern = dataclasses.field(init=False, repr=False)
    #: Whether this view is held to one write already (made by :meth:`pinned`, whose storage
    #: no one else writes): pinning it again gives itself.
    held: bool = dataclasses.field(default=False, repr=False)

    def __post_init__(self):
        # conjugating real values is the identity: keep the flag meaningful
        if self.conjugated and self.dtype.kind != "c":
            object.__setattr__(self, "conjugated", False)
        object.__setattr__(self, "pattern",
                           self.stored.transpose() if self.transposed else self.stored)

    @classmethod
    def of_blocks(cls, tiles, pattern, declared=None) -> "Factor":
        """A new factor owning ``tiles`` (``(a, d, b, c)``, C-contiguous) of ``pattern``,
        with the structure ``declared`` for its values (not checked here: see
        :attr:`structure`)."""
        return cls(Storage(tiles), KSPattern.of(pattern), declared=declared)

    @property
    def tiles(self):
        """The stored ``(a, d, b0, c0)`` values (see the module docstring)."""
        return self.storage.state[0]

    @property
    def cache(self) -> FactorCache:
        """What is derived from the stored values, shared by the views of the storage."""
        return self.storage.state[1]

    def pinned(self) -> "Factor":
        """This view held to the values stored now: later writes do not reach it (a
        product reads its factors through this, so it never mixes two writes). A view
        already held is its own pin (its storage has no other writer)."""
        if self.held:
            return self
        return Factor(Storage(*self.storage.state), self.stored, self.transposed,
                      self.conjugated, self.declared, held=True)

    @property
    def name(self) -> tuple:
        """What this view applies, by name: its values' ``values_id`` and its view flags
        (equal for copies of the same values viewed alike; new after a write)."""
        return (self.cache.values_id, self.transposed, self.conjugated)

    # -- what the operator is ----------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.pattern.shape

    @property
    def dtype(self) -> numpy.dtype:
        return self.tiles.dtype

    @property
    def xp(self):
        return arrays.array_module(self.tiles)

    @property
    def blocks(self):
        """The ``(a, d, b, c)`` dense group blocks of the operator (a view of the storage;
        a conjugated copy for a conjugated complex view)."""
        return self.oriented(self.tiles)

    def oriented(self, tiles):
        """``tiles`` (this storage, or a copy of it in either array module) as this view's
        ``(a, d, b, c)`` blocks."""
        blocks = tiles.swapaxes(-1, -2) if self.transposed else tiles
        return arrays.array_module(tiles).conj(blocks) if self.conjugated else blocks

    @property
    def weight_strides(self) -> tuple:
        """``(sk, sl)``: element ``(k, l)`` of a block is at ``k*sk + l*sl`` from its start
        (``(c, 1)`` for the stored orientation, ``(1, b)`` for a transposed view)."""
        return (1, self.pattern.b) if self.transposed else (self.pattern.c, 1)

    # -- views and conversions -----------------------------------------------------------
    def view(self, transposed: bool, conjugated: bool) -> "Factor":
        """Another view of the same storage (and the same cache)."""
        return Factor(self.storage, self.stored, transposed, conjugated, self.declared)

    @property
    def T(self) -> "Factor":
        return self.view(not self.transposed, self.conjugated)

    @property
    def H(self) -> "Factor":
        return self.view(not self.transposed, not self.conjugated)

    def conj(self) -> "Factor":
        return self.view(self.transposed, not self.conjugated)

    def astype(self, dtype) -> "Factor":
        """A copy with values converted to ``dtype`` (a new storage and an empty cache)."""
        copy = Factor(Storage(self.tiles.astype(arrays.check_dtype(dtype))), self.stored,
                      declared=self.declared)
        return copy.view(self.transposed, self.conjugated)

    def copy_to(self, xp) -> "Factor":
        """A copy of this view with its storage in the array module ``xp`` (``numpy``, or
        ``cupy``: on the current GPU). The copy's cache starts with the verdict on the
        declared structure when this one has it, so values checked on the host are not
        checked again on the GPU."""
        tiles, cache = self.storage.state
        copied = arrays.numpy_copy(tiles) if xp is numpy else xp.asarray(tiles)
        copy = Factor(Storage(copied), self.stored, declared=self.declared)
        if _STRUCTURE_HOLDS in cache:
            copy.cache[_STRUCTURE_HOLDS] = cache[_STRUCTURE_HOLDS]
        return copy.view(self.transposed, self.conjugated)

    def in_dtype(self, dtype) -> "Factor":
        """This factor in ``dtype`` for a product: itself when the dtypes agree, else a
        converted copy kept in the cache (a mixed-dtype product converts once, not on every
        call, and the copy's own cache, e.g. its dense matrix, survives between calls)."""
        dtype = numpy.dtype(dtype)
        if dtype == self.dtype:
            return self
        key = ("converted", dtype)
        tiles, cache = self.storage.state
        stored = cache.get(key)
        if stored is None:
            stored = cache[key] = Factor(Storage(tiles.astype(dtype)), self.stored,
                                         declared=self.declared)
        return stored.view(self.transposed, self.conjugated)

    def write(self, blocks):
        """Replace the values: ``blocks`` are this view's ``(a, d, b, c)`` blocks (same array
        module, a dtype that casts safely). The new values are copied into new tiles,
        complete (on CuPy, the current stream is synchronised, so that products on other
        streams never read them half-written), before they replace the old ones in the
        storage (:meth:`Storage.replace`): every view sees them from then on, a product
        already running keeps the old ones."""
        xp = self.xp
        captured.refuse_in_capture(xp, "writing a KS matrix's values")
        stored = blocks.swapaxes(-1, -2) if self.transposed else blocks
        tiles = xp.empty_like(self.tiles)
        tiles[...] = xp.conj(stored) if self.conjugated else stored
        if xp is not numpy:
            xp.cuda.get_current_stream().synchronize()
        self.storage.replace(tiles)

    # -- structure ------------------------------------------------------------------------
    @property
    def structure(self):
        """The declared structure of the stored values (:mod:`kscupy.core.structure`) when they
        have it, else None. Checked against the values once per write (the verdict is kept
        in the cache, which a write clears), never assumed."""
        if self.declared is None:
            return None
        tiles, cache = self.storage.state
        holds = cache.get(_STRUCTURE_HOLDS)
        if holds is None:
            holds = cache[_STRUCTURE_HOLDS] = self.declared.holds_for(
                tiles.transpose(0, 2, 3, 1), self.stored)
        return self.declared if holds else None

    def stage_twiddles(self):
        """The twiddles ``t[j]`` (``j < d``) of a radix-2 :class:`~kscupy.core.structure.DFTStage`
        as this view applies them (conjugated for a conjugated view), in the factor's dtype
        on its device, kept in the cache. A transposed view applies them after the
        butterfly instead of before (``(F_2 diag(t))^T = diag(t) F_2``)."""
        stage = self.structure
        if stage is None or self.stored.b != 2 or not stage.twiddled:
            raise ValueError("stage_twiddles needs a factor with a twiddled radix-2 DFTStage")
        key = ("stage twiddles", self.conjugated)
        table = self.cache.get(key)
        if table is None:
            t = stage.twiddles(self.stored.d, self.conjugated)
            table = self.cache[key] = self.xp.asarray(t.astype(self.dtype))
        return table

    def interleaved_words(self, conjugated: bool = False):
        """The stored blocks as 16-byte words interleaved across groups, kept in the cache:
        ``(W, a·d, 16 / itemsize)`` with word m of group g's block (row-major, ``b·c``
        values, ``W = b·c·itemsize / 16``) at ``[m, g]``, for kernels whose neighbouring
        threads read neighbouring groups' blocks (``kernels_cu/ks_rows.cu``). Needs
        ``b·c·itemsize`` to be a multiple of 16; the view's flags are not applied, but
        ``conjugated`` gives the copy of the conjugated values (complex dtypes; kept
        beside the other), so that a kernel reading it never conjugates."""
        b, c, isz = self.stored.b, self.stored.c, self.dtype.itemsize
        if b * c * isz % 16:
            raise ValueError(f"blocks of {b * c * isz} bytes are not whole 16-byte words")
        conjugated = conjugated and self.dtype.kind == "c"
        key = "interleaved words, conjugated" if conjugated else "interleaved words"
        tiles, cache = self.storage.state
        words = cache.get(key)
        if words is None:
            per_word = 16 // isz
            tiles = tiles.conj() if conjugated else tiles
            groups = tiles.reshape(-1, b * c * isz // 16, per_word)
            words = cache[key] = self.xp.ascontiguousarray(groups.transpose(1, 0, 2))
        return words

    def todense(self):
        """The dense ``(M, N)`` matrix, formed now."""
        return todense(self.blocks, self.xp)

    def dense(self):
        """The dense matrix, formed once and kept in the cache when it is at most
        :data:`DENSE_CACHE_BYTES` (larger ones are formed on every call)."""
        M, N = self.shape
        if self.dtype.itemsize * M * N > DENSE_CACHE_BYTES:
            return self.todense()
        key = ("dense", self.transposed, self.conjugated)
        tiles, cache = self.storage.state
        D = cache.get(key)
        if D is None:
            D = cache[key] = arrays.frozen(todense(self.oriented(tiles), self.xp))
        return D

    def block_dense(self) -> "Factor":
        """This view as a factor of pattern ``(a, b*d, c*d, 1)``: the ``a`` dense diagonal
        blocks of its dense matrix, block ``i`` the ``(b*d) x (c*d)`` matrix of the ``d``
        groups ``(i, j)``, whose element ``(k*d + j, l*d + j')`` is the group's ``(k, l)``
        where ``j = j'`` and zero elsewhere. It applies the same operator with ``d`` times
        the values and the arithmetic, as GEMMs on operands where they lie in either layout
        (the ``block_dense`` backend). Formed once and kept in the cache when its values
        take at most :data:`DENSE_CACHE_BYTES` (larger ones are formed on every call)."""
        if block_dense_bytes(self.pattern, self.dtype.itemsize) > DENSE_CACHE_BYTES:
            return _block_dense(self.blocks, self.pattern, self.xp)
        key = ("block dense", self.transposed, self.conjugated)
        tiles, cache = self.storage.state
        found = cache.get(key)
        if found is None:
            found = cache[key] = _block_dense(self.oriented(tiles), self.pattern, self.xp)
        return found

    @property
    def address(self) -> int:
        """Device (or host) address of the stored values."""
        return arrays.address(self.tiles)

    def row_major(self):
        """The operator's ``(a, d, b, c)`` blocks, C-contiguous and unconjugated: the storage
        itself, or for a transposed view its transpose, formed once and kept in the cache (as
        large as the storage). Kernels that stream whole block rows read this."""
        tiles, cache = self.storage.state
        if not self.transposed:
            return tiles
        S = cache.get("row major")
        if S is None:
            S = cache["row major"] = self.xp.ascontiguousarray(tiles.swapaxes(-1, -2))
        return S

    def csr(self):
        """The matrix in CSR format (``scipy.sparse`` or ``cupyx.scipy.sparse``, shape
        ``(M, N)``), formed once and kept in the cache: it holds the ``nnz`` values plus their
        column indices, a small multiple of the factor's own storage, so it is always kept."""
        key = ("csr", self.transposed, self.conjugated)
        tiles, cache = self.storage.state
        S = cache.get(key)
        if S is None:
            S = cache[key] = tocsr(self.oriented(tiles), self.xp)
        return S


def _block_dense(blocks, pattern, xp) -> Factor:
    """:meth:`Factor.block_dense` of the view whose ``(a, d, b, c)`` blocks are ``blocks``."""
    a, b, c, d = pattern
    # E[i, k, j, l, j'] is row k*d + j, column l*d + j' of diagonal block i: group (i, j)'s
    # (k, l) where j = j' (chosen, not multiplied by the identity: inf * 0 is NaN). CuPy's
    # where has no bfloat16 loop and would return float32, so bfloat16 values are chosen as
    # their 16-bit patterns (zero's is +0.0).
    chosen = blocks.view(numpy.uint16) if arrays.is_bfloat16(blocks.dtype) else blocks
    same_group = xp.eye(d, dtype=bool)[:, None, :]
    E = xp.where(same_group, chosen.transpose(0, 2, 1, 3)[..., None],
                 xp.zeros((), dtype=chosen.dtype))
    if E.dtype != chosen.dtype:         # never hand cuBLAS values it would misread
        raise TypeError(f"the dense diagonal blocks came out {E.dtype}, not {chosen.dtype}")
    E = E.view(blocks.dtype)
    # (NumPy's where follows its operands' order: a transposed view's would not be C order)
    return Factor.of_blocks(xp.ascontiguousarray(E.reshape(a, 1, b * d, c * d)),
                            (a, b * d, c * d, 1))


@dataclasses.dataclass(frozen=True, eq=False)
class FactorChain:
    """The product ``P_out K1 ... KL P_in`` as a :class:`~kscupy.KSChain` hands it below:
    ``factors`` the Factors ``K1 ... KL`` (left to right, as written; applied right to
    left), ``input_permutation`` and ``output_permutation`` gather index arrays or None
    (``P_in x = x[input_permutation]``, ``P_out y = y[output_permutation]``), validated by
    the chain."""
    factors: tuple
    input_permutation: object = None
    output_permutation: object = None
    #: names the permutations (a UUID a chain's copies share), as values_id names values
    permutations_id: str = ""

    def pinned(self) -> "FactorChain":
        """This chain with every factor held to the values stored now (:meth:`Factor.pinned`);
        itself where every factor is held already (a product pins its chain once, then
        plans it)."""
        if all(f.held for f in self.factors):
            return self
        return dataclasses.replace(self, factors=tuple(f.pinned() for f in self.factors))

    @property
    def name(self) -> tuple:
        """What the chain applies, by name: its factors' :attr:`Factor.name` and its
        permutations' ``permutations_id``."""
        return (tuple(f.name for f in self.factors), self.permutations_id)

    @property
    def applied(self) -> tuple:
        """The factors in the order they are applied (``KL`` first)."""
        return self.factors[::-1]

    @property
    def shape(self) -> tuple:
        return (self.factors[0].shape[0], self.factors[-1].shape[1])

    @property
    def xp(self):
        return self.factors[0].xp

    @property
    def dtype(self) -> numpy.dtype:
        return numpy.result_type(*[f.dtype for f in self.factors])
