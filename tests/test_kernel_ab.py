"""benchmarks/kernel_ab.py: the A/B probes' swap of a kernel file (no GPU)."""
import pathlib
import shutil
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import kernel_ab  # noqa: E402
from kscupy.kernels import nvrtc  # noqa: E402


def test_kernel_file_swaps_one_file_within_the_block(monkeypatch, tmp_path):
    asked = []
    monkeypatch.setattr(nvrtc, "function", lambda filename, name, *args: asked.append(filename))
    other = tmp_path / "ks_rows.cu"
    with kernel_ab.kernel_file("ks_rows.cu", other):
        nvrtc.function("ks_rows.cu", "ks::ks_rows<...>", 0)
        nvrtc.function("ks_mma.cu", "ks::ks_mma<...>", 0)
    nvrtc.function("ks_rows.cu", "ks::ks_rows<...>", 0)
    assert asked == [str(other), "ks_mma.cu", "ks_rows.cu"]


def test_no_path_leaves_the_file_alone(monkeypatch):
    asked = []
    monkeypatch.setattr(nvrtc, "function", lambda filename, name, *args: asked.append(filename))
    with kernel_ab.kernel_file("ks_rows.cu", None):
        nvrtc.function("ks_rows.cu", "ks::ks_rows<...>", 0)
    assert asked == ["ks_rows.cu"]


@pytest.mark.skipif(not (kernel_ab.ROOT / ".git").exists() or shutil.which("git") is None,
                    reason="needs the git checkout (a revision of the file)")
def test_file_as_of_takes_a_file_or_a_revision(tmp_path):
    mine = tmp_path / "mine.cu"
    mine.write_text("// a version")
    assert kernel_ab.file_as_of("ks_rows.cu", str(mine)) == mine.resolve()
    head = kernel_ab.file_as_of("ks_rows.cu", "HEAD")     # a copy, outside the checkout
    assert kernel_ab.ROOT not in head.parents and "ks_rows" in head.read_text()
