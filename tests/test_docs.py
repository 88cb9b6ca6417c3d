"""The documentation's code runs, and the generated API reference is current."""
import doctest
import pathlib
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


@pytest.mark.parametrize("module", ["pattern", "matrix", "linalg", "shuffle"])
def test_docstring_examples(module):
    mod = sys.modules[f"kscupy.{module}"]
    result = doctest.testmod(mod, extraglobs={"ks": kscupy})
    assert result.failed == 0


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
