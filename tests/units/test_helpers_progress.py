"""Unit tests of helpers.progress."""

import gc

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


def test_a_notebook_bar_ends_as_a_line_of_text(monkeypatch):
    """In a notebook the bar is a widget while it runs; closed, its output is replaced by text, so a
    saved notebook holds no widget view that a new kernel could not display."""
    from unittest import mock

    from helpers.progress import _notebook_bar_class

    shown = mock.Mock()
    monkeypatch.setattr("IPython.display.display", mock.Mock(return_value=shown))
    assert list(_notebook_bar_class()(range(3), desc="epochs", leave=False)) == [0, 1, 2]
    shown.update.assert_called_once_with({"text/plain": "epochs: 3/3 in 00:00"}, raw=True)

    shown.reset_mock()
    for _ in _notebook_bar_class()(range(5), desc="epochs", leave=False):
        break
    # A loop left early closes its bar when the bar is collected; it says so.
    gc.collect()
    assert "stopped early" in shown.update.call_args.args[0]["text/plain"]
