"""Unit tests of helpers.timing."""

import pytest

from helpers import timing
from helpers.timing import Timing, benchmark


def test_benchmark_calls_warmup_plus_repeats():
    calls = []
    result = benchmark(lambda: calls.append(1), warmup=2, repeats=5)
    assert len(calls) == 7
    assert len(result.times_s) == 5
    assert min(result.times_s) <= result.median_s <= max(result.times_s)


def test_benchmark_synchronizes_around_each_timed_call(monkeypatch):
    events = []
    monkeypatch.setattr(timing, "synchronize", lambda device: events.append(("sync", device)))
    benchmark(lambda: events.append("fn"), device="cuda", warmup=1, repeats=2)
    assert events == ["fn"] + [("sync", "cuda"), "fn", ("sync", "cuda")] * 2


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(repeats=0), ValueError, "repeats must be >= 1"),
    (dict(warmup=-1), ValueError, "warmup must be >= 0"),
    (dict(repeats=2.5), TypeError, "repeats must be an int"),
])
def test_benchmark_rejects_bad_counts(kwargs, error, match):
    with pytest.raises(error, match=match):
        benchmark(lambda: None, **kwargs)


def test_benchmark_rejects_non_callable():
    with pytest.raises(TypeError, match="fn must be a callable"):
        benchmark(3)


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0123, "12.3 ms"), (1.5, "1.50 s"), (0.000042, "42.0 µs"), (0.25, "250 ms"),
])
def test_timing_str(seconds, text):
    assert str(Timing(seconds, (seconds,) * 10)) == f"{text} (median of 10)"
