"""The command line runs end to end (on the CPU here; on the GPU in the gpu suite)."""
import pathlib
import subprocess
import sys

import pytest

from conftest import gpu_available

ROOT = pathlib.Path(__file__).resolve().parent.parent


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


def test_version():
    import kscupy
    out = _run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"kscupy {kscupy.__version__}"


@pytest.mark.parametrize("args, message", [
    (["demo", "--batch", "-1"], "not a positive integer"),
    (["demo", "--batch", "0"], "not a positive integer"),
    (["demo", "--repeat", "0"], "not a positive integer"),
    (["demo", "--batch", "2.5"], "not an integer"),
    (["demo", "--pattern", "2", "0", "4", "3"], "not a positive integer"),
    (["demo", "--dtype", "int8"], "invalid choice"),
    (["warmup", "--dtypes", "float32,float8"], "must be one of"),
    (["warmup", "--layouts", "rows"], "must be one of"),
    (["warmup", "--batches", "1,,-3"], "not a positive integer"),
    (["warmup", "--threads", "0"], "not a positive integer"),
    (["bench", "--count", "0"], "not a positive integer"),
    (["bench", "--sizes", "256,x"], "not an integer"),
    (["bench", "--shift", "nan"], "not a finite number"),
    (["bench", "--dense-limit", "-1"], "not a positive finite number"),
    (["bench", "--heldout-seed", "-5"], "not a non-negative integer"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_get_a_usage_line_and_status_2(args, message):
    out = _run(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "usage:" in out.stderr and message in out.stderr
    assert "Traceback" not in out.stderr and "nan" not in out.stdout


@pytest.mark.gpu
def test_demo_gpu():
    out = _run("demo", "--pattern", "2", "32", "32", "4", "--batch", "300", "--repeat", "3")
    assert out.returncode == 0, out.stderr
    assert "running on cupy" in out.stdout and "kernel" in out.stdout
    assert "status 0" in out.stdout


def test_bench_help_needs_no_gpu():
    out = _run("bench", "--help")
    assert out.returncode == 0, out.stderr
    assert "--quick" in out.stdout and "--out" in out.stdout


@pytest.mark.skipif(gpu_available(), reason="checks the message of a machine without a GPU")
def test_bench_without_gpu_fails_clearly(tmp_path):
    out = _run("bench", "--quick", "--out", str(tmp_path))
    assert out.returncode == 2
    assert "needs a GPU" in out.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("script", ["bench_suite.py", "bench_latency.py"])
def test_benchmark_scripts_parse_help_without_cupy(script):
    # CuPy made unimportable: the scripts must still print their help
    code = (f"import sys, runpy; sys.modules['cupy'] = None; sys.argv = ['{script}', '--help']; "
            f"runpy.run_path('{ROOT / 'benchmarks' / script}', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--out" in out.stdout


def test_bench_plots_committed_results_without_a_gpu(tmp_path):
    """``bench --plot`` reads each suite's results (the suite told by their rows) and draws
    its plots; no GPU needed."""
    pytest.importorskip("matplotlib", reason="the bench extra's matplotlib draws the plots")
    results = ROOT / "benchmarks" / "results"
    out = _run("bench", "--plot", str(results / "chains_h200.json"), str(results / "engine.json"),
               str(results / "patterns_grid_h200.json"),
               str(results / "patterns_batch_sweep_h200.json"), "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert {p.name for p in tmp_path.iterdir()} == {
        "fft_chains.png", "chains_floor.png", "engine_speedups.png", "speedup_vs_h.png",
        "roofline_fraction.png", "batch_sweep.png"}


@pytest.mark.gpu
def test_bench_quick_writes_results_and_plots(tmp_path):
    out = subprocess.run([sys.executable, "-m", "kscupy", "bench", "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr
    names = {p.name for p in tmp_path.iterdir()}
    assert {"grid.json", "chains.json", "fft_chains.png", "speedup_vs_h.png"} <= names


@pytest.mark.skipif(gpu_available(), reason="checks the message of a machine without a GPU")
def test_warmup_without_gpu_fails_clearly():
    out = _run("warmup", "--pattern", "2", "32", "32", "4")
    assert out.returncode == 2 and "needs a GPU" in out.stderr
    with pytest.raises(RuntimeError, match="needs a GPU"):
        __import__("kscupy").warmup([(2, 32, 32, 4)])


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_warmup_rejects_bad_thread_counts(bad):
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        __import__("kscupy").warmup([(2, 32, 32, 4)], threads=bad)


@pytest.mark.gpu
def test_warmup_compiles_what_later_products_use():
    """After warmup, the same products in a fresh process load no new kernel instantiation
    beyond what warmup loaded (they come from the process's own cache)."""
    code = ("import cupy, numpy, kscupy; from kscupy.kernels import nvrtc; "
            "r = kscupy.warmup([(2, 32, 32, 4)], operators=[kscupy.dft(64, dtype=numpy.complex64, "
            "xp=cupy)], dtypes=('float32', 'float64'), batches=(1, 300)); "
            "assert r.products == 3 * 2 * 2 and r.kernels_loaded > 0, r; "
            "before = nvrtc.kernels_loaded(); "
            "K = kscupy.KSMatrix.random((2, 32, 32, 4), dtype=numpy.float64, xp=cupy); "
            "X = cupy.ones((300, 256)); K.matmul(X, layout='bsf'); K @ X[0]; "
            "kscupy.dft(64, dtype=numpy.complex64, xp=cupy) @ cupy.ones(64, numpy.complex64); "
            "assert nvrtc.kernels_loaded() == before")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    cli = _run("warmup", "--pattern", "2", "32", "32", "4", "--dft", "64", "--batches", "1")
    assert cli.returncode == 0 and "products" in cli.stdout, cli.stderr
