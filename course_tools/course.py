"""Open the course through nbgrader's Python API and regenerate its generated views."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbgrader.apps import NbGraderAPI
from nbgrader.converters import GenerateSolution
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from nbgrader.utils import capture_log, temp_attrs
from traitlets.config import Config, PyFileConfigLoader

from course_tools.lessons import REPO_ROOT, assignment_ids


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


def hidden_test_lines(notebook_paths) -> set[str]:
    """The meaningful lines that stand only between BEGIN and END HIDDEN TESTS in these notebooks:
    what release/ and feedback must never show."""
    hidden, visible = set(), set()
    for path in notebook_paths:
        inside = False
        for cell in nbformat.read(path, as_version=4).cells:
            for line in cell.source.splitlines():
                if "BEGIN HIDDEN TESTS" in line:
                    inside = True
                elif "END HIDDEN TESTS" in line:
                    inside = False
                elif len(line.strip()) > 12 and not line.strip().startswith(("#", ")", "]")):
                    (hidden if inside else visible).add(line.strip())
    return hidden - visible


def require_success(result: dict, what: str) -> dict:
    """Raise CourseError with nbgrader's log when an API call reports failure."""
    if not result.get("success"):
        raise CourseError(f"{what} failed:\n{result.get('error', '')}\n{result.get('log', '')}")
    return result


def generate_release(api: NbGraderAPI, assignment: str) -> None:
    """Write release/<assignment>/: the student version, without solutions or hidden tests."""
    require_success(api.generate_assignment(assignment, force=True), f"generate_assignment {assignment}")


# The student's release tags the cells that raise until an exercise is done (its test cell, and a
# demonstration that calls the student's function), so that Run All goes on past them.
UNTIL_SOLVED_TAG = "raises-exception"


class DropUntilSolvedTags(NbGraderPreprocessor):
    """In the worked solution every cell must run cleanly: nbval and the executing step would
    accept an error from a cell tagged raises-exception, so the solution view drops the tag."""

    def preprocess_cell(self, cell, resources, index):
        tags = cell.metadata.get("tags")
        if tags and UNTIL_SOLVED_TAG in tags:
            cell.metadata["tags"] = [tag for tag in tags if tag != UNTIL_SOLVED_TAG]
            if not cell.metadata["tags"]:
                del cell.metadata["tags"]
        return cell, resources


def generate_solution(api: NbGraderAPI, assignment: str, execute: bool = True) -> None:
    """Write notebooks/<assignment>/: the worked solution, executed top to bottom (or, with
    execute=False, only its cells: enough to tell whether the committed one is stale)."""
    with temp_attrs(api.coursedir, assignment_id=assignment):
        app = GenerateSolution(coursedir=api.coursedir, parent=api)
        app.force = True
        app.preprocessors = [DropUntilSolvedTags, *app.preprocessors]
        if not execute:
            app.preprocessors = [p for p in app.preprocessors if p is not Execute]
        result = capture_log(app)
    require_success(result, f"generate_solution {assignment}")


def regenerate(root: Path = REPO_ROOT, assignments: list[str] | None = None) -> list[str]:
    """Regenerate release/ and notebooks/ from source/ for the given (default: all) assignments."""
    api = open_course(root)
    chosen = assignments or assignment_ids(root)
    for assignment in chosen:
        print(f"regenerating {assignment}: release/ ...", flush=True)
        generate_release(api, assignment)
        print(f"regenerating {assignment}: notebooks/ (executing the solution) ...", flush=True)
        generate_solution(api, assignment)
    return chosen


def main() -> None:
    regenerate()


if __name__ == "__main__":
    main()
