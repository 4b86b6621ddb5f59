"""A benchmark that warms up, synchronises the device and reports the median time."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from helpers import validate
from helpers.device import synchronize


def _format_seconds(seconds: float) -> str:
    unit, scale = next(
        ((unit, scale) for unit, scale in (("s", 1.0), ("ms", 1e-3)) if seconds >= scale),
        ("µs", 1e-6),
    )
    value = seconds / scale
    digits = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:.{digits}f} {unit}"


@dataclass(frozen=True)
class Timing:
    """Wall-clock times of repeated calls, in seconds."""

    median_s: float
    times_s: tuple[float, ...]

    def __str__(self) -> str:
        return f"{_format_seconds(self.median_s)} (median of {len(self.times_s)})"


def benchmark(fn: Callable[[], object], device: torch.device | str = "cpu", warmup: int = 3,
              repeats: int = 10) -> Timing:
    """Time fn() `repeats` times after `warmup` untimed calls; returns the median in seconds."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    validate.int_at_least(warmup, "warmup", 0)
    validate.int_at_least(repeats, "repeats", 1)
    # Warm-up absorbs one-off costs (allocator growth, kernel selection, lazy initialisation).
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        # Kernels run asynchronously on a GPU: without syncing, the clock measures launches only.
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return Timing(median_s=statistics.median(times), times_s=tuple(times))
