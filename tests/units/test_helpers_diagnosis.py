"""helpers.diagnosis: a failed check shows its message first; the student's own errors keep theirs."""

import ast
import re
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from course_tools.lessons import REPO_ROOT
from helpers import diagnosis
from helpers.transport import errors, remote


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
    shell.run_cell("import torch\nfrom helpers.checks.accumulation.updates import check_returned_losses\n"
                   "check_returned_losses([1.0], [2.0])")
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


# ---------------------------------------------------------------------------------------------
# Every failure a check raises carries the name of its mistake (diagnosis.mistake), so that the
# class report groups a class's failures by mistake, never by their text.
# ---------------------------------------------------------------------------------------------

HELPERS = REPO_ROOT / "helpers"
# The judges, and the collectors, which must not judge (a failure they raise would bypass the names).
CHECK_FILES = sorted([*HELPERS.rglob("checks/**/*.py"), *HELPERS.rglob("collect/**/*.py")])
def _key(path: Path) -> str:
    return path.relative_to(HELPERS).as_posix()


NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# Where a check passes a mistake's name through a variable rather than writing it at the call:
# (file, function, the argument as written). Each name is still written as a literal, where it is
# chosen: test_the_name_tables_hold_names reads the tables, and the helpers that return a
# (name, message) pair write both side by side.
PASSED_THROUGH = {
    # A cause chosen among several by a helper that returns (name, words): _gradient_diagnosis
    # (its names as literals, or MISTAKE_NAMES), _diagnose_bottleneck, _schedule_problem,
    # _training_hint, _saved_hint, _peak_hint (PEAK_MISTAKE_NAMES).
    ("checks/accumulation/updates.py", "_explain_wrong_updates", "name"),
    ("checks/profiling/bottleneck.py", "check_find_bottleneck", "cause"),
    ("checks/profiling/bottleneck.py", "check_find_bottleneck", "problem_name"),
    ("checks/profiling/bottleneck.py", "check_find_bottleneck", "problem_name or 'shares_not_per_phase'"),
    ("checks/memory/training_bytes.py", "check_training_bytes", "cause"),
    ("checks/memory/saved_bytes.py", "check_saved_bytes", "cause"),
    ("checks/memory/checkpoint_segments.py", "check_checkpointed_forward", "cause"),
    # A cause set, as a literal, beside the words it explains, in the branches just above the raise.
    ("checks/profiling/speed_comparison.py", "check_compare_speed", "cause"),
    # One of the three calls counted once per update, each with its own name in the loop's table.
    ("checks/amp_calls.py", "check_amp_calls", "wrong_count"),
    # The same diagnosis in other words keeps the name the failure it rewords was given.
    ("checks/accumulation/shared.py", "_reworded", "name"),
    # The one known mistake the student's prediction matches, by its MISTAKE_NAMES entry.
    ("checks/batchnorm.py", "check_running_stats",
     "MISTAKE_NAMES[matches[0]] if len(matches) == 1 else 'wrong_prediction'"),
    ("checks/recompute.py", "check_block_forwards",
     "MISTAKE_NAMES[named[0]] if len(named) == 1 else 'wrong_prediction'"),
}

# An assert that is the test's own precondition, not a diagnosis of the student's work.
PRECONDITIONS = {("checks/memory/plan.py", "check_plan_raises")}


def _calls_in_functions(tree):
    """(the innermost enclosing function's name, node) for every node of `tree`."""
    def walk(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            yield inner, child
            yield from walk(child, inner)

    return walk(tree, "<module>")


def _literal_names(node) -> list[str] | None:
    """The names a literal (or a choice between literals) gives, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _literal_names(node.body), _literal_names(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


@pytest.mark.parametrize("path", CHECK_FILES, ids=_key)
def test_a_check_raises_no_unnamed_assertion(path):
    for function, node in _calls_in_functions(ast.parse(path.read_text())):
        where = f"{_key(path)}:{getattr(node, 'lineno', '?')} in {function}"
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            assert not (isinstance(node.exc.func, ast.Name) and node.exc.func.id == "AssertionError"), (
                f"{where}: raise mistake(name, message) instead of AssertionError(message)")
        if isinstance(node, ast.Assert) and node.msg is not None:
            assert (_key(path), function) in PRECONDITIONS, (
                f"{where}: a diagnosis is `if not (cond): raise mistake(name, message)`, not an assert")


@pytest.mark.parametrize("path", CHECK_FILES, ids=_key)
def test_every_mistake_is_named_by_a_literal_name(path):
    passed = set()
    for function, node in _calls_in_functions(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if callee not in ("mistake", "Known"):
            continue
        where = f"{_key(path)}:{node.lineno} in {function}"
        assert node.args, f"{where}: {callee}() without a name"
        names = _literal_names(node.args[0])
        if names is None:
            source = ast.unparse(node.args[0])
            assert callee == "mistake" and (_key(path), function, source) in PASSED_THROUGH, (
                f"{where}: {callee}({source}, ...): write the mistake's name as a string literal, or "
                "document the variable in PASSED_THROUGH")
            passed.add((_key(path), function, source))
        for name in names or ():
            assert NAME.match(name), f"{where}: {name!r} is not a lower_snake_case name"
    documented = {entry for entry in PASSED_THROUGH if entry[0] == _key(path)}
    assert documented <= passed, f"PASSED_THROUGH documents calls that no longer exist: {documented - passed}"


def test_the_name_tables_hold_names():
    """The tables a check picks a mistake's name from: every entry a name, one for every mistake."""
    from helpers.checks import batchnorm as checks_batchnorm
    from helpers.checks import recompute as checks_recompute
    from helpers.checks.accumulation.shared import TORCH_ERRORS
    from helpers.checks.accumulation.updates import MISTAKE_MESSAGES, MISTAKE_NAMES
    from helpers.checks.memory import checkpoint_segments as checks_memory_segments
    from helpers.checks.precision.amp_train_step import AMP_STEP_ERRORS
    from helpers.checks.precision.autocast_audit import AUDIT_ERRORS
    from helpers.checks.precision.cast_fate import CAST_FATE_ERRORS

    tables = [(MISTAKE_NAMES, MISTAKE_MESSAGES),
              (checks_batchnorm.MISTAKE_NAMES, checks_batchnorm.MISTAKES),
              (checks_recompute.MISTAKE_NAMES, checks_recompute.MISTAKES),
              (checks_memory_segments.PEAK_MISTAKE_NAMES, checks_memory_segments.PEAK_HINTS)]
    for names, messages in tables:
        assert names.keys() == messages.keys()
        assert all(NAME.match(name) for name in names.values()), names
    known = [*errors.COMMON_ERRORS, *CAST_FATE_ERRORS, *AUDIT_ERRORS,
             *AMP_STEP_ERRORS, *TORCH_ERRORS]
    assert all(isinstance(entry, errors.Known) and NAME.match(entry.mistake) for entry in known)


def test_a_student_error_is_named_after_its_cause():
    """errors.failure: a Known error by its own name, advice by its cause, else "function_raised"."""
    known = (errors.Known("my_mistake", "special words", "the course's words"),)
    error = errors.Raised("RuntimeError", "some special words here")
    assert diagnosis.mistake_name(errors.failure("f", error, known=known)) == "my_mistake"
    advised = errors.failure("f", error, advice="do this", cause="its_cause")
    assert diagnosis.mistake_name(advised) == "its_cause" and str(advised).endswith("; do this")
    common = errors.Raised("RuntimeError", "Trying to backward through the graph a second time")
    assert diagnosis.mistake_name(errors.failure("f", common)) == "backward_twice"
    unknown = errors.failure("f", errors.Raised("KeyError", "'x'"))
    assert diagnosis.mistake_name(unknown) == errors.FUNCTION_RAISED
    assert type(unknown) is AssertionError and str(unknown).startswith("f stopped with KeyError: 'x'; ")
    pattern, words = known[0]          # a Known unpacks as the (pattern, words) pair it always was
    assert (pattern, words) == ("special words", "the course's words")


def test_what_cannot_be_called_or_read_is_named():
    with pytest.raises(AssertionError) as raised:
        remote.run_student(42, remote.plain_call)
    assert diagnosis.mistake_name(raised.value) == "not_a_function"

    def returns_a_generator():
        return (i for i in range(3))

    with pytest.raises(AssertionError) as raised:
        remote.run_student(returns_a_generator, remote.plain_call)
    assert diagnosis.mistake_name(raised.value) == "unreadable_value"


def test_a_reworded_failure_keeps_its_name():
    from helpers.checks.accumulation.shared import prefixed

    with pytest.raises(AssertionError, match="^here: wrong$") as raised, prefixed("here"):
        raise diagnosis.mistake("some_mistake", "wrong")
    assert diagnosis.mistake_name(raised.value) == "some_mistake"
    with pytest.raises(AssertionError, match="^here: plain$") as raised, prefixed("here"):
        raise AssertionError("plain")
    assert diagnosis.mistake_name(raised.value) is None


def test_a_mistake_named_only_by_the_students_error_text_has_a_group_of_its_own():
    """A kernel chooses what its code raises: a failure named by matching that text (or type) is
    filed apart from the same mistake the grader's own evidence named."""
    common = errors.Raised("RuntimeError", "Trying to backward through the graph a second time")
    by_text = errors.failure("f", common)
    assert diagnosis.report_group(by_text) == "backward_twice" + diagnosis.BY_ERROR_TEXT
    advised = errors.failure("f", errors.Raised("ZeroDivisionError", "x"), advice="do this",
                             cause="its_cause")
    assert diagnosis.report_group(advised) == "its_cause" + diagnosis.BY_ERROR_TEXT
    unknown = errors.failure("f", errors.Raised("KeyError", "'x'"))
    assert diagnosis.report_group(unknown) == errors.FUNCTION_RAISED
    named = diagnosis.mistake("step_every_micro_batch", "...")
    assert diagnosis.report_group(named) == "step_every_micro_batch"
    assert diagnosis.report_group(AssertionError("no name")) is None
