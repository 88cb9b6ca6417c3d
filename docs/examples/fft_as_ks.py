"""The DFT as a chain of Kronecker-sparse factors, checked against numpy.fft / cupy.fft.

    python3 docs/examples/fft_as_ks.py
"""
import numpy

import kscupy as ks

cupy, _ = ks.gpu_module()
xp = cupy if cupy is not None else numpy

n = 360                                    # mixed radix: 2 * 2 * 2 * 3 * 3 * 5
F = ks.dft(n, dtype=numpy.complex128, xp=xp)
print(F)
for i, p in enumerate(F.patterns):
    print(f"  factor {i + 1}: pattern {tuple(p)}, {p.nnz} non-zeros (dense: {n * n})")

rng = numpy.random.default_rng(0)
X = xp.asarray(rng.standard_normal((n, 8)) + 1j * rng.standard_normal((n, 8)))
Y = F @ X                                   # columns transformed: fft along axis 0
expected = xp.fft.fft(X, axis=0)
err = float(xp.linalg.norm(Y - expected) / xp.linalg.norm(expected))
print(f"F @ X vs fft(X, axis=0): relative error {err:.1e}")
assert err < 1e-12

Xr = xp.ascontiguousarray(X.T)              # rows transformed: fft along the last axis
expected = xp.fft.fft(Xr, axis=-1)
err = float(xp.linalg.norm(Xr @ F.T - expected) / xp.linalg.norm(expected))
print(f"X @ F.T vs fft(X, axis=-1): relative error {err:.1e}")
assert err < 1e-12

# the inverse and the orthonormal pair
Fo, Fi = ks.dft(n, norm="ortho", xp=xp), ks.idft(n, norm="ortho", xp=xp)
err = float(xp.linalg.norm(Fi @ (Fo @ X) - X) / xp.linalg.norm(X))
print(f"idft(dft(X)) with norm='ortho': relative error {err:.1e}")
assert err < 1e-12
