"""Unit tests of helpers.fakes."""

import pytest

from helpers.fakes import FakeMachine


def test_clock_advances_only_with_steps():
    machine = FakeMachine([0.01, 0.02], [0.005], first_call_extra_s=1.0)
    machine.step_a()                      # warm-up, before any clock read
    machine.sync()
    start = machine.clock()
    machine.step_a()
    machine.step_b()
    machine.sync()
    assert machine.clock() - start == pytest.approx(0.02 + 1.005)
    assert machine.events == ["A", "sync", "clock", "A", "B", "sync", "clock"]
    assert machine.warmup_steps() == ["A"] and machine.timed_steps() == ["A", "B"]
    assert machine.unsynced_clock_reads() == 0


def test_last_duration_repeats_and_drift_grows():
    machine = FakeMachine([1.0], [1.0], drift_per_call=0.5)
    machine.step_a()
    machine.step_a()
    assert machine.now == pytest.approx(1.0 + 1.5)


def test_unsynced_reads_are_counted():
    machine = FakeMachine([1.0], [1.0])
    machine.clock()
    machine.step_b()
    machine.clock()
    assert machine.unsynced_clock_reads() == 2


def test_bad_durations():
    with pytest.raises(ValueError, match="at least one duration"):
        FakeMachine([], [1.0])
    with pytest.raises(ValueError, match="positive"):
        FakeMachine([0.0], [1.0])
