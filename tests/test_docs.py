"""The documentation's code runs, and the generated API reference is current."""
import doctest
import importlib
import pathlib
import pkgutil
import re
import runpy
import sys

import pytest

import kscupy

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_readme_example_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


MODULES = sorted(m.name[len("kscupy."):] for m in pkgutil.walk_packages(kscupy.__path__, "kscupy.")
                 if not m.name.endswith("__main__"))
#: Modules whose docstrings must show at least one example.
DOCUMENTED_BY_EXAMPLE = {"core.pattern", "operators.matrix", "operators.chain", "linalg",
                         "core.shuffle", "transforms.factories", "storage", "testing", "dask",
                         "operators.submatrix", "operators.realpart", "transforms.dct",
                         "transforms.factorization"}


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    if module == "dask":
        pytest.importorskip("dask.array", reason="dask is not installed")
    mod = importlib.import_module(f"kscupy.{module}")
    result = doctest.testmod(mod, extraglobs={"ks": kscupy})
    assert result.failed == 0
    if module in DOCUMENTED_BY_EXAMPLE:
        assert result.attempted > 0, f"kscupy.{module} has no docstring example"


def test_every_documented_module_exists():
    assert DOCUMENTED_BY_EXAMPLE <= set(MODULES)


def test_api_reference_is_current():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        render = runpy.run_path(str(ROOT / "docs" / "build_api.py"), run_name="api")["render"]
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / "api.md").read_text() == render(), \
        "docs/api.md is stale: run python3 docs/build_api.py"


@pytest.mark.parametrize("example", sorted((ROOT / "docs" / "examples").glob("*.py")),
                         ids=lambda p: p.name)
def test_examples_run(example, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(example)])      # scripts parse their own arguments
    runpy.run_path(str(example), run_name="__main__")
