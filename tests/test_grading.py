"""Grade the demo class through nbgrader's own API, in one autograde call, and read the gradebook.

Each demo submission (tests/demo_class/<assignment>/<student>.py) declares the test cells it must
fail; it must lose exactly those points, keep all the others, and its feedback must show the
failure message without revealing hidden tests.
"""

import html
import re

import nbformat
import pytest

from course_tools.course import REPO_ROOT, assignment_ids
from course_tools.demo_class import DEMO_ROOT, load_demo_class
from course_tools.grade import export_grades, grade_demo_class

GRADED_ASSIGNMENTS = [a for a in assignment_ids(REPO_ROOT) if (DEMO_ROOT / a).is_dir()]
DEMO_STUDENTS = [(a, s.student) for a in GRADED_ASSIGNMENTS for s in load_demo_class(a)]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def graded_class(released_course):
    """{assignment: {student: GradedSubmission}} for a freshly released copy of the course."""
    return {a: {g.submission.student: g for g in grade_demo_class(released_course, a)}
            for a in GRADED_ASSIGNMENTS}


def feedback_text(course, assignment, student) -> str:
    [page] = (course / "feedback" / student / assignment).glob("*.html")
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))


def test_demo_class_is_realistic():
    for assignment in GRADED_ASSIGNMENTS:
        submissions = {s.student: s for s in load_demo_class(assignment)}
        assert "reference" in submissions and "untouched" in submissions
        wrong = [s for s in submissions.values() if s.loses and s.student != "untouched"]
        assert len(wrong) >= 6, f"{assignment}: the demo class needs at least six wrong submissions"
        assert any(not s.loses and s.cells for s in submissions.values()), (
            f"{assignment}: add a correct submission written differently from the worked solution")


@pytest.mark.parametrize(("assignment", "student"), DEMO_STUDENTS)
def test_each_submission_loses_exactly_its_mistakes(graded_class, assignment, student):
    graded = graded_class[assignment][student]
    assert all(score is not None for score in graded.scores.values()), f"{student}: ungraded cells"
    assert set(graded.lost) == set(graded.submission.loses), (
        f"{student} ({graded.submission.about}) lost {sorted(graded.lost)}, "
        f"expected to lose {sorted(graded.submission.loses)}")
    for cell in graded.submission.loses:
        assert graded.scores[cell] == 0, f"{student}: {cell} should get no points"
    assert graded.total == graded.expected_total


def test_full_solution_gets_every_point_and_release_none(graded_class):
    for assignment, students in graded_class.items():
        reference, untouched = students["reference"], students["untouched"]
        assert reference.total == sum(reference.max_scores.values()) > 0, f"{assignment}: reference"
        assert untouched.total == 0, f"{assignment}: the untouched release should get zero"


def test_untouched_release_fails_on_its_stubs(graded_class, released_course):
    """The untouched release is graded without crashing: each test fails on the stub it calls."""
    for assignment in graded_class:
        for path in (released_course / "autograded" / "untouched" / assignment).glob("*.ipynb"):
            for cell in nbformat.read(path, as_version=4).cells:
                if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
                    errors = [o for o in cell.outputs if o.output_type == "error"]
                    assert errors and errors[0].ename in ("NotImplementedError", "NameError"), (
                        f"{path.name}: {cell.metadata.nbgrader.grade_id} did not fail on the stub")


def test_feedback_names_the_mistake_and_hides_hidden_tests(graded_class, released_course):
    for assignment in graded_class:
        source_text = "\n".join(c.source for p in (released_course / "source" / assignment).glob("*.ipynb")
                                for c in nbformat.read(p, as_version=4).cells)
        hidden_only = {line.strip() for block in re.findall(
            r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", source_text, re.S)
            for line in block.splitlines() if len(line.strip()) > 20}
        visible = {line.strip() for line in re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "",
                                                   source_text, flags=re.S).splitlines()}
        hidden_only -= visible
        assert hidden_only
        for student, graded in graded_class[assignment].items():
            text = feedback_text(released_course, assignment, student)
            assert "BEGIN HIDDEN TESTS" not in text
            shown = {line.strip() for line in text.splitlines()}
            assert not hidden_only & shown, f"{student}'s feedback shows hidden test code"
            if graded.lost and student != "untouched":
                assert "AssertionError: " in text or "Error: " in text, f"{student}: no failure message"


def test_the_failure_messages_name_the_mistakes(graded_class, released_course):
    expected = {
        "zero_grad_every_micro_batch": "zero_grad() ran inside the cycle",
        "no_loss_scaling": "4x too large",
        "step_every_micro_batch": "optimizer.step() ran 8 times for 8 micro-batches with accum_steps=4",
        "trailing_cycle_dropped": "the last, shorter cycle never got its step",
        "equal_weights_for_unequal_batches": "share of the samples",
        "per_micro_batch_token_mean": "October 2024",
        "clip_every_micro_batch": "clip once per cycle",
    }
    assignment = "02_gradient_accumulation"
    if assignment not in graded_class:
        pytest.skip("the gradient-accumulation lesson has no demo class")
    for student, phrase in expected.items():
        assert phrase in feedback_text(released_course, assignment, student), (
            f"{student}'s feedback should say '{phrase}'")


def test_grades_export(graded_class, released_course, tmp_path):
    destination = tmp_path / "grades.csv"
    export_grades(released_course, destination)
    rows = destination.read_text().splitlines()
    students = {s for a in graded_class.values() for s in a}
    assert rows[0].startswith("assignment,")
    assert len(rows) - 1 == len(students) * len(graded_class)
