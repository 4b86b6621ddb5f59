"""Hidden tests whose inputs differ per student, under a secret only the grader holds.

The course is public, so anyone can read the inputs of its hidden tests in `source/`. At grading,
the hidden part of a test draws its seeds, sizes and the order of its cases from `draw(exercise)`:
a `Variant` seeded by an HMAC of the student's id and the exercise under the course's secret. The
grader sets the secret and the student (`grading_student`) before it runs a notebook's tests, in its
own process; the secret never enters the student's kernel, the notebooks or the feedback. Without
a secret, and outside grading (Validate, nbval over `notebooks/`), every draw gives the default
the test was written with, so the published inputs stay the fixed defaults.

A hidden test still reaches every case its exercise names whatever the variant: a variant changes
the numbers inside a case (a seed, a size, a scale) and the order of the cases, never which cases
run. Each test cell documents its defaults as the first argument of each draw.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import random
from collections.abc import Iterator, Sequence
from typing import TypeVar

SECRET_ENVIRONMENT = "COURSE_VARIANT_SECRET"

T = TypeVar("T")
_current: tuple[bytes, str] | None = None


class Variant:
    """One student's draws for one exercise; every draw gives its default when `rng` is None."""

    def __init__(self, rng: random.Random | None = None):
        self._rng = rng

    @property
    def fixed(self) -> bool:
        return self._rng is None

    def seed(self, default: int) -> int:
        """A seed for a generator or a model: `default`, or another one."""
        return default if self._rng is None else self._rng.randrange(1_000, 1_000_000)

    def pick(self, default: T, *others: T) -> T:
        """`default`, or one of `default` and `others`."""
        return default if self._rng is None else self._rng.choice((default, *others))

    def order(self, cases: Sequence[T]) -> list[T]:
        """The cases, in the written order or shuffled: every case still runs."""
        cases = list(cases)
        if self._rng is not None:
            self._rng.shuffle(cases)
        return cases


@contextlib.contextmanager
def grading_student(secret: str | bytes | None, student: str | None) -> Iterator[None]:
    """While grading `student`'s notebook: draws depend on the secret and the student's id. With no
    secret (or no student) the draws stay the defaults."""
    global _current
    previous = _current
    if secret and student:
        _current = (secret.encode() if isinstance(secret, str) else bytes(secret), str(student))
    else:
        _current = None
    try:
        yield
    finally:
        _current = previous


def draw(exercise: str) -> Variant:
    """The variant of `exercise` for the student being graded, or the defaults."""
    if _current is None:
        return Variant()
    secret, student = _current
    digest = hmac.new(secret, f"{student}\0{exercise}".encode(), hashlib.sha256).digest()
    return Variant(random.Random(int.from_bytes(digest[:16], "big")))
