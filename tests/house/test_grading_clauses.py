"""docs/grading-clauses.md, the table of what decides each graded clause, against the checks: every
test cell has rows, every mistake a check names is in a row, and every check that measures from
outside the kernel is in a row that says so."""

import ast
import json

import pytest

from course_tools.lessons import REPO_ROOT

TABLE = REPO_ROOT / "docs" / "grading-clauses.md"
DECIDED_BY = {"outcome", "outside limit", "in-kernel evidence",
              "outside limit (in-kernel evidence without a memory cgroup)"}
CHECKS = sorted((REPO_ROOT / "helpers" / "checks").rglob("*.py"))


def rows() -> list[list[str]]:
    found = []
    for line in TABLE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `ex") and len(cells) == 5:
            found.append(cells)
    return found


def test_every_row_says_what_decides_it():
    table = rows()
    assert len(table) > 100
    for test_cell, clause, decided_by, _checks, forged in table:
        assert decided_by in DECIDED_BY, f"{test_cell} {clause!r}: 'decided by' is {decided_by!r}"
        assert (forged == "nothing") == (decided_by == "outcome"), (
            f"{test_cell} {clause!r}: only an outcome is forged by nothing")


def graded_test_cells() -> list[str]:
    cells = []
    for notebook in sorted((REPO_ROOT / "source").glob("*/*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                cells.append(f"{notebook.parent.name[:2]} {meta['grade_id']}")
    return cells


@pytest.mark.parametrize("cell", graded_test_cells())
def test_every_test_cell_has_rows(cell):
    lesson, grade_id = cell.split()
    section = TABLE.read_text().split(f"\n## {lesson} ", 1)[1].split("\n## ", 1)[0]
    assert f"| `{grade_id}` |" in section, f"docs/grading-clauses.md: no row for lesson {lesson}'s {grade_id}"


def literal_mistake_names() -> list[str]:
    names = set()
    for path in CHECKS:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "mistake" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names.add(node.args[0].value)
    return sorted(names)


@pytest.mark.parametrize("name", literal_mistake_names())
def test_every_mistake_a_check_names_is_in_a_row(name):
    assert any(f"`{name}`" in checks for *_, checks, _forged in rows()), (
        f"mistake {name!r} (helpers/checks) is in no row of docs/grading-clauses.md")


def measuring_checks() -> list[str]:
    """The checks that call remote.run_student_measured: the ones a memory peak read outside decides."""
    names = []
    for path in CHECKS:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(call, ast.Attribute) and call.attr == "run_student_measured"
                    for call in ast.walk(node)):
                names.append(node.name)
    return names


def test_a_check_that_measures_from_outside_is_in_an_outside_row():
    assert measuring_checks(), "no check measures memory from outside: this test has nothing to check"
    for name in measuring_checks():
        decided = {decided_by for _cell, _clause, decided_by, checks, _forged in rows()
                   if f"`{name}`" in checks}
        assert decided and all(d.startswith("outside limit") for d in decided), (
            f"{name} measures memory from outside the kernel; its rows say {decided}")
