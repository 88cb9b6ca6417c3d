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


def _has_examples(module):
    """Whether a docstring of the module holds an example doctest runs (not all +SKIP)."""
    tests = doctest.DocTestFinder().find(importlib.import_module(f"kscupy.{module}"))
    return any(not example.options.get(doctest.SKIP)
               for test in tests for example in test.examples)


#: Modules whose docstrings hold examples that run: every one must run some (a module
#: without any has nothing to run, and is left out rather than passed with nothing attempted).
WITH_EXAMPLES = [m for m in MODULES if _has_examples(m)]
#: Modules whose docstrings must show at least one example.
DOCUMENTED_BY_EXAMPLE = {"core.pattern", "operators.matrix", "operators.chain", "linalg",
                         "core.shuffle", "transforms.factories", "storage", "testing", "dask",
                         "operators.submatrix", "operators.realpart", "transforms.dct",
                         "transforms.factorization"}


@pytest.mark.parametrize("module", WITH_EXAMPLES)
def test_docstring_examples(module):
    if module == "dask":
        pytest.importorskip("dask.array", reason="dask is not installed")
    mod = importlib.import_module(f"kscupy.{module}")
    result = doctest.testmod(mod, extraglobs={"ks": kscupy})
    assert result.failed == 0
    assert result.attempted > 0, f"kscupy.{module} shows >>> but doctest found no example"


def test_every_documented_module_has_examples():
    assert DOCUMENTED_BY_EXAMPLE <= set(WITH_EXAMPLES), \
        sorted(DOCUMENTED_BY_EXAMPLE - set(WITH_EXAMPLES))


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
