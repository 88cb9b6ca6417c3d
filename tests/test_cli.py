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
    (["bench", "--count", "-1"], "not a non-negative integer"),
    (["bench", "--sizes", "256,x"], "not an integer"),
    (["bench", "--shift", "nan"], "not a number in [0, 1)"),
    (["demo", "--cpu", "--pattern", "1024", "2", "2", "1024", "--batch", "1"], "bytes"),
    (["warmup"], "give at least one --pattern or --dft"),
    (["bench", "--hadamard", "100"], "not a power of two"),
    (["bench", "--dense-limit", "-1"], "not a positive finite number"),
    (["bench", "--heldout-seed", "-5"], "not a non-negative integer"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_get_a_usage_line_and_status_2(args, message):
    out = _run(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "usage:" in out.stderr and message in out.stderr
    assert "Traceback" not in out.stderr and "nan" not in out.stdout


def _main(capsys, *args):
    """(exit status, stdout, stderr) of ``python -m kscupy args`` run in this process."""
    from kscupy.__main__ import main
    try:
        status = main(list(args))
    except SystemExit as exc:
        status = exc.code
    out = capsys.readouterr()
    return status, out.out, out.err


def _assert_refused(status, err, *messages):
    """Exit status 2 with argparse's usage line and one error line that says ``messages``."""
    lines = err.strip().splitlines()
    assert status == 2, err
    assert lines[0].startswith("usage:") and "Traceback" not in err
    assert lines[-1].startswith("python -m kscupy") and ": error: " in lines[-1]
    assert all(m in lines[-1] for m in messages), err


@pytest.mark.parametrize("args, message", [
    (["--layouts", "foo"], "argument --layouts: 'foo': each comma-separated value must be one of bsl, bsf"),
    (["--dtypes", "int8"], "argument --dtypes: 'int8'"),
    (["--dtypes", "bfloat16"], "argument --dtypes: 'bfloat16'"),   # the interop suite's rows
    (["--precisions", "x"], "argument --precisions: 'x'"),
    (["--samples", "bogus"], "argument --samples: 'bogus'"),
    (["--parts", "bogus"], "argument --parts: 'bogus'"),
    (["--parts", ","], "argument --parts"),
    (["--hadamard", "100"], "argument --hadamard: '100' is not a power of two"),
    (["--hadamard", "0"], "argument --hadamard: '0' is not a power of two"),
    (["--butterfly", "3"], "argument --butterfly: '3' is not a power of two"),
    (["--butterfly", "256,x"], "argument --butterfly: 'x' is not an integer"),
    (["--sizes", "97"], "argument --sizes: dft(97) is not a KS chain: its prime factor 97"),
    (["--monarch", "-4"], "argument --monarch: '-4' is not a positive integer"),
    (["--elements", "0"], "argument --elements"),
    (["--chain-batch", "1e3"], "argument --chain-batch: '1e3' is not an integer"),
    (["--shift", "1"], "argument --shift: '1' is not a number in [0, 1)"),
    (["--shift", "-0.5"], "argument --shift"),
    (["--io-limit", "inf"], "argument --io-limit"),
    (["--csr-limit", "0"], "argument --csr-limit"),
    (["--dense-flops", "x"], "argument --dense-flops"),
    (["--suite", "everything"], "argument --suite: invalid choice"),
])
def test_bench_options_are_checked_at_parse_time(capsys, args, message):
    """Values outside the suites' own tables (layouts, dtypes with a batch size, precisions,
    samples, parts) or that their factories refuse (Hadamard and butterfly sizes not powers
    of two, DFT sizes without a KS chain) end at parse time, before the GPU is looked for."""
    status, out, err = _main(capsys, "bench", *args)
    _assert_refused(status, err, message)
    assert out == ""


def test_bench_options_take_every_value_of_the_code_tables():
    """Every value the suites' tables hold parses, into the lists the suites iterate, and
    --quick's sample has the types that parsing gives."""
    from kscupy.bench import chains, cli, engine
    from kscupy.operators.base import LAYOUTS
    parser = cli.parser()
    args = parser.parse_args(["--layouts", ",".join(LAYOUTS), "--dtypes", ",".join(engine.BATCH),
                              "--precisions", ",".join(engine.KSCUPY), "--samples",
                              ",".join(engine.SAMPLES), "--parts", ",".join(chains.PARTS),
                              "--hadamard", "1,2,8192", "--butterfly", "4096", "--sizes", "96,1000"])
    assert args.layouts == list(LAYOUTS) and args.dtypes == list(engine.BATCH)
    assert args.precisions == list(engine.KSCUPY) and args.samples == list(engine.SAMPLES)
    assert args.parts == list(chains.PARTS) and args.hadamard == [1, 2, 8192]
    assert args.butterfly == [4096] and args.sizes == [96, 1000]
    defaults = parser.parse_args([])
    for name, value in cli.QUICK.items():
        assert type(value) is type(getattr(defaults, name)), name


@pytest.mark.parametrize("args", [
    ["--pattern", "100000", "1000", "1000", "100000"],
    ["--pattern", "1024", "2", "2", "1024", "--batch", "1"],      # a 64 TiB dense oracle
    ["--batch", "100000000"],
    ["--batch", "99999999999999999999999"],
])
def test_demo_too_large_is_refused_before_allocating(capsys, args):
    status, out, err = _main(capsys, "demo", "--cpu", *args)
    _assert_refused(status, err, f"{args[0]} {' '.join(args[1:])}", "the demo needs about",
                    "bytes", "of host memory", "are available")
    assert out == ""            # refused before the demo printed (or allocated) anything


def test_demo_is_refused_beyond_the_memory_available(capsys, monkeypatch):
    """The demo's check weighs its buffers against the memory available now: a default demo
    is refused where 1 MB is left, and its message gives the bytes needed and available."""
    from kscupy.core import memory
    monkeypatch.setattr(memory, "available_bytes", lambda xp: 10**6)
    status, out, err = _main(capsys, "demo", "--cpu")
    _assert_refused(status, err, "--pattern 4 64 64 8 --batch 1024 --dtype float32",
                    "but only 1,000,000 bytes")
    assert out == ""


def test_demo_out_of_memory_midway_is_one_line(capsys, monkeypatch):
    """A MemoryError the checks did not foresee ends the run with status 1 and one line of
    stderr, not a traceback."""
    import kscupy

    def exhausted(*args, **kwargs):
        raise MemoryError("Unable to allocate 1.0 TiB\nfor an array")
    monkeypatch.setattr(kscupy.KSMatrix, "random", exhausted)
    status, _, err = _main(capsys, "demo", "--cpu", "--pattern", "2", "8", "4", "3")
    assert status == 1 and err.strip().splitlines() == [
        "python -m kscupy demo: error: out of memory: Unable to allocate 1.0 TiB for an array"]


def _write(path, text):
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return path


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("not json", "not a JSON file"),
    (b"\xff\xfe\x00", "not a JSON file"),
    ("[1, 2]", "holds a JSON list"),
    ("3", "holds a JSON int"),
    ("folder", "is a folder, not a results file"),
    ("{}", "holds no benchmark results"),
    ('{"rows": [], "batch_sweep": []}', "holds no benchmark results"),
    ('{"rows": [1, 2]}', "its 'rows' is not a list of result rows"),
    ('{"rows": {"a": 1}}', "its 'rows' is not a list of result rows"),
])
def test_bench_plot_refuses_files_without_results(capsys, tmp_path, content, message):
    """--plot names the file and what is wrong with it, draws nothing and makes no folder."""
    path = tmp_path / "results.json"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        _write(path, content)
    out_dir = tmp_path / "plots"
    status, out, err = _main(capsys, "bench", "--plot", str(path), "--out", str(out_dir))
    _assert_refused(status, err, f"--plot {path}: {message}")
    assert "plots in" not in out and not out_dir.exists()


def test_bench_plot_refuses_rows_no_suite_wrote(capsys, tmp_path):
    pytest.importorskip("matplotlib", reason="the rows are read as the plots draw them")
    path = _write(tmp_path / "other.json", '{"rows": [{"n": 1}]}')
    status, out, err = _main(capsys, "bench", "--plot", str(path), "--out", str(tmp_path))
    _assert_refused(status, err, "not the results of a kscupy bench suite", "'layout'")
    assert "plots in" not in out


def test_bench_plot_needs_a_folder(capsys, tmp_path):
    pytest.importorskip("matplotlib", reason="--plot looks for matplotlib first")
    results = str(ROOT / "benchmarks" / "results" / "engine.json")
    status, _, err = _main(capsys, "bench", "--plot", results, "--out",
                           str(_write(tmp_path / "file", "")))
    _assert_refused(status, err, f"--out {tmp_path / 'file'}: is a file, not a folder")


def test_bench_plot_needs_matplotlib(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib fails
    results = str(ROOT / "benchmarks" / "results" / "engine.json")
    status, _, err = _main(capsys, "bench", "--plot", results, "--out", str(tmp_path / "p"))
    _assert_refused(status, err, "--plot draws with matplotlib, which is not installed")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("args, engine_json, message", [
    (["--suite", "engine", "--dtypes", "float64", "--precisions", "tf32"], None,
     "--precisions tf32 with --dtypes float64: no rows"),
    (["--suite", "engine", "--count", "400"], None, "give --count 313 at most"),
    (["--suite", "sweep", "--io-limit", "1e-9"], None, "the batch sweep would run nothing"),
    (["--suite", "engine", "--append"], "[]", "holds a JSON list"),
    (["--suite", "engine", "--append"], '{"rows": [{"a": 1}]}', "no ceilings recorded"),
    (["--suite", "engine", "--append", "--dtypes", "float16"],
     '{"rows": [{"a": 1}], "ceilings": {"sgemm": 1.0}}', "no float16 ceiling"),
    (["--suite", "engine", "--append"],
     '{"rows": [{"a": 1}], "ceilings": {"sgemm": 1.0}, "commit": "0000000"}',
     "measured at commit 0000000"),
])
def test_bench_requests_that_cannot_run_are_refused_before_running(capsys, tmp_path, args,
                                                                   engine_json, message):
    """Combinations that would run nothing, or fail after the ceilings were measured, end
    with status 2 before the GPU is looked for."""
    if engine_json is not None:
        _write(tmp_path / "engine.json", engine_json)
    status, out, err = _main(capsys, "bench", "--out", str(tmp_path), *args)
    _assert_refused(status, err, message)
    assert out == ""


def test_bench_heldout_sample_takes_up_to_half_the_grid(tmp_path):
    """The held-out sample's bound is the grid's patterns left outside the default sample:
    --count 313 of 627 passes, 314 does not, and without the held-out sample any count does."""
    from kscupy.arguments import UsageError
    from kscupy.bench import cli, engine
    parse = cli.parser().parse_args
    engine.check_arguments(parse(["--count", "313"]), tmp_path / "engine.json")
    engine.check_arguments(parse(["--count", "1000", "--samples", "default"]), tmp_path / "e.json")
    with pytest.raises(UsageError, match="--count 314"):
        engine.check_arguments(parse(["--count", "314"]), tmp_path / "engine.json")


def test_suite_sizes_that_ran_nothing_now_run():
    """--count 1 (a stratified sample of one) and sizes above --elements (at least one row)
    have something to run."""
    from kscupy.bench.chains import rows_of
    from kscupy.bench.grid import paper_grid, stratified_sample
    grid = paper_grid()
    one, middle = stratified_sample(grid, 1), stratified_sample(grid, 1, shift=0.5)
    assert len(one) == len(middle) == 1 and one != middle
    assert rows_of(2**22, 1024) == 4096 and rows_of(100, 1024) == 1


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


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(batches="64"), TypeError, "batches must be a sequence"),
    (dict(batches=5), TypeError, "batches must be a sequence"),
    (dict(batches=(1.5,)), ValueError, "positive integers"),
    (dict(batches=(True,)), ValueError, "positive integers"),
    (dict(patterns=(1, 2, 2, 1)), TypeError, "wrap the single pattern"),
])
def test_warmup_names_bad_arguments(kwargs, error, match):
    args = dict(patterns=[(2, 32, 32, 4)]) | kwargs
    with pytest.raises(error, match=match):
        __import__("kscupy").warmup(args.pop("patterns"), **args)


def test_warmup_takes_one_dtype_or_layout_as_a_string():
    """A string is one dtype or layout, not a sequence of characters: the checks pass and
    only the missing GPU stops it."""
    with pytest.raises(RuntimeError, match="needs a GPU"):
        __import__("kscupy").warmup([(2, 32, 32, 4)], dtypes="float32", layouts="bsl")


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


@pytest.mark.parametrize("command", ["demo", "info", "warmup"])
def test_an_unknown_option_is_named_by_its_subcommands_usage(command):
    out = _run(command, "--bogus")
    assert out.returncode == 2
    assert f"usage: python -m kscupy {command}" in out.stderr
    assert "unrecognized arguments: --bogus" in out.stderr
