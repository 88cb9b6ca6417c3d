"""argparse types of kscupy's command lines (``python -m kscupy`` and its ``bench``).

Values are checked where they are parsed, so a bad one ends in argparse's usage line and exit
status 2 rather than in a traceback, or in a run that prints NaN. What only a combination of
values makes impossible (a demo too large for the memory, a suite that would run nothing)
is found before anything runs and raised as :class:`UsageError`, which the command lines
report the same way.
"""
from __future__ import annotations

import argparse
import math
import sys

__all__ = ["UsageError", "out_of_memory", "positive_int", "nonnegative_int", "power_of_two",
           "positive_float", "fraction", "checked", "listed", "positive_int_list",
           "power_of_two_list", "choice_list"]


class UsageError(Exception):
    """A request the command line refuses before running it; the message names the option
    and what is wrong (reported as argparse reports a bad value: usage line, exit status 2)."""


def out_of_memory(prog: str, exc: MemoryError) -> int:
    """Report a MemoryError that a run hit despite the checks made before it, on one line of
    stderr; the exit status 1 of a run that failed."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"{prog}: error: out of memory: {message}", file=sys.stderr)
    return 1


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


def power_of_two(text: str) -> int:
    """An integer 2**k, k >= 0 (the sizes of Hadamard matrices and dyadic butterflies)."""
    return _number(text, int, "an integer", lambda v: v >= 1 and not v & (v - 1),
                   "a power of two")


def positive_float(text: str) -> float:
    """A finite number > 0 (limits in GiB, FLOP, bytes)."""
    return _number(text, float, "a number", lambda v: math.isfinite(v) and v > 0,
                   "a positive finite number")


def fraction(text: str) -> float:
    """A number in [0, 1) (the shift of a stratified sample, a fraction of its spacing)."""
    return _number(text, float, "a number", lambda v: 0 <= v < 1, "a number in [0, 1)")


def checked(kind, check):
    """The type ``kind`` narrowed to the values that ``check(value)`` accepts: a library's own
    check, whose ValueError message is the one argparse reports."""
    def parse(text: str):
        value = kind(text)
        try:
            check(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value
    return parse


def listed(kind, what: str):
    """The type of comma-separated values of the type ``kind``, at least one (``what``: their
    name in the message)."""
    def parse(text: str) -> list:
        values = [kind(part) for part in text.split(",") if part.strip()]
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r} holds no {what}")
        return values
    return parse


#: Comma-separated integers >= 1, at least one (``"1,64,4096"``).
positive_int_list = listed(positive_int, "positive integers")
#: Comma-separated powers of two, at least one (``"256,1024"``).
power_of_two_list = listed(power_of_two, "powers of two")


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
