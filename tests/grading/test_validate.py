"""The student's Validate button, through nbgrader's own Validator (what the button's handler calls).

`nbgrader validate` exits with 0 whatever it finds, so the tests read the Validator's results.
Here: the release as handed out fails on every exercise, on its stub. Solved notebooks and every
realistic mistake of the demo classes are validated in test_validate_corpus.py, with the helpers
below.
"""


import nbformat
import pytest
from support import copy_course, failed_cells, validate

from course_tools.cells import grade_id
from course_tools.cells import is_test as is_test_cell
from course_tools.jobs.nbgrader_course import generate_release, open_course

pytestmark = pytest.mark.slow

ASSIGNMENT = "04_memory"      # the quickest notebook to run on a CPU


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
