"""Grade each demo class through nbgrader's own API, in one autograde call, and read the gradebook.

Each demo submission (demo_class/<assignment>/<student>.py) declares the test cells it must
fail and a phrase its feedback must contain; it must lose exactly those points, keep all the
others, and its feedback must show the failure message without revealing hidden tests. One test
class per assignment, so that pytest-xdist grades the assignments on different workers.
"""

import base64
import csv
import html
import json
import re

import nbformat
import pytest
from support import grade_demo_class

from course_tools.cells import hidden_test_lines, is_test, notebook_cells
from course_tools.grading.sandbox import sandbox_status
from course_tools.jobs.class_report import FAILED, NOT_ATTEMPTED, PASSED, UNDIAGNOSED, write_report
from course_tools.jobs.demo_class import DEMO_ROOT, kind_of, load_demo_class, unmet_need
from course_tools.jobs.grade_demo_class import export_grades
from course_tools.lessons import REPO_ROOT, assignment_ids

GRADED_ASSIGNMENTS = [a for a in assignment_ids(REPO_ROOT) if (DEMO_ROOT / a).is_dir()]

pytestmark = pytest.mark.slow


def pytest_generate_tests(metafunc):
    if "student" in metafunc.fixturenames:
        students = [s.student for s in load_demo_class(metafunc.cls.assignment)]
        metafunc.parametrize("student", students)


def feedback_text(course, assignment, student) -> str:
    [page] = (course / "feedback" / student / assignment).glob("*.html")
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))


def feedback_outputs(course, assignment, student) -> str:
    """Only what the cells printed or raised: a test's hint strings also stand in its visible source."""
    [page] = (course / "feedback" / student / assignment).glob("*.html")
    blocks = re.findall(r'<div class="[^"]*\boutput_subarea\b[^"]*">(.*?)</div>', page.read_text(), re.DOTALL)
    return "\n".join(html.unescape(re.sub(r"<[^>]+>", "", block)) for block in blocks)


def test_every_assignment_has_a_demo_class():
    assert set(GRADED_ASSIGNMENTS) == set(assignment_ids(REPO_ROOT)), (
        "each assignment in source/ needs a demo class in demo_class/")


class GradedDemoClass:
    """The checks every demo class must pass; subclasses name the assignment."""

    assignment = ""

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, released_course):
        return {g.submission.student: g for g in grade_demo_class(released_course, cls.assignment)}

    def test_demo_class_is_realistic(self):
        submissions = {s.student: s for s in load_demo_class(self.assignment)}
        assert "reference" in submissions and "untouched" in submissions
        wrong = [s for s in submissions.values() if s.loses and s.student != "untouched"]
        assert len(wrong) >= 6, "a demo class needs at least six wrong submissions"
        assert all(s.says for s in wrong), "every wrong submission says what its feedback must show"
        alternatives = [s for s in submissions.values() if s.student.startswith("alternative_")]
        assert len(alternatives) >= 2 and all(not s.loses and s.cells for s in alternatives), (
            "add two correct submissions written differently from the worked solution (alternatives/)")

    def test_loses_exactly_its_mistakes(self, graded, student):
        result = graded[student]
        if unmet_need(result.submission):
            pytest.skip(f"{student}: {unmet_need(result.submission)}")
        assert all(score is not None for score in result.scores.values()), f"{student}: ungraded cells"
        assert set(result.lost) == set(result.submission.loses), (
            f"{student} ({result.submission.about}) lost {sorted(result.lost)}, "
            f"expected to lose {sorted(result.submission.loses)}")
        for cell in result.submission.loses:
            assert result.scores[cell] == 0, f"{student}: {cell} should get no points"
        assert result.total == result.expected_total

    def test_feedback_names_the_mistake_and_hides_hidden_tests(self, graded, student, released_course):
        if unmet_need(graded[student].submission):
            pytest.skip(f"{student}: {unmet_need(graded[student].submission)}")
        text = feedback_text(released_course, self.assignment, student)
        assert "BEGIN HIDDEN TESTS" not in text
        shown = {line.strip() for line in text.splitlines()}
        sources = (released_course / "source" / self.assignment).glob("*.ipynb")
        leaked = hidden_test_lines(notebook_cells(sources)) & shown
        assert not leaked, f"{student}'s feedback shows hidden test code: {sorted(leaked)[:2]}"
        says = graded[student].submission.says
        assert says in feedback_outputs(released_course, self.assignment, student), (
            f"{student}'s feedback should show {says!r} in a cell's output")

    def test_full_solution_gets_every_point_and_release_none(self, graded):
        reference, untouched = graded["reference"], graded["untouched"]
        assert reference.total == sum(reference.max_scores.values()) > 0
        assert untouched.total == 0

    def test_untouched_release_fails_on_its_stubs(self, graded, released_course):
        folder = released_course / "autograded" / "untouched" / self.assignment
        for path in folder.glob("*.ipynb"):
            for cell in nbformat.read(path, as_version=4).cells:
                if is_test(cell):
                    errors = [o for o in cell.outputs if o.output_type == "error"]
                    assert errors and errors[0].ename in ("NotImplementedError", "NameError"), (
                        f"{path.name}: {cell.metadata.nbgrader.grade_id} did not fail on the stub")

    def test_grades_export(self, graded, released_course, tmp_path):
        destination = tmp_path / "grades.csv"
        export_grades(released_course, destination)
        with destination.open() as handle:
            rows = [row for row in csv.DictReader(handle) if row["assignment"] == self.assignment]
        # nbgrader exports a row for every student in the gradebook, graded in this class or not.
        scores = {row["student_id"]: float(row["raw_score"]) for row in rows}
        for student, result in graded.items():
            assert scores.get(student) == result.total, f"grades.csv disagrees with the gradebook: {student}"

    @pytest.fixture(scope="class")
    @classmethod
    def class_report(cls, graded, released_course):
        page = write_report(released_course, cls.assignment)
        return page, json.loads(page.with_suffix(".json").read_text())

    def test_class_report_adds_up_and_groups_each_mistake_by_name(self, graded, class_report):
        """Every student is counted once per exercise, in the status the gradebook's points say; each
        realistic mistake lands in a group its check named (not `undiagnosed`), whose message shows
        the demo file's `# says:`; the untouched release is `not attempted` everywhere."""
        _, report = class_report
        assert report["students"] == len(graded)
        outcomes = {}
        for exercise in report["exercises"]:
            assert sum(exercise["counts"].values()) == len(graded), exercise["test"]
            assert sum(g["count"] for g in exercise["mistakes"]) == exercise["counts"][FAILED]
            outcomes.update({(exercise["test"], o["student"]): o for o in exercise["outcomes"]})
        for student, result in graded.items():
            for test, score in result.scores.items():
                status = outcomes[test, student]["status"]
                assert (status == PASSED) == (score == result.max_scores[test]), (student, test, status)
            submission = result.submission
            if kind_of(submission) == "mistake":
                lost = [outcomes[test, student] for test in submission.loses]
                assert all(o["group"] not in ("", UNDIAGNOSED) for o in lost), (
                    f"{student}: the report groups its failure as {[o['group'] for o in lost]}: give the "
                    "check's diagnosis a name (helpers.diagnosis.mistake)")
                assert any(submission.says in o["message"] for o in lost), (
                    f"{student}: the report's message does not show {submission.says!r}")
        assert all(outcomes[test, "untouched"]["status"] == NOT_ATTEMPTED
                   for test in graded["untouched"].scores)
        from course_tools.grading.memory_cgroups import memory_cgroups

        if sandbox_status().available and memory_cgroups().available:
            assert report["memory_not_measured"] == [], (
                "every kernel had a memory cgroup, yet these say their memory was not measured: "
                f"{report['memory_not_measured']}")

    def test_class_report_opens_in_chromium(self, class_report, browser):
        """A page a teacher opens offline: a heading, a table and a chart per exercise, no script."""
        page_path, report = class_report
        text = page_path.read_text()
        assert "<script" not in text.lower()
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(error))
        try:
            page.goto(page_path.as_uri())
            assert page.locator("h2").count() == len(report["exercises"]) + 1
            assert page.locator("svg").count() == len(report["exercises"])
            assert page.locator("h1").inner_text().endswith(self.assignment)
        finally:
            page.close()
        assert not errors

    def test_what_kernels_leave_behind_reaches_no_course_file(self, graded, released_course):
        """Kernels that swapped their notebook for links to the course's files, or wrote big files
        (02/links_to_the_host), leave nothing behind: no link and no big file in autograded/ or
        feedback/, and the course's configuration, sources and gradebook are whole."""
        if not sandbox_status().available:
            pytest.skip(f"only a sandboxed grader keeps kernels' writes off the host: "
                        f"{sandbox_status().message}")
        for student in graded:
            for folder in (released_course / "autograded" / student / self.assignment,
                           released_course / "feedback" / student / self.assignment):
                for path in folder.rglob("*"):
                    assert not path.is_symlink(), f"a kernel left a link behind: {path}"
                    assert path.is_dir() or path.stat().st_size < 20 * 2**20, (
                        f"a kernel left a big file: {path}")
        assert (released_course / "nbgrader_config.py").read_bytes() == (
            REPO_ROOT / "nbgrader_config.py").read_bytes()
        for path in (REPO_ROOT / "source" / self.assignment).glob("*.ipynb"):
            copy = released_course / "source" / self.assignment / path.name
            assert not copy.is_symlink() and copy.read_bytes() == path.read_bytes(), f"{copy} changed"
        assert (released_course / "gradebook.db").read_bytes().startswith(b"SQLite format 3")

    def test_feedback_carries_the_graders_note(self, graded, student, released_course):
        """What the grader removed or replaced before grading is said at the top of the feedback (the
        demo file's `# note:`), and a submission that needed nothing gets no note."""
        note = graded[student].submission.note
        text = feedback_text(released_course, self.assignment, student)
        if note:
            assert "Note from the grader" in text and note in text, f"{student}'s feedback: say {note!r}"
        else:
            assert "Note from the grader" not in text, f"{student}'s feedback has a note it needs not"

    def test_feedback_holds_only_pages_and_no_linked_file_was_copied(self, graded, released_course):
        """Feedback holds each notebook's page (and the two files nbgrader's release_feedback reads),
        and no grading folder holds a copy of the gradebook or of a source notebook that a
        submission linked to."""
        bookkeeping = ("timestamp.txt", "submission_secret.txt")
        sources = {path.read_bytes() for path in (REPO_ROOT / "source" / self.assignment).glob("*.ipynb")}
        for student in graded:
            for path in (released_course / "feedback" / student / self.assignment).iterdir():
                assert not path.is_symlink() and path.is_file(), f"{path} is not a plain file"
                assert path.suffix == ".html" or path.name in bookkeeping, f"{path} is no feedback page"
                # The notebook's outputs are capped at 2,000,000 characters, whatever its kernel sent.
                assert path.stat().st_size < 16 * 2**20, f"{path} is {path.stat().st_size:,} bytes"
            for path in (released_course / "autograded" / student / self.assignment).rglob("*"):
                if path.is_file() and not path.is_symlink():
                    content = path.read_bytes()
                    assert not content.startswith(b"SQLite format 3") and content not in sources, (
                        f"{path} is a copy of a course file")

    def test_no_hidden_test_line_anywhere_in_any_feedback(self, graded, released_course):
        """Not even inside a longer line: a printed input history is one long line. Lines the release
        itself shows (inside a longer visible line) are no secret."""
        sources = (released_course / "source" / self.assignment).glob("*.ipynb")
        hidden = hidden_test_lines(notebook_cells(sources))
        releases = [nbformat.read(path, as_version=4)
                    for path in (released_course / "release" / self.assignment).glob("*.ipynb")]
        release = "\n".join(cell.source for notebook in releases for cell in notebook.cells)
        secret = {line for line in hidden if line not in release}
        for page in (released_course / "feedback").glob(f"*/{self.assignment}/*.html"):
            text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
            text += "\n".join(_decoded_runs(text))
            leaked = sorted(line for line in secret if line in text)
            assert not leaked, f"{page.parent.parent.name}'s feedback shows hidden test code: {leaked[:2]}"


    def test_skipping_demonstrations_changes_no_grade(self, graded, released_course, tmp_path):
        """The grader skips unchanged demonstrations that nothing reads, and those that call a
        student's function that cannot keep state (course_tools/grading/demonstrations.py). Graded
        again with every demonstration run, in a copy of the course, the worked solution and two
        correct alternatives (the styles most likely to keep state where no parse sees it) score
        exactly what they scored with skipping."""
        from support import grade_students_again

        chosen = ["reference"] + sorted(s.student for s in load_demo_class(self.assignment)
                                        if kind_of(s) == "alternative")[:2]
        again = grade_students_again(released_course, self.assignment, chosen, tmp_path,
                                     skip_demonstrations=False)
        for student in chosen:
            assert again[student] == graded[student].scores, (
                f"{student}: graded with every demonstration run, {again[student]}; with skipping, "
                f"{graded[student].scores}")


def _decoded_runs(text: str) -> list[str]:
    """What long base64 runs in `text` decode to, read forwards and backwards: a student who prints
    what their code found, encoded, must not find a hidden test either."""
    decoded = []
    for run in re.findall(r"[A-Za-z0-9+/=]{40,}", text):
        for candidate in (run, run[::-1]):
            try:
                decoded.append(base64.b64decode(candidate, validate=True).decode("utf-8", "replace"))
            except ValueError:
                pass
    return decoded


for _assignment in GRADED_ASSIGNMENTS:
    _name = "TestDemoClass_" + _assignment
    globals()[_name] = type(_name, (GradedDemoClass,), {"assignment": _assignment})
