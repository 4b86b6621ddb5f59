"""What Validate says is what the grade says, over every realistic mistake of the demo classes.

A student who presses Validate and sees no failure must not lose an exercise at grading: every
requirement an exercise states has a visible check, and the hidden tests re-check the same
requirements on other data. So nbgrader's own Validator, run on each demo submission that makes a
realistic mistake, must report exactly the test cells that submission loses at grading (`# loses:`),
with the feedback's diagnosis (`# says:`), except those its file declares with
`# validate-misses: <grade id> <why>` (docs/demo-class.md gives each reason). Two correct
submissions of lesson 04 (the quickest to run) must validate cleanly: the worked solution, and
`alternative_positions`, whose functions warn and write to stderr while tested. Grading ignores
stderr, and the checks show it on stdout (`helpers.transport.capture.stderr_on_stdout`), so Validate agrees.

Those two run whole, in kernels started afresh, as the button runs them. The mistakes run in
kernels forked from one that has already imported torch, ipykernel and matplotlib
(tests/forked_kernels.py), without the demonstrations that grading leaves out of the same notebook
(course_tools.grading.demonstrations: the teacher's unchanged `skip-when-grading` cells that no cell
that runs depends on). What a test cell reports cannot depend on them, by the rule grading relies
on (tests/grading/test_demonstrations.py), and nbgrader's Validator reports test cells only: the
same verdicts, without the lesson's plots and timing loops for each of some ninety submissions.

One test class per lesson, so that pytest-xdist can spread the lessons over its workers.
"""

from pathlib import Path

import nbformat
import pytest
from support import failed_cells, validate

from course_tools.grading.demonstrations import skipped_at_grading
from course_tools.jobs.demo_class import DEMO_ROOT, build_notebook, kind_of, load_demo_class
from course_tools.lessons import REPO_ROOT, assignment_ids

pytestmark = pytest.mark.slow

CORRECT_ONES = {"04_memory": ("reference", "alternative_positions")}


def validated_submissions(assignment: str) -> list:
    return [submission for submission in load_demo_class(assignment)
            if kind_of(submission) == "mistake" or submission.student in CORRECT_ONES.get(assignment, ())]


def hand_in(course: Path, assignment: str, submission, folder: Path,
            whole: bool = True) -> dict[Path, object]:
    """The student's notebooks in folder/assignment/, as they hold them before pressing Validate;
    unless `whole`, without the demonstrations grading would leave out of them."""
    target = folder / assignment
    target.mkdir(parents=True)
    handed_in = {}
    for released_path in sorted((course / "release" / assignment).glob("*.ipynb")):
        released = nbformat.read(released_path, as_version=4)
        source = nbformat.read(course / "source" / assignment / released_path.name, as_version=4)
        notebook = build_notebook(submission, source, released)
        if not whole:
            left_out = skipped_at_grading(notebook.cells, released.cells)
            notebook.cells = [cell for index, cell in enumerate(notebook.cells) if index not in left_out]
        path = target / released_path.name
        nbformat.write(notebook, path)
        handed_in[path] = released
    return handed_in


def pytest_generate_tests(metafunc):
    if "submission" in metafunc.fixturenames:
        submissions = validated_submissions(metafunc.cls.assignment)
        metafunc.parametrize("submission", submissions, ids=[s.student for s in submissions])


class ValidateAgreesWithGrading:
    assignment = ""

    def test_validate_reports_what_grading_takes(self, released_course, tmp_path, submission):
        unknown = set(submission.validate_misses) - set(submission.loses)
        assert not unknown, f"{submission.student}: '# validate-misses:' names {sorted(unknown)}, not lost"
        failed = {}
        as_the_button = submission.student in CORRECT_ONES.get(self.assignment, ())
        handed_in = hand_in(released_course, self.assignment, submission, tmp_path, whole=as_the_button)
        for path, released in handed_in.items():
            failed.update(failed_cells(validate(released_course, path, forked=not as_the_button), released))
        expected = set(submission.loses) - set(submission.validate_misses)
        missed = expected - set(failed)
        assert not missed, (
            f"{self.assignment}/{submission.student} loses {sorted(missed)} at grading, but Validate passes "
            "it: make the requirement a visible check, or declare '# validate-misses: <grade id> <why>'")
        extra = set(failed) - set(submission.loses)
        assert not extra, (
            f"{self.assignment}/{submission.student}: Validate fails {sorted(extra)}, which grading gives "
            "full points:" + "".join(f"\n--- {cell}:\n{failed[cell][-1500:]}" for cell in sorted(extra)))
        for cell in expected:
            assert "Partial credit" not in failed[cell] and "did not provide a response" not in failed[cell]
        if expected and submission.says:
            # What the student reads on pressing Validate names the same mistake as the feedback.
            # The notebook breaks a diagnosis into lines between words (helpers.diagnosis).
            says = " ".join(submission.says.split())
            assert any(says in " ".join(failed[cell].split()) for cell in expected), (
                f"{submission.student}: Validate should say {submission.says!r}, said:"
                + "".join(f"\n--- {cell}:\n{failed[cell][-1500:]}" for cell in sorted(expected)))


for _assignment in assignment_ids(REPO_ROOT):
    if (DEMO_ROOT / _assignment).is_dir():
        globals()[f"TestValidate_{_assignment}"] = type(
            f"TestValidate_{_assignment}", (ValidateAgreesWithGrading,), {"assignment": _assignment})
