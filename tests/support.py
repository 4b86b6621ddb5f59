"""What several test modules share: course copies, CUDA branches run on CPU stand-ins, nbgrader's
Validator as the Validate button calls it, and a JupyterLab server for the browser tests.
Fixtures live in conftest.py; plain helpers live here, imported as `from support import ...`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import textwrap
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbconvert.filters import strip_ansi
from nbgrader.api import Gradebook
from nbgrader.validator import Validator

from course_tools.cells import grade_id
from course_tools.cells import is_test as is_test_cell
from course_tools.jobs.class_report import read_scores
from course_tools.jobs.demo_class import DEMO_CELL_TIMEOUT_S, DEMO_ROOT, write_submissions
from course_tools.jobs.grade_demo_class import GradedSubmission
from course_tools.jobs.nbgrader_course import (
    load_config,
    open_course,
    require_success,
)
from course_tools.lessons import REPO_ROOT

SCREENSHOTS = REPO_ROOT / "test-artifacts" / "screenshots"

# Chromium for the browser tests: Debian's, or CHROMIUM=/path/to/chrome.
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",  # Chromium refuses to start as root with its sandbox; CI containers run as root
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
VIEWPORT = {"width": 1280, "height": 900}
# Generous: a notebook takes 10-20 s on a 2-core CPU, but CI machines are slow and shared.
PAGE_TIMEOUT_MS = 120_000


def missing_browser_prerequisite() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return ("the browser tests need Playwright for Python: pip install 'playwright>=1.48,<2' "
                "(it is in requirements-test.txt; `make setup` installs it)")
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return (f"the browser tests need Chromium at {CHROMIUM}: apt-get install chromium "
                "(or point CHROMIUM at a Chromium or Chrome binary)")
    return None


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1"}


def copy_course(destination: Path) -> Path:
    """A course folder holding only what a teacher authors: source/ and nbgrader_config.py."""
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO_ROOT / "source", destination / "source",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    shutil.copy(REPO_ROOT / "nbgrader_config.py", destination / "nbgrader_config.py")
    return destination


def cuda_branch(lesson: str, cell_id: str) -> str:
    """The body of `if device.type == "cuda":` in a source notebook's cell, dedented: what a GPU
    runs and CI never does, for tests that run it on CPU stand-ins."""
    notebook = next((REPO_ROOT / "source" / lesson).glob("*.ipynb"))
    cell = next(c.source for c in nbformat.read(notebook, as_version=4).cells if c.get("id") == cell_id)
    lines = cell.splitlines()
    start = lines.index('if device.type == "cuda":')
    body = []
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):
            break
        body.append(line)
    return textwrap.dedent("\n".join(body))


def grade_demo_class(root: Path, assignment: str, demo_root: Path = DEMO_ROOT,
                     cell_timeout: int | None = DEMO_CELL_TIMEOUT_S) -> list[GradedSubmission]:
    """Hand in the demo class, autograde it in one call, write feedback, and read the gradebook."""
    api = open_course(root, cell_timeout)
    submissions = write_submissions(root, assignment, demo_root)
    started = time.time()
    require_success(api.autograde(assignment, "*", force=True, create=True), f"autograde {assignment}")
    seconds = grading_seconds(Path(root), assignment, [s.student for s in submissions], started)
    require_success(api.generate_feedback(assignment, force=True), f"generate_feedback {assignment}")
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gradebook:
        recorded = read_scores(gradebook, assignment)
    graded = []
    for submission in submissions:
        if submission.student not in recorded:
            raise RuntimeError(f"{submission.student} has no grades for {assignment} in the gradebook")
        graded.append(GradedSubmission(submission, *recorded[submission.student],
                                       seconds=seconds.get(submission.student)))
    return graded


def grade_students_again(root: Path, assignment: str, students: list[str], folder: Path,
                         **executor_options) -> dict[str, dict]:
    """Copy the course at `root` (its release, sources, gradebook and these students' submissions)
    into `folder`, autograde `students` there with GuardedExecute's `executor_options`, and return
    each student's scores by test cell. The course at `root` is not touched."""
    copy = folder / "course"
    left_out = shutil.ignore_patterns("autograded", "feedback", "submitted", "reports")
    shutil.copytree(root, copy, ignore=left_out)
    for student in students:
        shutil.copytree(root / "submitted" / student, copy / "submitted" / student)
    api = open_course(copy, DEMO_CELL_TIMEOUT_S)
    for name, value in executor_options.items():   # read by each nbgrader app the API starts
        setattr(api.config.GuardedExecute, name, value)
    for student in students:
        require_success(api.autograde(assignment, student, force=True, create=True), f"autograde {student}")
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gradebook:
        recorded = read_scores(gradebook, assignment)
    return {student: recorded[student][0] for student in students}


def grading_seconds(root: Path, assignment: str, students: list[str], started: float) -> dict[str, float]:
    """How long each submission took inside the one autograde call: nbgrader grades them one after
    another and writes each autograded notebook when it is done, so the gaps between those writes
    are the per-submission times."""
    finished = {}
    for student in students:
        notebooks = list((root / "autograded" / student / assignment).glob("*.ipynb"))
        if notebooks:
            finished[student] = max(path.stat().st_mtime for path in notebooks)
    seconds, previous = {}, started
    for student, when in sorted(finished.items(), key=lambda item: item[1]):
        seconds[student], previous = when - previous, when
    return seconds


def validate(course, path: Path, forked: bool = False) -> dict:
    """What the Validate button reports: the Validator configured by the course's nbgrader_config.py
    (the button reads nbgrader_config.py from the directory JupyterLab was started in). forked: its
    kernel forked from one that has imported torch (tests/forked_kernels.py), not started afresh."""
    config = load_config(course)
    if forked:
        from forked_kernels import ForkedKernelManager

        config.Execute.kernel_manager_class = ForkedKernelManager
    return Validator(config=config).validate(str(path))


def failed_cells(results: dict, notebook) -> dict[str, str]:
    """grade id -> error text (ANSI colours removed) of each cell the Validator reports as failing."""
    assert set(results) <= {"failed"}, f"Validate reported {sorted(results)}, not only failures: {results}"
    by_source = {cell.source.strip(): grade_id(cell) for cell in notebook.cells if is_test_cell(cell)}
    failed = {}
    for entry in results.get("failed", []):
        assert entry["source"] in by_source, f"Validate failed on a cell that is not a test cell: {entry}"
        failed[by_source[entry["source"]]] = strip_ansi(entry["raw_error"])
    return failed


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    log: Path
    shutdowns: list[threading.Thread] = field(default_factory=list)

    def api(self, method: str, path: str):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def shut_down_kernels(self) -> None:
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")

    def shut_down_kernels_soon(self) -> None:
        """Shut the kernels down without waiting for them to exit (a kernel that imported
        torch takes seconds); the next notebook's kernel starts meanwhile."""
        sessions = self.api("GET", "/api/sessions")
        thread = threading.Thread(daemon=True, target=lambda: [
            self.api("DELETE", f"/api/sessions/{session['id']}") for session in sessions])
        thread.start()
        self.shutdowns.append(thread)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def lab_environment(home: Path) -> dict[str, str]:
    """This environment's Jupyter, with every per-user Jupyter folder in `home`, so that nothing
    of the user's (kernels, settings, workspaces) comes in and nothing of the test leaks out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    folders = {
        "JUPYTER_CONFIG_DIR": home / "config",
        "JUPYTER_DATA_DIR": home / "data",
        "JUPYTER_RUNTIME_DIR": home / "runtime",
        "JUPYTERLAB_SETTINGS_DIR": home / "config" / "lab" / "user-settings",
        "JUPYTERLAB_WORKSPACES_DIR": home / "config" / "lab" / "workspaces",
        "IPYTHONDIR": home / "ipython",
        "MPLCONFIGDIR": home / "matplotlib",
    }
    for name, folder in folders.items():
        folder.mkdir(parents=True, exist_ok=True)
        env[name] = str(folder)
    # Kernelspecs from this environment first: `python3` runs this Python (torch, helpers).
    env["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
    # nbgrader runs the `alembic` command of its own environment (formgrader's gradebook).
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def write_lab_config(home: Path) -> None:
    config = {
        "ServerApp": {"open_browser": False, "allow_root": True, "port_retries": 0},
        # No network: no news feed, no update check, no extension manager talking to PyPI.
        "LabApp": {
            "news_url": None,
            "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
            "extension_manager": "readonly",
            # window.jupyterapp: the tests read the notebook model (outputs) as JupyterLab holds it.
            "expose_app_in_browser": True,
        },
    }
    (home / "config" / "jupyter_server_config.json").write_text(json.dumps(config, indent=1))
    settings = {
        # Without this, a toast asking about Jupyter news covers a corner of every screenshot.
        "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        # No empty page below the last cell in the screenshots.
        "notebook-extension/tracker": {"scrollPastEnd": False},
    }
    for name, values in settings.items():
        path = home / "config" / "lab" / "user-settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


