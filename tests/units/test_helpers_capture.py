"""Unit tests of helpers.transport.capture.stderr_on_stdout: inside it, warnings and writes to sys.stderr
reach stdout (nbgrader's Validate fails a test cell that writes to stderr); outside it, nothing
changes."""

import sys
import warnings

import pytest

from helpers.transport.capture import stderr_on_stdout


def noisy(text="noise"):
    warnings.warn(f"{text} as a warning", UserWarning, stacklevel=1)
    print(f"{text} on stderr", file=sys.stderr)
    return text


def test_warnings_and_stderr_inside_go_to_stdout(capsys):
    with stderr_on_stdout():
        assert noisy() == "noise"
    shown = capsys.readouterr()
    assert shown.err == ""
    assert "noise as a warning" in shown.out and "UserWarning" in shown.out
    assert "noise on stderr" in shown.out


def test_outside_the_block_stderr_and_warnings_are_untouched(capsys):
    with stderr_on_stdout():
        pass
    print("after", file=sys.stderr)
    with pytest.warns(UserWarning, match="after as a warning"):
        warnings.warn("after as a warning", UserWarning, stacklevel=1)
    shown = capsys.readouterr()
    assert shown.err == "after\n" and shown.out == ""


def test_restores_showwarning_and_stderr_after_an_error(capsys):
    show_before, stderr_before = warnings.showwarning, sys.stderr
    with pytest.raises(ValueError), stderr_on_stdout():
        raise ValueError("the student's error")
    assert warnings.showwarning is show_before and sys.stderr is stderr_before


def test_as_a_decorator(capsys):
    @stderr_on_stdout()
    def check():
        return noisy("decorated")

    assert check() == "decorated"
    shown = capsys.readouterr()
    assert shown.err == "" and "decorated on stderr" in shown.out and "decorated as a warning" in shown.out


def test_nesting_keeps_stdout_and_restores_each_level(capsys):
    stderr_before = sys.stderr
    with stderr_on_stdout():
        with stderr_on_stdout():
            noisy("inner")
        noisy("outer")
    assert sys.stderr is stderr_before
    print("outside", file=sys.stderr)
    shown = capsys.readouterr()
    assert "inner on stderr" in shown.out and "outer on stderr" in shown.out
    assert "inner as a warning" in shown.out and "outer as a warning" in shown.out
    assert shown.err == "outside\n"
