"""The command line runs end to end (on the CPU here; on the GPU in the gpu suite)."""
import subprocess
import sys

import pytest


def _run(*args):
    return subprocess.run([sys.executable, "-m", "kscupy", *args], capture_output=True,
                          text=True, timeout=300)


def test_info():
    out = _run("info")
    assert out.returncode == 0, out.stderr
    assert "kscupy" in out.stdout and "device:" in out.stdout


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_demo_cpu(dtype):
    out = _run("demo", "--cpu", "--pattern", "2", "8", "4", "3", "--batch", "5",
               "--repeat", "2", "--dtype", dtype)
    assert out.returncode == 0, out.stderr
    lines = [ln.split() for ln in out.stdout.splitlines()]
    rows = [ln for ln in lines if len(ln) >= 4 and ln[1] in ("bsl", "bsf") and ln[-1] == "ms"]
    assert {r[0] for r in rows} == {"auto", "bmm", "einsum", "dense", "sparse"}
    tol = 1e-5 if dtype == "float32" else 1e-12
    assert all(float(r[2]) < tol for r in rows), out.stdout
    assert "status 0" in out.stdout
    fft = out.stdout.split("FFT as KS:")[1]
    assert float(fft.split("rel. error vs float64 FFT")[1].split(";")[0]) < 1e-5


@pytest.mark.gpu
def test_demo_gpu():
    out = _run("demo", "--pattern", "2", "32", "32", "4", "--batch", "300", "--repeat", "3")
    assert out.returncode == 0, out.stderr
    assert "running on cupy" in out.stdout and "kernel" in out.stdout
    assert "status 0" in out.stdout
