"""`make views`: regenerate release/ (the student version) and notebooks/ (the worked solution,
executed) from source/."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

from nbgrader.apps import NbGraderAPI
from nbgrader.converters import GenerateSolution
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from nbgrader.utils import capture_log, temp_attrs

from course_tools.jobs.nbgrader_course import generate_release, open_course, require_success
from course_tools.lessons import REPO_ROOT, assignment_ids

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
    with tempfile.TemporaryDirectory(prefix="views-kernel-") as sockets, \
            temp_attrs(api.coursedir, assignment_id=assignment):
        # ipykernel warns at every start that TCP is unencrypted. Its ipc sockets go in a private
        # folder: by default they would land in the assignment's folder, and be copied with it.
        config = copy.deepcopy(api.config)
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(Path(sockets) / "kernel")
        # No per-cell execution timestamps: they changed every committed notebook on each run.
        config.Execute.record_timing = False
        app = GenerateSolution(coursedir=api.coursedir, parent=api, config=config)
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
