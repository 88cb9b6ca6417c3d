"""The cost model's fitted constants, loaded from the data files beside this module.

``gpu.json`` holds the GPU model's constants for every device; ``gpu-<word>.json`` those of
the devices whose name contains ``<word>`` (``"match"``), in place of gpu.json's. Each
constant is ``[value, source]``, and each file's ``"sources"`` says on which device, when
and with which command its constants were measured and fitted (``benchmarks/fit_costs.py``
refits them). ``cpu.json`` holds the CPU model's, fitted by
``benchmarks/fit_cpu_costs.py``. The formulas that use them, and why each term is there,
are in :mod:`.gpu` and :mod:`.cpu`.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

__all__ = ["GpuConstants", "gpu", "cpu", "files_for", "DATA"]

#: The folder of the data files.
DATA = Path(__file__).resolve().parent


def _read(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@dataclasses.dataclass(frozen=True)
class GpuConstants:
    """The GPU model's constants for one device: ``single[(algorithm, variant)]`` the
    single-factor model's ``(bytes_factor, efficiency, m0)``; ``model[name]`` the others
    (see gpu.json); ``sources[key]``: the source of each, ``key`` a single-factor key or
    a name of ``model``."""
    single: dict
    model: dict
    sources: dict

    def __getattr__(self, name):
        # the model's scalar constants read as attributes (C.launch_seconds)
        try:
            return self.__dict__["model"][name]
        except KeyError:
            raise AttributeError(name) from None


def _single_key(text: str) -> tuple:
    algorithm, variant = text.split("/")
    return algorithm, variant


def _number_keys(value):
    """JSON object keys that are numbers (itemsizes, stage kinds) back to ints."""
    if isinstance(value, dict) and value and all(k.isdigit() for k in value):
        return {int(k): v for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=None)
def _files() -> tuple:
    base = _read("gpu.json")
    devices = [_read(path.name) for path in sorted(DATA.glob("gpu-*.json"))]
    return base, tuple(devices)


@functools.lru_cache(maxsize=None)
def gpu(device_name: str) -> GpuConstants:
    """The GPU model's constants for the device named ``device_name``: gpu.json's, each
    replaced by that of a device file whose ``"match"`` word is in the name."""
    base, devices = _files()
    single, model, sources = {}, {}, {}
    for doc in (base,) + tuple(d for d in devices if d["match"] in device_name):
        for key, (value, source) in doc.get("single", {}).items():
            single[_single_key(key)] = tuple(value)
            sources[_single_key(key)] = doc["sources"][source]
        for name, (value, source) in doc.get("model", {}).items():
            model[name] = _number_keys(value)
            sources[name] = doc["sources"][source]
    return GpuConstants(single, model, sources)


def files_for(device_name: str) -> list:
    """The data files whose constants price the device named ``device_name``: gpu.json, then
    each device file whose ``"match"`` word is in the name (an unknown device: gpu.json
    alone, its constants applied to the device's own rates)."""
    _, devices = _files()
    names = sorted(path.name for path in DATA.glob("gpu-*.json"))
    return ["gpu.json"] + [name for name, doc in zip(names, devices)
                           if doc["match"] in device_name]


@functools.lru_cache(maxsize=None)
def fitted_on(device_name: str) -> bool:
    """Whether a device file's constants price the device named ``device_name`` (they were
    fitted on a device of that name), rather than gpu.json's alone on its own rates."""
    return len(files_for(device_name)) > 1


@functools.lru_cache(maxsize=None)
def cpu() -> dict:
    """The CPU model's file (``"terms"`` keyed by ``(algorithm, regime)``)."""
    doc = _read("cpu.json")
    doc["terms"] = {_single_key(key): terms for key, terms in doc["terms"].items()}
    return doc
