"""Unit tests of helpers.progress."""

from helpers.progress import progress


def test_progress_iterates_and_is_silent_while_grading(monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    bar = progress(range(3), desc="epochs")
    assert bar.disable and list(bar) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_progress_shows_outside_grading(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    bar = progress(range(2), desc="epochs", total=2)
    assert not bar.disable and bar.leave is False and bar.total == 2
    assert list(bar) == [0, 1]
    assert progress(range(2), leave=True, disable=True).disable
