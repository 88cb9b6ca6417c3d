"""Compile CUDA source with NVRTC through ctypes, without a GPU (test support).

kscupy compiles its kernels with NVRTC at run time; CI has no GPU, but NVRTC itself needs
none, so the test suite compiles every instantiation the Python side asks for exactly as the
library would (same options, same name expressions) and a syntax or template error fails CI.
The library is looked up in the ``nvidia-cuda-nvrtc-cu12`` wheel (the ``test`` extra), then
on the system.
"""
import ctypes
import ctypes.util
import glob
import os
import re


def _library_path():
    candidates = []
    try:
        import nvidia.cuda_nvrtc as wheel
        for root in wheel.__path__:
            candidates += sorted(glob.glob(os.path.join(root, "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    found = ctypes.util.find_library("nvrtc")
    if found:
        candidates.append(found)
    for pattern in ("/usr/local/cuda*/lib64/libnvrtc.so*", "/usr/local/cuda*/targets/*/lib/libnvrtc.so*"):
        candidates += sorted(glob.glob(pattern))
    candidates = [c for c in candidates if "builtins" not in c and ".alt." not in c]
    return candidates[0] if candidates else None


LIBRARY = _library_path()


def supported_archs() -> tuple:
    """The compute capabilities (``75``, ``80``, ...) this NVRTC compiles for."""
    lib = ctypes.CDLL(LIBRARY)
    count = ctypes.c_int()
    lib.nvrtcGetNumSupportedArchs(ctypes.byref(count))
    archs = (ctypes.c_int * count.value)()
    lib.nvrtcGetSupportedArchs(archs)
    return tuple(archs)


def compile_source(source: str, names, include_dir, arch="compute_90"):
    """Compile ``source`` with the name expressions ``names`` for ``arch`` (``compute_XX``:
    to PTX only; ``sm_XX``: on to machine code, where ptxas rejects instructions the
    architecture lacks); returns ``(ok, log)``. NVRTC releases the GIL (a ctypes call), so
    threads compile in parallel."""
    ok, log, _ = _compile(source, names, include_dir, arch)
    return ok, log


def resource_usage(source: str, names, include_dir, arch="sm_90") -> dict:
    """``{name: (registers, spill store bytes)}`` of each kernel of ``names`` compiled to
    machine code for ``arch`` (``sm_XX``), as ptxas reports them (``--ptxas-options=-v``).
    RuntimeError with NVRTC's log where the source does not compile."""
    ok, log, lowered = _compile(source, names, include_dir, arch, (b"--ptxas-options=-v",))
    if not ok:
        raise RuntimeError(log[-4000:])
    found, kernel = {}, None
    for line in log.splitlines():      # per kernel: "Compiling entry function '<mangled>'",
        entry = re.search(r"Compiling entry function '(\S+)'", line)     # then its figures
        if entry:
            kernel = found.setdefault(lowered.get(entry.group(1)), {})
        for key, pattern in (("spills", r"(\d+) bytes spill stores"),
                             ("registers", r"Used (\d+) registers")):
            figure = re.search(pattern, line)
            if kernel is not None and figure:
                kernel[key] = int(figure.group(1))
    return {name: (figures["registers"], figures.get("spills", 0))
            for name, figures in found.items() if name is not None}


def _compile(source, names, include_dir, arch, extra=()):
    """``(ok, log, {lowered name: name})`` of one NVRTC program."""
    lib = ctypes.CDLL(LIBRARY)
    prog = ctypes.c_void_p()
    status = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kscupy.cu", 0,
                                    None, None)
    if status:
        return False, f"nvrtcCreateProgram failed ({status})", {}
    try:
        for name in names:
            lib.nvrtcAddNameExpression(prog, name.encode())
        options = [b"-std=c++17", f"-I{include_dir}".encode(),
                   f"--gpu-architecture={arch}".encode(), *extra]
        status = lib.nvrtcCompileProgram(prog, len(options), (ctypes.c_char_p * len(options))(*options))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        lowered = {}
        if status == 0:
            for name in names:
                found = ctypes.c_char_p()
                lib.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(found))
                lowered[found.value.decode()] = name
        return status == 0, log.value.decode(errors="replace"), lowered
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
