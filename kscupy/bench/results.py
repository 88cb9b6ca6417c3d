"""Reading the suites' JSON result files back (``bench --plot``, ``bench --append``).

A results file is a JSON object with the rows a suite measured: ``rows`` (every suite) and
``batch_sweep`` (the sweep suite), lists of objects. :func:`read_results` refuses anything
else with a :class:`~kscupy.arguments.UsageError` that names the option and the file, so the
command line reports it on one line instead of failing in a plot, or plotting nothing.
"""
from __future__ import annotations

import json
import pathlib

from ..arguments import UsageError

__all__ = ["read_results", "ROW_LISTS"]

#: The entries of a results file that hold rows.
ROW_LISTS = ("rows", "batch_sweep")


def _load(path, option):
    """The JSON value of the file ``path``, or UsageError saying why there is none."""
    try:
        text = pathlib.Path(path).read_text()
    except IsADirectoryError:
        raise UsageError(f"{option} {path}: is a folder, not a results file") from None
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{option} {path}: not a JSON file (not UTF-8 text)") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{option} {path}: not a JSON file ({exc})") from None


def read_results(path, option="--plot") -> dict:
    """The results object of the file ``path``: a JSON object whose ``rows`` and
    ``batch_sweep`` (where present) are lists of objects, at least one row among them.
    ``option`` names the option that gave the file in the UsageError raised otherwise."""
    result = _load(path, option)
    if not isinstance(result, dict):
        raise UsageError(f"{option} {path}: holds a JSON {type(result).__name__}, not the "
                         f"object of a kscupy bench results file")
    for key in ROW_LISTS:
        rows = result.get(key, [])
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise UsageError(f"{option} {path}: its {key!r} is not a list of result rows")
    if not any(result.get(key) for key in ROW_LISTS):
        names = " or ".join(map(repr, ROW_LISTS))
        raise UsageError(f"{option} {path}: holds no benchmark results (no {names} rows)")
    return result
