"""The path of the operand through a first ``K @ X`` and a first ``C @ X``: which kscupy
modules it enters, and how often.

    PYTHONPATH=$PWD python3 benchmarks/trace_path.py [--cpu]

A first product of a fresh KSMatrix and of a fresh KSChain (a DFT) is traced with
``sys.setprofile``. The path of ``X`` is the calls that receive ``X`` itself or an array
of its batch made from it on the way (converted, viewed, transposed, an intermediate of a
chain). An entry of a module is a place on that path where code of another module calls
into it: a calling function, counted once however often the path passes there and whatever
it calls in the module (a chain's loop over its factors passes the same place once a
factor, calling each factor's backend).
Prints, per product, the modules in the order first entered and the number of entries of
each. On the GPU (background compiles off, so the product runs the kernel auto chooses)
unless ``--cpu``.
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import sys

import numpy

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PACKAGE = str(ROOT / "kscupy")


def _module(filename: str):
    if not filename.startswith(PACKAGE):
        return None
    return filename[len(PACKAGE) + 1:].removesuffix(".py").replace("/", ".")


def trace(product, X):
    """``{module: set of entries}`` (in first-entered order) of ``product(X)``'s path of
    X."""
    xp = type(X)
    batch = X.shape[1] if X.ndim == 2 else 1
    carried = {id(X)}
    entries = collections.OrderedDict()

    def carries(value):
        if id(value) in carried:
            return True
        if isinstance(value, xp) and value.ndim == 2 and batch in value.shape:
            carried.add(id(value))     # an array of the batch made on the way
            return True
        return False

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _module(frame.f_code.co_filename)
        caller = _module(frame.f_back.f_code.co_filename) if frame.f_back else None
        if callee is None or callee == caller:
            return
        values = [frame.f_locals.get(name) for name in
                  frame.f_code.co_varnames[:frame.f_code.co_argcount]]
        if any(carries(v) for v in values):
            entries.setdefault(callee, set()).add(frame.f_back.f_code)
    sys.setprofile(profile)
    try:
        product(X)
    finally:
        sys.setprofile(None)
    return entries


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="NumPy operands on the CPU")
    args = parser.parse_args()
    import kscupy as ks
    if args.cpu:
        xp = numpy
    else:
        import cupy as xp
        from kscupy.kernels import nvrtc
        nvrtc.BACKGROUND = False
    rng = numpy.random.default_rng(0)
    K = ks.KSMatrix.random((4, 64, 64, 8), dtype=numpy.float32, xp=xp, seed=0)
    C = ks.dft(1024, dtype=numpy.complex64, xp=xp)
    X = xp.asarray(rng.standard_normal((K.shape[1], 4096)).astype(numpy.float32))
    Z = xp.asarray(rng.standard_normal((1024, 4096)).astype(numpy.complex64))
    for label, product, operand in (("K @ X", lambda x: K @ x, X), ("C @ X", lambda x: C @ x, Z)):
        entries = trace(product, operand)
        counts = {m: len(e) for m, e in entries.items()}
        print(f"{label} ({xp.__name__}): {len(counts)} modules, at most "
              f"{max(counts.values())} entries each")
        print("  " + ", ".join(f"{m} {n}" for m, n in counts.items()))


if __name__ == "__main__":
    main()
