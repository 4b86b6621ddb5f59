"""nbgrader's whole release cycle, through its own Python API and exchange, in a throw-away exchange.

The teacher generates and releases one assignment to an exchange folder under tmp_path; two
students, alice and bob, each with a home folder and a submission cache of their own, fetch it,
fill it in and submit; the teacher collects, autogrades the class in one call, generates the
feedback and releases it; the students fetch their feedback. Alice hands in the worked solution,
bob a demo submission with one mistake (demo_class/<assignment>/<bob's file>.py).

nbgrader's exchange takes the student's name from the OS user (nbgrader.utils.get_username); the
test patches it where the exchange modules imported it, so that one process can be both students.
"""

import html
import importlib
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange import ExchangeFactory
from nbgrader.utils import capture_log
from support import copy_course
from traitlets.config import Config

from course_tools.cells import hidden_test_lines, notebook_cells
from course_tools.jobs.class_report import read_scores
from course_tools.jobs.demo_class import build_notebook, demo_file, parse_submission
from course_tools.jobs.nbgrader_course import generate_release, load_config, require_success

pytestmark = [
    pytest.mark.slow,
    # NbGraderAPI.release_feedback passes `authentictor=` (sic) to the exchange; traitlets warns.
    pytest.mark.filterwarnings("ignore:Passing unrecognized arguments:DeprecationWarning"),
]

# The assignment whose notebook grades fastest on a CPU (about 7 s a student), and bob's mistake.
ASSIGNMENT = "04_memory"
BOB_DEMO = "one_segment"
STUDENTS = {"alice": "reference", "bob": BOB_DEMO}

# The exchange modules that call get_username() to learn who the student is.
_USERNAME_MODULES = ("nbgrader.exchange.default.submit", "nbgrader.exchange.default.fetch_feedback")


def teacher_api(course: Path, exchange: Path) -> NbGraderAPI:
    """The teacher's NbGraderAPI: the course's own nbgrader_config.py plus the exchange's location."""
    config = load_config(course)
    config.Exchange.root = str(exchange)
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


class Student:
    """A student's side of the exchange: a home folder, a submission cache, and the course id
    (what a student's ~/.jupyter/nbgrader_config.py, or the hub's global one, would set)."""

    def __init__(self, name: str, home: Path, exchange: Path, course_id: str, monkeypatch):
        self.name, self.home, self.monkeypatch = name, home, monkeypatch
        home.mkdir(parents=True)
        self.config = Config()
        self.config.CourseDirectory.course_id = course_id
        self.config.CourseDirectory.root = str(home)
        self.config.Exchange.root = str(exchange)
        self.config.Exchange.cache = str(home / ".local" / "share" / "jupyter" / "nbgrader_cache")
        self.config.Exchange.assignment_dir = str(home)

    def _run(self, step: str, assignment: str) -> dict:
        """One exchange step (FetchAssignment, Submit, FetchFeedback) as this student's OS user."""
        for module in _USERNAME_MODULES:
            self.monkeypatch.setattr(importlib.import_module(module), "get_username", lambda: self.name)
        coursedir = CourseDirectory(config=self.config)
        coursedir.assignment_id = assignment
        factory = ExchangeFactory(config=self.config)
        app = getattr(factory, step)(coursedir=coursedir, authenticator=Authenticator(config=self.config))
        return require_success(capture_log(app), f"{self.name}: {step} {assignment}")

    def fetch_assignment(self, assignment: str) -> dict:
        return self._run("FetchAssignment", assignment)

    def submit(self, assignment: str) -> dict:
        return self._run("Submit", assignment)

    def fetch_feedback(self, assignment: str) -> dict:
        return self._run("FetchFeedback", assignment)


def page_text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", path.read_text()))


def error_messages(path: Path) -> list[str]:
    """The error outputs a feedback page shows (nbgrader's feedback template), as plain text."""
    blocks = re.findall(r'<div class="[^"]*\boutput_error\b[^"]*">(.*?)</div>', path.read_text(), re.DOTALL)
    return [html.unescape(re.sub(r"<[^>]+>", "", block)).strip() for block in blocks]


@pytest.fixture(scope="module")
def cycle(tmp_path_factory):
    """Play the release cycle once; the tests below check what each step left behind."""
    base = tmp_path_factory.mktemp("release_cycle")
    course = copy_course(base / "course")
    exchange = base / "exchange"  # release_assignment creates it, world-writable, as nbgrader does
    demo = {name: parse_submission(demo_file(ASSIGNMENT, file)) for name, file in STUDENTS.items()}

    with pytest.MonkeyPatch.context() as monkeypatch:
        # nbgrader runs the `alembic` command of its environment; the venv may not be activated.
        monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        api = teacher_api(course, exchange)
        course_id = api.coursedir.course_id

        # The teacher: source/ -> release/ -> the exchange's outbound folder.
        generate_release(api, ASSIGNMENT)
        require_success(api.release_assignment(ASSIGNMENT), f"release_assignment {ASSIGNMENT}")

        # The students: fetch into their home, fill the notebooks in, submit.
        students = {name: Student(name, base / "home" / name, exchange, course_id, monkeypatch)
                    for name in STUDENTS}
        fetched = {}
        for name, student in students.items():
            student.fetch_assignment(ASSIGNMENT)
            fetched[name] = sorted((student.home / ASSIGNMENT).glob("*.ipynb"))
            for path in fetched[name]:
                source_nb = nbformat.read(course / "source" / ASSIGNMENT / path.name, as_version=4)
                released_nb = nbformat.read(path, as_version=4)
                nbformat.write(build_notebook(demo[name], source_nb, released_nb), path)
            student.submit(ASSIGNMENT)

        # The teacher: collect, grade the class in one call, write and release the feedback.
        require_success(api.collect(ASSIGNMENT), f"collect {ASSIGNMENT}")
        require_success(api.autograde(ASSIGNMENT, "*"), f"autograde {ASSIGNMENT}")
        require_success(api.generate_feedback(ASSIGNMENT), f"generate_feedback {ASSIGNMENT}")
        require_success(api.release_feedback(ASSIGNMENT), f"release_feedback {ASSIGNMENT}")

        # The students: fetch their feedback.
        for student in students.values():
            student.fetch_feedback(ASSIGNMENT)

        with Gradebook(api.coursedir.db_url, course_id) as gradebook:
            scores = read_scores(gradebook, ASSIGNMENT)
    return SimpleNamespace(course=course, exchange=exchange, course_id=course_id, demo=demo,
                           students=students, fetched=fetched, scores=scores)


def test_each_student_fetched_the_released_notebooks(cycle):
    released = sorted(p.name for p in (cycle.course / "release" / ASSIGNMENT).glob("*.ipynb"))
    outbound = cycle.exchange / cycle.course_id / "outbound" / ASSIGNMENT
    assert sorted(p.name for p in outbound.glob("*.ipynb")) == released
    for name in STUDENTS:
        assert [p.name for p in cycle.fetched[name]] == released, f"{name} did not fetch the release"


def test_the_exchange_holds_one_submission_per_student(cycle):
    inbound = cycle.exchange / cycle.course_id / "inbound"
    owners = sorted(p.name.split("+")[0] for p in inbound.iterdir())
    assert owners == sorted(STUDENTS), "each submission is named after the student who made it"


def test_collect_files_each_submission_under_its_student(cycle):
    for name in STUDENTS:
        folder = cycle.course / "submitted" / name / ASSIGNMENT
        assert (folder / "timestamp.txt").is_file(), f"{name}'s submission was not collected"
        assert sorted(p.name for p in folder.glob("*.ipynb")) == [p.name for p in cycle.fetched[name]]


def test_alice_gets_every_point(cycle):
    scores, max_scores = cycle.scores["alice"]
    assert scores and sum(max_scores.values()) > 0
    assert scores == max_scores, "the worked solution should get every point"


def test_bob_loses_exactly_his_mistake(cycle):
    scores, max_scores = cycle.scores["bob"]
    declared = set(cycle.demo["bob"].loses)
    assert declared, f"{BOB_DEMO} should declare the test cells it fails ('# loses:')"
    lost = {cell for cell, score in scores.items() if score < max_scores[cell]}
    assert lost == declared, f"bob lost {sorted(lost)}, expected {sorted(declared)}"
    assert all(scores[cell] == 0 for cell in declared)
    assert sum(scores.values()) == sum(m for cell, m in max_scores.items() if cell not in declared)


@pytest.mark.parametrize("name", sorted(STUDENTS))
def test_each_student_fetches_their_own_feedback(cycle, name):
    home = cycle.students[name].home
    pages = sorted((home / ASSIGNMENT / "feedback").glob("*/*.html"))
    assert [p.stem for p in pages] == [p.stem for p in cycle.fetched[name]], (
        f"{name} should have fetched one feedback page per notebook into {home / ASSIGNMENT / 'feedback'}")
    for page in pages:
        generated = cycle.course / "feedback" / name / ASSIGNMENT / page.name
        assert page.read_bytes() == generated.read_bytes(), f"{name} fetched someone else's feedback"


@pytest.mark.parametrize("name", sorted(STUDENTS))
def test_feedback_shows_the_mistake_without_hidden_tests(cycle, name):
    pages = sorted((cycle.students[name].home / ASSIGNMENT / "feedback").glob("*/*.html"))
    assert pages
    text = "\n".join(page_text(p) for p in pages)
    assert "BEGIN HIDDEN TESTS" not in text
    shown = {line.strip() for line in text.splitlines()}
    leaked = hidden_test_lines(notebook_cells((cycle.course / "source" / ASSIGNMENT).glob("*.ipynb"))) & shown
    assert not leaked, f"{name}'s feedback shows hidden test code: {sorted(leaked)[:2]}"
    # The phrase must be in a failure message, not merely in the (visible) test code of the page.
    errors = [message for page in pages for message in error_messages(page)]
    says = cycle.demo[name].says
    if cycle.demo[name].loses:
        assert any(says in message for message in errors), (
            f"{name}'s feedback should report {says!r}; its errors are {errors}")
    else:
        assert errors == [], f"{name}'s feedback reports failures: {errors}"
