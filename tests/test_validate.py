"""The student's Validate button, through nbgrader's own Validator (what the button's handler calls).

`nbgrader validate` exits with 0 whatever it finds, so the tests read the Validator's results:
a fully solved notebook validates cleanly, a notebook with one mistake fails exactly on that
exercise's visible test cell with the message the student reads in the notebook, and the
release as handed out fails on every exercise.

nbgrader's Validator counts any stderr output of a test cell as a failure (it cannot be configured
otherwise); the notebooks keep their test cells free of stderr, which the clean run checks too.
"""

from pathlib import Path

import nbformat
import pytest
from conftest import copy_course
from nbconvert.filters import strip_ansi
from nbgrader.validator import Validator

from course_tools.cells import grade_id
from course_tools.cells import is_test as is_test_cell
from course_tools.course import generate_release, load_config, open_course
from course_tools.demo_class import DEMO_ROOT, build_notebook, parse_submission

pytestmark = pytest.mark.slow

ASSIGNMENT = "04_memory"      # the quickest notebook to run on a CPU
MISTAKE = "adam_state_once"   # a demo submission whose mistake the visible test already catches


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course copy with the release of ASSIGNMENT generated."""
    root = copy_course(tmp_path_factory.mktemp("validate_course"))
    generate_release(open_course(root), ASSIGNMENT)
    return root


@pytest.fixture(scope="module")
def release_notebooks(course):
    return {path.name: nbformat.read(path, as_version=4)
            for path in sorted((course / "release" / ASSIGNMENT).glob("*.ipynb"))}


def hand_in(course, release_notebooks, folder: Path, demo_file: str) -> list[Path]:
    """Write the notebooks of a demo student into folder/ASSIGNMENT/, as the student would have them."""
    submission = parse_submission(DEMO_ROOT / ASSIGNMENT / f"{demo_file}.py")
    target = folder / ASSIGNMENT
    target.mkdir(parents=True)
    paths = []
    for name, released in release_notebooks.items():
        source = nbformat.read(course / "source" / ASSIGNMENT / name, as_version=4)
        nbformat.write(build_notebook(submission, source, released), target / name)
        paths.append(target / name)
    return paths


def validate(course, path: Path) -> dict:
    """What the Validate button reports: the Validator configured by the course's nbgrader_config.py
    (the button reads nbgrader_config.py from the directory JupyterLab was started in)."""
    return Validator(config=load_config(course)).validate(str(path))


def failed_cells(results: dict, notebook) -> dict[str, str]:
    """grade id -> error text (ANSI colours removed) of each cell the Validator reports as failing."""
    assert set(results) <= {"failed"}, f"Validate reported {sorted(results)}, not only failures: {results}"
    by_source = {cell.source.strip(): grade_id(cell) for cell in notebook.cells if is_test_cell(cell)}
    failed = {}
    for entry in results.get("failed", []):
        assert entry["source"] in by_source, f"Validate failed on a cell that is not a test cell: {entry}"
        failed[by_source[entry["source"]]] = strip_ansi(entry["raw_error"])
    return failed


def test_full_solution_validates(course, release_notebooks, tmp_path):
    for path in hand_in(course, release_notebooks, tmp_path, "reference"):
        results = validate(course, path)
        assert results == {}, f"the worked solution should pass Validate: {results}"


def test_one_mistake_fails_exactly_its_visible_test(course, release_notebooks, tmp_path):
    submission = parse_submission(DEMO_ROOT / ASSIGNMENT / f"{MISTAKE}.py")
    assert submission.loses and submission.says, f"{MISTAKE} should declare '# loses:' and '# says:'"
    failed = {}
    for path in hand_in(course, release_notebooks, tmp_path, MISTAKE):
        failed.update(failed_cells(validate(course, path), release_notebooks[path.name]))
    assert set(failed) == set(submission.loses), (
        f"Validate failed {sorted(failed)}, but {MISTAKE} makes a mistake only in {sorted(submission.loses)}")
    for cell, error in failed.items():
        # The message the test raises in the notebook, which Validate passes on as it is.
        assert submission.says in error, f"Validate on {cell} should say {submission.says!r}, said:\n{error}"
        assert "Partial credit" not in error and "did not provide a response" not in error


def test_untouched_release_fails_every_exercise(course, release_notebooks, tmp_path):
    for name, notebook in release_notebooks.items():
        path = tmp_path / ASSIGNMENT / name
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, path)
        failed = failed_cells(validate(course, path), notebook)
        tests = {grade_id(cell) for cell in notebook.cells if is_test_cell(cell)}
        assert tests and set(failed) == tests, f"{name}: Validate should fail every exercise's test cell"
        for cell, error in failed.items():
            assert "NotImplementedError" in error or "NameError" in error, (
                f"{name}: {cell} should fail on the unanswered exercise, said:\n{error}")
