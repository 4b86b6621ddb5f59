"""Argument checks shared by the helpers: a clear error instead of a silent wrong answer."""

from __future__ import annotations


def _int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return value


def positive_int(value, name: str) -> int:
    """Return `value` if it is an int > 0 (not a bool); else TypeError or ValueError naming `name`."""
    if _int(value, name) <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def int_at_least(value, name: str, minimum: int) -> int:
    """Return `value` if it is an int >= minimum (not a bool); else TypeError or ValueError."""
    if _int(value, name) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def seed(value) -> int:
    """Return `value` if it is an int usable as a seed (not a bool); else TypeError."""
    return _int(value, "seed")
