"""The demo class: realistic submissions, each built from the release notebook plus a student's cells.

A submission is described by demo_class/<assignment>/<kind folder>/<student>.py, the folder
saying what kind of student it is (KIND_FOLDERS: alternatives/, mistakes/, broken/, attacks/);
the worked solution and the untouched release stand at the assignment's top, as reference.py and
untouched.py. A demo root that a test writes may hold every file at the top: each kind is then
read from the name and the points it loses (kind_of).

    # about: what the student did
    # base: solution | release
    # loses: ex1_1_test [more grade ids of test cells that must fail]
    # says: a phrase its feedback must contain (the diagnosis the student should read)
    # delete: ex5_1_test [more grade ids of cells the student deleted from the notebook]
    # move: ex1_1_test before ex1_1_solution    (the student moved a cell)
    # retype: ex2_1_test markdown               (the student changed a cell's type)
    # paste: ex1_1_test after ex1_1_test        (the student pasted a copy of a cell, metadata and all)
    # file: grades.db -> link gradebook.db      (one line per file handed in beside the notebook: a
    # file: pipe -> fifo                         link to a path of the course, a named pipe, or a text
    # file: memory.ipynb -> text {"cells": [    file; a notebook's own name replaces the notebook)
    # note: a phrase the grader's note at the top of its feedback must show
    # needs: sandbox                            (grades as declared only in a sandboxed grader; "memory
    #                                            cgroup": only where each kernel gets one of its own)
    # validate-misses: ex3_1_test  why          (a test cell lost at grading that Validate cannot
    #                                            report, and why: docs/demo-class.md lists the reasons)
    # %% ex1_1_solution
    <the student's code for that cell: a solution cell, or a read-only cell they edited>

With base "solution" every solution cell holds the worked answer from source/ (as a student
would type it, without the solution markers) unless the file gives its own code for that cell.
With base "release" the notebook is handed in exactly as it was released.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_tools.cells import grade_id, is_solution
from course_tools.lessons import REPO_ROOT

DEMO_ROOT = REPO_ROOT / "demo_class"
# The demo classes hold code that never ends, and a test that calls it runs into the timeout too;
# at the course's CELL_TIMEOUT_S per cell one such student would cost ten minutes. Every honest cell of
# the demo class runs in a few seconds, so it is graded under this timeout instead.
DEMO_CELL_TIMEOUT_S = 20
_HEADER = re.compile(
    r"^# (about|base|loses|says|delete|move|retype|paste|file|note|needs|kind|validate-misses):(.*)$")
_FILE = re.compile(r"^(\S+)\s*->\s*(link|fifo|text)\b\s?(.*)$")
_MISSES = re.compile(r"^(\S+)\s+(\S.*)$")
_CELL = re.compile(r"^# %% (\S+)\s*$")
_MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


@dataclass(frozen=True)
class DemoSubmission:
    """One demo student: what they did, and which test cells it must fail."""

    student: str
    about: str
    base: str
    loses: tuple[str, ...]
    says: str = ""
    deleted: tuple[str, ...] = ()
    moved: tuple[str, str] | None = None
    retyped: tuple[str, str] | None = None
    pasted: tuple[str, str] | None = None
    files: tuple[tuple[str, str, str], ...] = ()
    note: str = ""
    needs_sandbox: bool = False
    needs_memory_cgroup: bool = False
    declared_kind: str = ""   # from its folder (KIND_FOLDERS), when it stands in one
    # grade id of a test cell lost at grading -> why Validate cannot report it
    validate_misses: dict[str, str] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)


KINDS = {
    "reference": "the worked solution",
    "untouched": "the release, handed in untouched",
    "alternative": "correct, written another way",
    "mistake": "a realistic mistake",
    "broken": "broken notebook or runaway code",
    "hostile": "tries to pass without solving",
}


# The folder of each kind of student below an assignment's demo class (reference.py and
# untouched.py stand at its top).
KIND_FOLDERS = {"alternatives": "alternative", "mistakes": "mistake", "broken": "broken",
                "attacks": "hostile"}


def unmet_need(submission: DemoSubmission, sandboxed: bool | None = None) -> str | None:
    """Why this grader cannot grade `submission` as its file declares (its `needs:`), or None.
    `sandboxed`: whether grading runs sandboxed, as the configuration decided (default: whether
    bubblewrap works here)."""
    from course_tools.grading.memory_cgroups import memory_cgroups
    from course_tools.grading.sandbox import sandbox_status

    if sandboxed is None:
        sandboxed = sandbox_status().available
    if submission.needs_sandbox and not sandboxed:
        return f"it grades as declared only in a sandbox: {sandbox_status().message}"
    if submission.needs_memory_cgroup and not memory_cgroups().available:
        return ("it grades as declared only where the grader reads each kernel's memory from its own "
                f"cgroup: {memory_cgroups().description}")
    return None


def kind_of(submission: DemoSubmission) -> str:
    """One of KINDS: the kind its folder says, or read from the name and the points it loses."""
    if submission.declared_kind:
        return submission.declared_kind
    if submission.student in ("reference", "untouched"):
        return submission.student
    if submission.student.startswith("alternative_"):
        return "alternative"
    return "mistake" if submission.loses else "alternative"


def parse_submission(path: Path) -> DemoSubmission:
    """Read one demo_class/<assignment>/<student>.py file."""
    header: dict[str, str] = {}
    files = []
    misses: dict[str, str] = {}
    cells: dict[str, list[str]] = {}
    current = None
    for line in Path(path).read_text().splitlines():
        cell = _CELL.match(line)
        if cell:
            current = cell.group(1)
            if current in cells:
                raise ValueError(f"{path}: cell {current} is given twice")
            cells[current] = []
        elif current is not None:
            cells[current].append(line)
        elif (match := _HEADER.match(line)) and match.group(1) == "file":
            file = _FILE.match(match.group(2).strip())
            if not file:
                raise ValueError(f"{path}: write '# file: <name> -> link <course path>|fifo|text <content>'")
            files.append(file.groups())
        elif match and match.group(1) == "validate-misses":
            missed = _MISSES.match(match.group(2).strip())
            if not missed:
                raise ValueError(f"{path}: write '# validate-misses: <grade_id> <why Validate misses it>'")
            misses[missed.group(1)] = missed.group(2)
        elif match:
            header[match.group(1)] = match.group(2).strip()
    base = header.get("base", "")
    if base not in ("solution", "release"):
        raise ValueError(f"{path}: '# base:' must be 'solution' or 'release', got {base!r}")
    if "about" not in header:
        raise ValueError(f"{path}: add an '# about:' line saying what this student did")
    if "kind" in header:
        raise ValueError(f"{path}: a student's kind is the folder it stands in ({', '.join(KIND_FOLDERS)}), "
                         "not a '# kind:' line")
    return DemoSubmission(
        student=path.stem,
        about=header["about"],
        base=base,
        loses=tuple(header.get("loses", "").split()),
        says=header.get("says", ""),
        deleted=tuple(header.get("delete", "").split()),
        moved=_pair(path, header, "move", "before"),
        retyped=_pair(path, header, "retype", None),
        pasted=_pair(path, header, "paste", "after"),
        files=tuple(files),
        note=header.get("note", ""),
        needs_sandbox=header.get("needs", "") in ("sandbox", "memory cgroup"),
        needs_memory_cgroup=header.get("needs", "") == "memory cgroup",
        declared_kind=KIND_FOLDERS.get(Path(path).parent.name, ""),
        validate_misses=misses,
        cells={name: "\n".join(lines).strip("\n") for name, lines in cells.items()},
    )


def _pair(path: Path, header: dict[str, str], key: str, joiner: str | None) -> tuple[str, str] | None:
    if key not in header:
        return None
    words = header[key].split()
    if joiner:
        if len(words) != 3 or words[1] != joiner:
            raise ValueError(f"{path}: write '# {key}: <grade_id> {joiner} <grade_id>'")
        return words[0], words[2]
    if len(words) != 2:
        raise ValueError(f"{path}: write '# {key}: <grade_id> <cell type>'")
    return words[0], words[1]


def demo_files(assignment: str, demo_root: Path = DEMO_ROOT) -> list[Path]:
    """The files of `assignment`'s demo students: at its top and in its kind folders."""
    folder = Path(demo_root) / assignment
    in_folders = [path for name in KIND_FOLDERS for path in (folder / name).glob("*.py")]
    return sorted([*folder.glob("*.py"), *in_folders], key=lambda path: path.stem)


def demo_file(assignment: str, student: str, demo_root: Path = DEMO_ROOT) -> Path:
    """Where the demo student `student` of `assignment` is written, whichever its kind."""
    found = [path for path in demo_files(assignment, demo_root) if path.stem == student]
    if not found:
        raise ValueError(f"no demo student {student!r} in {Path(demo_root) / assignment}")
    return found[0]


def load_demo_class(assignment: str, demo_root: Path = DEMO_ROOT) -> list[DemoSubmission]:
    """Every demo submission of `assignment`, sorted by student id."""
    paths = demo_files(assignment, demo_root)
    if not paths:
        raise ValueError(f"no demo submissions in {Path(demo_root) / assignment}")
    names = [path.stem for path in paths]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"demo students of {assignment} named twice, in two folders: {repeated}")
    return [parse_submission(path) for path in paths]


def student_code(source_cell_text: str) -> str:
    """A solution cell's text as a student would hand it in: the solution markers removed."""
    return "\n".join(line for line in source_cell_text.splitlines() if not _MARKERS.match(line))


def build_notebook(submission: DemoSubmission, source_nb, release_nb):
    """The notebook this student hands in: the release notebook with their cells filled in."""
    notebook = nbformat.from_dict(release_nb)
    answers = {grade_id(c): student_code(c.source) for c in source_nb.cells
               if is_solution(c)}
    present = {grade_id(c) for c in notebook.cells} - {None}
    named = set(submission.cells) | set(submission.deleted) | set(submission.moved or ()) | (
        {submission.retyped[0]} if submission.retyped else set()) | set(submission.pasted or ())
    unknown = named - present
    if unknown:
        raise ValueError(f"demo student {submission.student} names cells {sorted(unknown)} that the "
                         f"notebook does not have; it has {sorted(present)}")
    notebook.cells = [c for c in notebook.cells if grade_id(c) not in submission.deleted]
    for cell in notebook.cells:
        name = grade_id(cell)
        if name in submission.cells:
            cell.source = submission.cells[name]
        elif submission.base == "solution" and name in answers:
            cell.source = answers[name]
    if submission.moved:
        moving, anchor = submission.moved
        cell = next(c for c in notebook.cells if grade_id(c) == moving)
        notebook.cells.remove(cell)
        position = next(i for i, c in enumerate(notebook.cells) if grade_id(c) == anchor)
        notebook.cells.insert(position, cell)
    if submission.retyped:
        retyped, cell_type = submission.retyped
        position = next(i for i, c in enumerate(notebook.cells) if grade_id(c) == retyped)
        old = notebook.cells[position]
        new = {"markdown": nbformat.v4.new_markdown_cell, "raw": nbformat.v4.new_raw_cell,
               "code": nbformat.v4.new_code_cell}[cell_type](old.source, metadata=old.metadata, id=old.id)
        notebook.cells[position] = new
    if submission.pasted:
        # JupyterLab's paste gives the copy a new cell id and keeps its metadata, grade id included.
        copied, anchor = submission.pasted
        copy = nbformat.from_dict(next(c for c in notebook.cells if grade_id(c) == copied))
        copy.id = f"{copy.get('id', 'cell')[:50]}-pasted"
        position = next(i for i, c in enumerate(notebook.cells) if grade_id(c) == anchor)
        notebook.cells.insert(position + 1, copy)
    return notebook


def _clear(path: Path) -> None:
    # A demo folder written before may hold a link where a notebook goes: writing through it would
    # overwrite what it points to.
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()


def write_files(root: Path, target: Path, submission: DemoSubmission) -> None:
    """The files a demo student hands in beside (or instead of) the notebook."""
    for name, kind, argument in submission.files:
        path = target / name
        _clear(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "link":
            path.symlink_to(Path(root).resolve() / argument)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.write_text(argument + "\n")


def write_submissions(root: Path, assignment: str, demo_root: Path = DEMO_ROOT) -> list[DemoSubmission]:
    """Write root/submitted/<student>/<assignment>/*.ipynb for the whole demo class."""
    root = Path(root)
    submissions = load_demo_class(assignment, demo_root)
    for notebook_path in sorted((root / "release" / assignment).glob("*.ipynb")):
        release_nb = nbformat.read(notebook_path, as_version=4)
        source_nb = nbformat.read(root / "source" / assignment / notebook_path.name, as_version=4)
        for submission in submissions:
            target = root / "submitted" / submission.student / assignment
            target.mkdir(parents=True, exist_ok=True)
            _clear(target / notebook_path.name)
            nbformat.write(build_notebook(submission, source_nb, release_nb), target / notebook_path.name)
    for submission in submissions:
        write_files(root, root / "submitted" / submission.student / assignment, submission)
    return submissions
