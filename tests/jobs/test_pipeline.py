"""The generated views: release/ leaks nothing, and release/ and notebooks/ are current with source/."""

import re
from pathlib import Path

import nbformat
import pytest

from course_tools.cells import hidden_test_lines, notebook_cells
from course_tools.cells import nbgrader_metadata as nbgrader_meta
from course_tools.jobs.build_views import generate_solution
from course_tools.jobs.nbgrader_course import open_course
from course_tools.lessons import REPO_ROOT, assignment_ids

ASSIGNMENTS = assignment_ids(REPO_ROOT)
GRADE_ID = re.compile(r"^(setup|ex\d+_(spec|\d+_(solution|test)))$")


def notebooks_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def source_notebooks():
    return [p for a in ASSIGNMENTS for p in notebooks_of(REPO_ROOT / "source" / a)]


def test_there_is_something_to_check():
    assert ASSIGNMENTS, "source/ holds no assignment"
    for assignment in ASSIGNMENTS:
        assert notebooks_of(REPO_ROOT / "release" / assignment), f"release/{assignment} is missing"
        assert notebooks_of(REPO_ROOT / "notebooks" / assignment), f"notebooks/{assignment} is missing"


@pytest.mark.parametrize("path", source_notebooks(), ids=lambda p: p.parent.name)
def test_source_is_authored_cleanly(path):
    """Source notebooks carry no outputs, unique grade ids in the exN_k scheme, and points on tests."""
    notebook = nbformat.read(path, as_version=4)
    ids = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: commit source/ without outputs ({cell.source[:40]!r})"
        meta = nbgrader_meta(cell)
        if meta.get("grade_id"):
            ids.append(meta["grade_id"])
            assert GRADE_ID.match(meta["grade_id"]), f"grade id {meta['grade_id']} breaks the exN_k scheme"
        if meta.get("grade"):
            assert meta.get("points", 0) > 0 and meta.get("locked"), f"{meta['grade_id']}: points, locked"
        if meta.get("grade") and not meta.get("solution"):
            # A student reads a test cell in the notebook's own width, without scrolling sideways.
            long_lines = [line for line in cell.source.splitlines() if len(line) >= 100]
            assert not long_lines, (
                f"{meta['grade_id']}: test cell lines stay under 100 characters: {long_lines}")
        if meta.get("solution"):
            assert "### BEGIN SOLUTION" in cell.source, f"{meta['grade_id']} has no solution region"
        # nbval reads its markers from cell tags (nbval-check-output...): students read no harness comments.
        assert "NBVAL_" not in cell.source, f"{path.name}: use an nbval-* cell tag ({cell.source[:40]!r})"
    assert len(ids) == len(set(ids)), f"{path.name}: grade ids repeat"
    assert any("nbval-check-output" in cell.metadata.get("tags", []) for cell in notebook.cells), (
        f"{path.name}: no cell has its output checked by nbval")


def test_release_holds_no_solution_or_hidden_test():
    """Everything under release/ is what students get: no solution, no hidden test, stubs in place."""
    hidden = set().union(*(hidden_test_lines(notebook_cells([p])) for p in source_notebooks()))
    assert hidden, "the source notebooks should have hidden tests"
    for path in (REPO_ROOT / "release").rglob("*"):
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            assert marker not in text, f"{path} contains '{marker}'"
        if path.suffix == ".ipynb":
            lines = {line.strip() for cell in nbformat.read(path, as_version=4).cells
                     for line in cell.source.splitlines()}
        else:
            lines = {line.strip() for line in text.splitlines()}
        leaked = sorted(hidden & lines)
        assert not leaked, f"{path} leaks hidden test lines, e.g. {leaked[:2]}"
        if path.suffix == ".ipynb":
            for cell in nbformat.read(path, as_version=4).cells:
                if nbgrader_meta(cell).get("solution"):
                    assert "raise NotImplementedError" in cell.source, f"{path}: a solution cell has no stub"


def test_committed_release_is_current(released_course):
    """release/ is exactly what nbgrader generates from source/ now (run `make views`)."""
    for assignment in ASSIGNMENTS:
        fresh = released_course / "release" / assignment
        committed = REPO_ROOT / "release" / assignment
        fresh_files = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
        committed_files = sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
        assert fresh_files == committed_files, f"release/{assignment} has other files than source/ makes"
        for name in fresh_files:
            assert (fresh / name).read_bytes() == (committed / name).read_bytes(), (
                f"release/{assignment}/{name} is stale: run `make views` and commit release/")


def cells_without_outputs(path: Path) -> list[tuple]:
    notebook = nbformat.read(path, as_version=4)
    return [(c.cell_type, c.source, nbgrader_meta(c)) for c in notebook.cells]


@pytest.mark.slow
def test_committed_solutions_are_current(released_course):
    """notebooks/ holds the executed solution of today's source/. Outputs differ run to run, so
    the cells are compared without running them again; nbval runs the committed ones."""
    api = open_course(released_course)
    for assignment in ASSIGNMENTS:
        generate_solution(api, assignment, execute=False)
        fresh = notebooks_of(released_course / "notebooks" / assignment)
        committed = notebooks_of(REPO_ROOT / "notebooks" / assignment)
        assert [p.name for p in fresh] == [p.name for p in committed], f"notebooks/{assignment}: other files"
        for fresh_path, committed_path in zip(fresh, committed, strict=True):
            assert cells_without_outputs(fresh_path) == cells_without_outputs(committed_path), (
                f"notebooks/{assignment}/{committed_path.name} is stale: run `make views` and commit it")
            executed = nbformat.read(committed_path, as_version=4)
            assert all(c.get("execution_count") for c in executed.cells if c.cell_type == "code"), (
                f"notebooks/{assignment}/{committed_path.name} was not executed top to bottom")


def test_executed_notebooks_hold_no_widget_views():
    """A widget's output names a model only its kernel holds: reopened with a new kernel, JupyterLab
    shows "Error displaying widget: model not found" there. Progress bars end as a line of text."""
    for assignment in ASSIGNMENTS:
        for path in notebooks_of(REPO_ROOT / "notebooks" / assignment):
            for cell in nbformat.read(path, as_version=4).cells:
                for output in cell.get("outputs", []):
                    assert "application/vnd.jupyter.widget-view+json" not in output.get("data", {}), (
                        f"{path.name}: a widget view is saved in {cell.source[:40]!r}")
