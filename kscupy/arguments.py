"""argparse types of kscupy's command lines (``python -m kscupy`` and its ``bench``).

Values are checked where they are parsed, so a bad one ends in argparse's usage line and exit
status 2 rather than in a traceback, or in a run that prints NaN.
"""
from __future__ import annotations

import argparse
import math

__all__ = ["positive_int", "nonnegative_int", "positive_float", "finite_float",
           "positive_int_list", "choice_list"]


def _number(text, kind, name, ok, what):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {name}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (sizes, batch sizes, repetitions)."""
    return _number(text, int, "an integer", lambda v: v >= 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    """An integer >= 0 (seeds)."""
    return _number(text, int, "an integer", lambda v: v >= 0, "a non-negative integer")


def positive_float(text: str) -> float:
    """A finite number > 0 (limits in GiB, FLOP, bytes)."""
    return _number(text, float, "a number", lambda v: math.isfinite(v) and v > 0,
                   "a positive finite number")


def finite_float(text: str) -> float:
    """A finite number (offsets)."""
    return _number(text, float, "a number", math.isfinite, "a finite number")


def positive_int_list(text: str) -> list:
    """Comma-separated integers >= 1, at least one (``"1,64,4096"``)."""
    values = [positive_int(part) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} holds no positive integers")
    return values


def choice_list(choices):
    """The type of comma-separated values, each one of ``choices`` (at least one)."""
    def parse(text: str) -> list:
        values = [part.strip() for part in text.split(",") if part.strip()]
        wrong = [v for v in values if v not in choices]
        if wrong or not values:
            raise argparse.ArgumentTypeError(
                f"{text!r}: each comma-separated value must be one of {', '.join(choices)}")
        return values
    return parse
