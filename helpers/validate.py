"""Argument checks shared by the helpers: a clear error instead of a silent wrong answer."""

from __future__ import annotations


def positive_int(value, name: str) -> int:
    """Return `value` if it is an int > 0 (not a bool); else TypeError or ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def seed(value) -> int:
    """Return `value` if it is an int usable as a seed (not a bool); else TypeError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"seed must be an int, got {type(value).__name__}")
    return value
