"""Write docs/api.md from the docstrings of kscupy's public API: python3 docs/build_api.py"""
import inspect
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import kscupy  # noqa: E402


def _signature(obj):
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    # default arguments such as xp=numpy print with their install path: keep the name only
    return re.sub(r"<module '([\w.]+)' from '[^']*'>", r"\1", sig)


def _section(name, obj, level="##"):
    doc = inspect.getdoc(obj) or "(undocumented)"
    kind = "class" if inspect.isclass(obj) else "function"
    lines = [f"{level} `kscupy.{name}{_signature(obj) if kind == 'function' else ''}`", "",
             "```text", doc, "```", ""]
    if inspect.isclass(obj):
        for attr, member in sorted(vars(obj).items()):
            if attr.startswith("_") and attr not in ("__matmul__", "__rmatmul__"):
                continue
            target = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            if isinstance(member, property):
                target = member.fget
            if not callable(target) or not inspect.getdoc(target):
                continue
            sig = "" if isinstance(member, property) else _signature(target)
            lines += [f"### `{name}.{attr}{sig}`", "", "```text", inspect.getdoc(target), "```", ""]
    return lines


def render() -> str:
    out = ["# API reference", "",
           "Generated from the docstrings by `python3 docs/build_api.py`; do not edit by hand.", ""]
    for name in kscupy.__all__:
        obj = getattr(kscupy, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            out += _section(name, obj)
        elif inspect.ismodule(obj):      # a public submodule: its functions
            for attr in obj.__all__:
                out += _section(f"{name}.{attr}", getattr(obj, attr))
    return "\n".join(out)


if __name__ == "__main__":
    (ROOT / "docs" / "api.md").write_text(render())
