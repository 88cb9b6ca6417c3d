"""The tuning cache: the autotuner's winners, kept on disk between processes.

A JSON file, ``$KSCUPY_CACHE_DIR/tuning.json`` (default ``~/.cache/kscupy/tuning.json``,
or under ``$XDG_CACHE_HOME``; never inside the installed package), of
``key -> {"backend": ..., "config": [...] | None, "seconds": {...}}``, keyed by GPU name,
CUDA runtime version and problem (layout, dtype, pattern, transposition, batch-size
bucket). :mod:`.tuner` writes it; :mod:`.decide` reads it before the cost model.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from ..core.device import DeviceFacts
from ..core.problem import Problem
from . import registry
from .registry import Choice

__all__ = ["path", "key", "get", "timings", "put", "remove"]


def path() -> Path:
    """Where tuning results live (never inside the installed package)."""
    root = os.environ.get("KSCUPY_CACHE_DIR")
    if root:
        return Path(root) / "tuning.json"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kscupy" / "tuning.json"


def key(problem: Problem, device: DeviceFacts) -> str:
    """A problem's key in the file."""
    return f"{device.name}|cuda{device.cuda_runtime}|{problem.key()}"


class _File:
    """One tuning file, read once and written atomically."""

    def __init__(self, where: Path):
        self.path = where
        self._lock = threading.Lock()
        try:
            self._entries = json.loads(where.read_text())
            if not isinstance(self._entries, dict):
                self._entries = {}
        except (OSError, ValueError):
            self._entries = {}

    def get(self, name: str) -> Choice | None:
        entry = self._entries.get(name)
        if not entry:
            return None
        try:
            config_type = registry.get(entry["backend"]).config_type
            config = config_type(*entry["config"]) if entry.get("config") else None
            return Choice(entry["backend"], config)
        except (KeyError, TypeError, ValueError):
            return None   # an entry from another version: ignore it

    def timings(self, name: str):
        entry = self._entries.get(name)
        return dict(entry["seconds"]) if entry and "seconds" in entry else None

    def put(self, name: str, choice: Choice, seconds: dict):
        with self._lock:
            self._entries[name] = {
                "backend": choice.backend,
                "config": list(choice.config.as_tuple()) if choice.config else None,
                "seconds": seconds}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self._entries, indent=1, sort_keys=True))
            tmp.replace(self.path)    # atomic: a concurrent reader sees the old or new file


_FILES: dict = {}


def _file() -> _File:
    where = path()
    if where not in _FILES:
        _FILES[where] = _File(where)
    return _FILES[where]


def get(problem: Problem, device: DeviceFacts) -> Choice | None:
    """The tuned choice for ``problem`` on ``device``, or None."""
    return _file().get(key(problem, device))


def timings(problem: Problem, device: DeviceFacts) -> dict | None:
    """The median seconds of every candidate :func:`kscupy.tune` timed for ``problem`` on
    ``device``, by label, or None."""
    return _file().timings(key(problem, device))


def put(problem: Problem, device: DeviceFacts, choice: Choice, seconds: dict):
    """Keep ``choice`` as the winner for ``problem`` on ``device`` (``seconds``: the median
    time of every candidate timed)."""
    _file().put(key(problem, device), choice, seconds)


def remove():
    """Delete the file (and forget what was read of it)."""
    where = path()
    _FILES.pop(where, None)
    try:
        where.unlink()
    except FileNotFoundError:
        pass
