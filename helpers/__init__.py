"""Shared helpers for the efficient-training course: devices, data, models, checkers, plots."""

__version__ = "0.1.0"
