"""A fake machine for checking timing code without timing anything.

Its clock advances only when one of its steps runs, by a duration the test scripts, and it logs
every step, sync and clock read, so a test can check what a benchmark did (warm-up, interleaving,
synchronisation) and what it computed, exactly and on any machine.
"""

from __future__ import annotations

from collections.abc import Sequence

from helpers.transport import wire


# A check builds the machine and the student's code runs on it in the kernel: it travels there whole.
@wire.carried("_durations", "_calls", "first_call_extra_s", "drift_per_call", "now", "events")
class FakeMachine:
    """Two steps, "A" and "B", with scripted durations; `clock` and `sync` to hand to timing code.

    durations_a / durations_b: seconds per call, used in turn (the last one repeats).
    first_call_extra_s: added to each step's first call, like a cold cache or a lazy init.
    drift_per_call: every call takes (1 + drift_per_call * calls so far) times its duration, like a
    machine that heats up; only interleaving A and B cancels it.
    """

    def __init__(self, durations_a: Sequence[float], durations_b: Sequence[float], *,
                 first_call_extra_s: float = 0.0, drift_per_call: float = 0.0):
        if not durations_a or not durations_b:
            raise ValueError("give at least one duration for each step")
        if min(list(durations_a) + list(durations_b)) <= 0 or first_call_extra_s < 0:
            raise ValueError("durations must be positive and first_call_extra_s >= 0")
        self._durations = {"A": list(durations_a), "B": list(durations_b)}
        self._calls = {"A": 0, "B": 0}
        self.first_call_extra_s = first_call_extra_s
        self.drift_per_call = drift_per_call
        self.now = 0.0
        self.events: list[str] = []

    def _run(self, name: str) -> None:
        calls = self._calls[name]
        scripted = self._durations[name]
        duration = scripted[min(calls, len(scripted) - 1)]
        if calls == 0:
            duration += self.first_call_extra_s
        duration *= 1 + self.drift_per_call * sum(self._calls.values())
        self._calls[name] += 1
        self.events.append(name)
        self.now += duration

    def step_a(self) -> None:
        """Run step A: log it and advance the clock by its scripted duration."""
        self._run("A")

    def step_b(self) -> None:
        """Run step B: log it and advance the clock by its scripted duration."""
        self._run("B")

    def sync(self) -> None:
        """Log a device synchronisation (the fake device has no queue, so it takes no time)."""
        self.events.append("sync")

    def clock(self) -> float:
        """Log a clock read and return the current fake time in seconds."""
        self.events.append("clock")
        return self.now

    def timed_steps(self) -> list[str]:
        """The steps that ran after the first clock read, in order."""
        first = self.events.index("clock") if "clock" in self.events else len(self.events)
        return [e for e in self.events[first:] if e in ("A", "B")]

    def warmup_steps(self) -> list[str]:
        """The steps that ran before the first clock read."""
        first = self.events.index("clock") if "clock" in self.events else len(self.events)
        return [e for e in self.events[:first] if e in ("A", "B")]

    def unsynced_clock_reads(self) -> int:
        """How many clock reads did not come right after a sync."""
        return sum(1 for i, e in enumerate(self.events)
                   if e == "clock" and (i == 0 or self.events[i - 1] != "sync"))
