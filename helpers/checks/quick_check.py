"""The last exercise of each lesson: a multiple-choice question answered in QUICK_CHECK."""

from __future__ import annotations

from helpers.diagnosis import mistake

LETTERS = ("a", "b", "c", "d")


def check_letter(answer) -> str:
    """The answer as a lowercase letter; a failure unless it is one of the four."""
    if not (isinstance(answer, str) and answer.strip().lower() in LETTERS):
        raise mistake("not_one_of_the_letters",
                      f"QUICK_CHECK should be one of the strings 'a', 'b', 'c' or 'd', got {answer!r}")
    return answer.strip().lower()


def check_answer(answer, key: str, why_not: str) -> None:
    """A failure saying `why_not` unless the answer is the letter `key`."""
    if check_letter(answer) != key:
        raise mistake("wrong_quick_check", why_not)
