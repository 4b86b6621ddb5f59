"""helpers.diagnosis: a failed check shows its message first; the student's own errors keep theirs."""

import pytest
from IPython.core.interactiveshell import InteractiveShell

from helpers import diagnosis


class RecordingShell(InteractiveShell):
    """An in-process IPython that keeps what it would have sent as an error output."""

    def _showtraceback(self, etype, evalue, stb):
        self.shown.append((etype.__name__, list(stb)))


@pytest.fixture
def shell(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    shell = RecordingShell()
    shell.shown = []
    yield shell
    RecordingShell.clear_instance()


def test_a_failed_check_shows_its_message_alone(shell):
    assert diagnosis.show_diagnoses_first(shell)
    # A check of the course raises from helpers: here, a compare() given two different dicts.
    shell.run_cell("import torch\nfrom helpers import checks_accumulation\n"
                   "checks_accumulation.check_returned_losses([1.0], [2.0])")
    [(name, lines)] = shell.shown
    assert name == "AssertionError" and lines[0].startswith("AssertionError: ")
    assert "returned losses" in " ".join(lines) and "Traceback" not in "".join(lines)
    assert all(len(line) <= diagnosis.WIDTH for line in lines)


def test_the_students_own_errors_keep_their_traceback(shell):
    assert diagnosis.show_diagnoses_first(shell)
    shell.run_cell("def mine():\n    assert 1 == 2, 'my own assert'\nmine()")
    [(name, lines)] = shell.shown
    assert name == "AssertionError" and len(lines) > 1 and "my own assert" in lines[-1]


def test_nothing_is_installed_while_nbgrader_autogrades(shell, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert not diagnosis.show_diagnoses_first(shell)
    assert shell.custom_exceptions == ()
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")   # Validate's dialog is where it matters most
    assert diagnosis.show_diagnoses_first(shell)


def test_outside_ipython_it_does_nothing():
    assert not diagnosis.show_diagnoses_first()
