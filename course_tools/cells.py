"""nbgrader's metadata on a notebook cell, read in one place (dicts and NotebookNodes alike).

nbgrader keeps a cell's role under metadata["nbgrader"]: `grade_id`, `solution` (the student
writes it), `grade` (it carries points; a test cell when it is code and not a solution) and
`locked` (read-only). A student can edit metadata, so every reader tolerates it being absent or
of the wrong type.
"""

from __future__ import annotations

import nbformat


def nbgrader_metadata(cell) -> dict:
    """The cell's nbgrader metadata, {} when it has none (or something that is not a dict)."""
    metadata = cell.get("metadata", {})
    grading = metadata.get("nbgrader", {}) if isinstance(metadata, dict) else {}
    return grading if isinstance(grading, dict) else {}


def grade_id(cell) -> str | None:
    return nbgrader_metadata(cell).get("grade_id")


def is_solution(cell) -> bool:
    return bool(nbgrader_metadata(cell).get("solution"))


def is_test(cell) -> bool:
    """A graded code cell the student does not write: an exercise's test (or a quick check's)."""
    grading = nbgrader_metadata(cell)
    return cell.get("cell_type") == "code" and bool(grading.get("grade")) and not grading.get("solution")


def is_read_only(cell) -> bool:
    """A locked or graded code cell that is not a solution: nbgrader restores its source before grading."""
    grading = nbgrader_metadata(cell)
    read_only = bool(grading.get("locked") or grading.get("grade"))
    return cell.get("cell_type") == "code" and read_only and not grading.get("solution")


def notebook_cells(paths):
    """Every cell of the notebooks at these paths, in order."""
    for path in paths:
        yield from nbformat.read(path, as_version=4).cells


def hidden_test_lines(cells) -> set[str]:
    """The meaningful lines that stand only between BEGIN and END HIDDEN TESTS in these cells:
    what release/ and feedback must never show."""
    hidden, visible = set(), set()
    for cell in cells:
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif len(line.strip()) > 12 and not line.strip().startswith(("#", ")", "]")):
                (hidden if inside else visible).add(line.strip())
    return hidden - visible


# Where the grader records, on a test cell of an autograded notebook, the name of the mistake its
# failure diagnosed (helpers.diagnosis.mistake). The grader clears it from every cell it is handed,
# so the class report never reads one that a student wrote into their notebook's metadata.
DIAGNOSIS_KEY = "course_diagnosis"


def _recorded(cell, key: str) -> str | None:
    """The string the grader recorded under `key` in the cell's metadata, or None."""
    metadata = cell.get("metadata", {})
    value = metadata.get(key) if isinstance(metadata, dict) else None
    return value if type(value) is str else None


def recorded_diagnosis(cell) -> str | None:
    return _recorded(cell, DIAGNOSIS_KEY)


# Where the grader records, on a cell of an autograded notebook, that its own limits or integrity
# checks ended it (course_tools.grading.outcomes: a cell past its time, a kernel that died, a
# notebook out of time, a test whose integrity failed, a message that did not verify). A kernel can
# print an error of any name, never write a cell's metadata; the grader clears this key too.
GRADER_OUTCOME_KEY = "course_grader_outcome"


def grader_outcome(cell) -> str | None:
    """The name of the grader's own error the grader recorded on `cell` (outcomes.py), or None."""
    return _recorded(cell, GRADER_OUTCOME_KEY)


# Where the grader records, in an autograded notebook's metadata, whether it read the memory of
# every kernel that ran the notebook from outside (a memory cgroup of the kernel's own): False
# means memory-judged clauses fell back to the kernel's own evidence. Cleared before grading.
MEMORY_MEASURED_KEY = "course_memory_measured"
