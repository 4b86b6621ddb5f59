"""The course as nbgrader's Python API sees it: opened with its own configuration, every call checked.

The jobs share this: `make views` writes the student version with `generate_release`, `make course`
and `make grade` open the gradebook with `open_course`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config, PyFileConfigLoader

from course_tools.lessons import REPO_ROOT


class CourseError(RuntimeError):
    """An nbgrader step failed; the message carries nbgrader's own log."""


def load_config(root: Path = REPO_ROOT) -> Config:
    """Load root/nbgrader_config.py exactly as the nbgrader command line does, rooted at `root`."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.CourseDirectory.root = str(Path(root).resolve())
    return config


def put_environment_on_path() -> None:
    # nbgrader runs the `alembic` command to check the gradebook's schema; when this Python runs
    # from a virtual environment that was not activated, its bin/ is not on PATH.
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def open_course(root: Path = REPO_ROOT, cell_timeout: int | None = None,
                db_url: str | None = None) -> NbGraderAPI:
    """An NbGraderAPI on the course at `root` (its gradebook is root/gradebook.db unless `db_url`
    names another); `cell_timeout` replaces the configured seconds per cell while grading."""
    put_environment_on_path()
    config = load_config(root)
    if cell_timeout is not None:
        config.Execute.timeout = cell_timeout
    if db_url is not None:
        config.CourseDirectory.db_url = db_url
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def require_success(result: dict, what: str) -> dict:
    """Raise CourseError with nbgrader's log when an API call reports failure."""
    if not result.get("success"):
        raise CourseError(f"{what} failed:\n{result.get('error', '')}\n{result.get('log', '')}")
    return result


def generate_release(api: NbGraderAPI, assignment: str) -> None:
    """Write release/<assignment>/: the student version, without solutions or hidden tests."""
    require_success(api.generate_assignment(assignment, force=True), f"generate_assignment {assignment}")
