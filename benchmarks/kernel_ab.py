"""Same-process A/B timing of a kernel change: compile another version of a ``kernels_cu``
file in place of this checkout's, so that both versions of a kernel run on one GPU in one
process (timings across machines and processes differ by 3-10%, more than many changes
gain). Used by the development probes (``probe_mma.py``, ``probe_cluster.py``).
"""
from __future__ import annotations

import contextlib
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def kernel_file(swapped, path):
    """Within the block, kernels compiled from ``kernels_cu/<swapped>`` are compiled from
    ``path`` instead (an absolute path to another version of the file: its includes still
    resolve in kernels_cu, so the launch, shared-memory size included, stays this
    checkout's); ``None`` leaves it alone. Kernels already loaded from one version stay
    loaded: NVRTC's cache keys on the file name."""
    from kscupy.kernels import nvrtc
    compile_function = nvrtc.function
    if path is not None:
        def function(filename, *args, **kwargs):    # nvrtc.function's signature
            return compile_function(str(path) if filename == swapped else filename,
                                    *args, **kwargs)
        nvrtc.function = function
    try:
        yield
    finally:
        nvrtc.function = compile_function


def file_as_of(filename, spec):
    """The path of another ``kernels_cu/filename``: ``spec`` itself where it names a file,
    else the file as of git revision ``spec``, written to a temporary file (on the lent GPU
    machines the checkout's history may lag behind its working tree, so a file is the safer
    baseline there)."""
    if pathlib.Path(spec).is_file():
        return pathlib.Path(spec).resolve()
    text = subprocess.run(["git", "show", f"{spec}:kernels_cu/{filename}"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout
    path = pathlib.Path(tempfile.mkdtemp()) / f"baseline_{filename}"
    path.write_text(text)
    return path
