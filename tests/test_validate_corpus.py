"""What Validate says is what the grade says, over every realistic mistake of the demo classes.

A student who presses Validate and sees no failure must not lose an exercise at grading: every
requirement an exercise states has a visible check, and the hidden tests re-check the same
requirements on other data. So nbgrader's own Validator, run on each demo submission that makes a
realistic mistake, must report exactly the test cells that submission loses at grading (`# loses:`),
except those its file declares with `# validate-misses: <grade id> <why>` (the README's demo table
gives each reason). Correct submissions written another way must validate cleanly, including one
whose functions warn and print to stderr while tested (`helpers.capture.stderr_on_stdout`), which
grading does not count either.
"""

from pathlib import Path

import nbformat
import pytest
from test_validate import failed_cells, validate

from course_tools.course import assignment_ids
from course_tools.demo_class import DEMO_ROOT, build_notebook, kind_of, load_demo_class

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parent.parent
STDERR_LESSON = "04_memory"


def _validated_submissions():
    for assignment in assignment_ids(REPO_ROOT):
        if not (DEMO_ROOT / assignment).is_dir():
            continue
        for submission in load_demo_class(assignment):
            # The correct ones of the quickest lesson too: one of them warns and writes to stderr.
            kind = kind_of(submission)
            if kind == "mistake" or (kind == "alternative" and assignment == STDERR_LESSON):
                yield pytest.param(assignment, submission, id=f"{assignment}-{submission.student}")


def hand_in(course: Path, assignment: str, submission, folder: Path) -> dict[Path, object]:
    """The student's notebooks in folder/assignment/, as they hold them before pressing Validate."""
    target = folder / assignment
    target.mkdir(parents=True)
    handed_in = {}
    for released_path in sorted((course / "release" / assignment).glob("*.ipynb")):
        released = nbformat.read(released_path, as_version=4)
        source = nbformat.read(course / "source" / assignment / released_path.name, as_version=4)
        path = target / released_path.name
        nbformat.write(build_notebook(submission, source, released), path)
        handed_in[path] = released
    return handed_in


@pytest.mark.parametrize(("assignment", "submission"), list(_validated_submissions()))
def test_validate_reports_what_grading_takes(released_course, tmp_path, assignment, submission):
    unknown = set(submission.validate_misses) - set(submission.loses)
    assert not unknown, f"{submission.student}: '# validate-misses:' names {sorted(unknown)}, not lost"
    failed = {}
    for path, released in hand_in(released_course, assignment, submission, tmp_path).items():
        failed.update(failed_cells(validate(released_course, path), released))
    expected = set(submission.loses) - set(submission.validate_misses)
    missed = expected - set(failed)
    assert not missed, (
        f"{assignment}/{submission.student} loses {sorted(missed)} at grading, but Validate passes it: "
        f"make the requirement a visible check, or declare '# validate-misses: <grade id> <why>'")
    extra = set(failed) - set(submission.loses)
    assert not extra, (
        f"{assignment}/{submission.student}: Validate fails {sorted(extra)}, which grading gives full points:"
        + "".join(f"\n--- {cell}:\n{failed[cell][-1500:]}" for cell in sorted(extra)))
    if expected and submission.says:
        # What the student reads on pressing Validate names the same mistake as the feedback.
        assert any(submission.says in failed[cell] for cell in expected), (
            f"{submission.student}: Validate should say {submission.says!r}, said:"
            + "".join(f"\n--- {cell}:\n{failed[cell][-1500:]}" for cell in sorted(expected)))
