"""What the grader takes in from a submission, and what feedback may show (course_tools/grading/intake.py,
course_tools/grading/feedback.py): links, special files, folders too deep or too full, unreadable, oversized
and old-format notebooks, pasted cells, marker text, printed hidden tests and files the formgrader
would serve as pages, first on their own, then through nbgrader's autograde and generate_feedback on
a one-exercise course."""

import copy
import html
import json
import logging
import os
import re
import shutil
import socket
import stat
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbgrader.api import Gradebook
from nbgrader.preprocessors import ClearHiddenTests, DeduplicateIds, OverwriteCells
from nbgrader.utils import find_all_files
from tornado.web import StaticFileHandler
from traitlets.log import get_logger

from course_tools.grading import intake
from course_tools.grading.feedback import REDACTED, RedactHiddenTests, keep_only_feedback_pages, redact_text
from course_tools.grading.graded_folder import INERT_TYPES, LOGGED_RENAMES, clean_graded_folder, served_type
from course_tools.grading.intake import (
    PLACEHOLDER_KEY,
    IntakeNotes,
    SubmissionIntake,
    Unreadable,
    read_submitted_notebook,
)
from course_tools.grading.submission_files import enforce_quota, remove_tree, remove_unsafe_entries
from course_tools.jobs.demo_class import parse_submission, write_files
from course_tools.jobs.nbgrader_course import generate_release, open_course
from course_tools.lessons import REPO_ROOT

SECRET = "STUDENT-CONTENT-7f3a"
HIDDEN = 'assert add(40, 2) == 42, "forty-two expected"'
TEST_CELL = ('assert add(1, 2) == 3, "add(1, 2) should be 3"\nprint("visible check passed")\n'
             f"### BEGIN HIDDEN TESTS\n{HIDDEN}\nassert add(-7, 7) == 0 and add(10**12, 1) == 10**12 + 1\n"
             "### END HIDDEN TESTS")


def grading(grade_id, **flags):
    meta = {"grade": False, "solution": False, "locked": False, "grade_id": grade_id, "schema_version": 3}
    meta.update(flags)
    return {"nbgrader": meta}


def mini_notebook(answer="    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION"):
    """A one-exercise lesson: setup, an answer cell, a test with hidden tests, a free cell."""
    notebook = new_notebook(cells=[
        new_markdown_cell("# Mini lesson"),
        new_code_cell("import math", metadata=grading("setup", locked=True)),
        new_code_cell(f"def add(a, b):\n{answer}", metadata=grading("add_solution", solution=True)),
        new_code_cell(TEST_CELL, metadata=grading("add_test", grade=True, locked=True, points=2)),
        new_code_cell('print("done")'),
    ])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


@pytest.fixture(scope="module")
def mini_course(tmp_path_factory):
    """A course with one assignment, `mini`, released (its cells in the gradebook)."""
    return make_mini_course(tmp_path_factory.mktemp("mini_course"))


def make_mini_course(root):
    (root / "source" / "mini").mkdir(parents=True)
    nbformat.write(mini_notebook(), root / "source" / "mini" / "mini.ipynb")
    shutil.copy(REPO_ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    generate_release(open_course(root), "mini")
    return root


def release_notebook(course):
    return nbformat.read(course / "release" / "mini" / "mini.ipynb", as_version=4)


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def solved(course, extra=""):
    notebook = release_notebook(course)
    answer = next(c for c in notebook.cells if grade_id(c) == "add_solution")
    answer.source = "def add(a, b):\n    return a + b\n" + extra
    return notebook


@pytest.fixture
def deep_folder():
    """make(parent, depth): a chain of `depth` folders named `d` under parent/deep, with an empty
    file in each level listed in `files_at`; whatever a test leaves of one is removed afterwards,
    as pytest's own clean-up, shutil.rmtree, could not."""
    made = []

    def make(parent: Path, depth: int, files_at=()) -> Path:
        top = parent / "deep"
        top.mkdir()
        made.append(top)
        level = os.open(top, os.O_RDONLY)
        try:
            for number in range(1, depth + 1):  # by descriptor: the path grows past what a name may be
                os.mkdir("d", dir_fd=level)
                inner = os.open("d", os.O_RDONLY, dir_fd=level)
                os.close(level)
                level = inner
                if number in files_at:
                    os.close(os.open(f"file{number}.txt", os.O_CREAT | os.O_WRONLY, dir_fd=level))
        finally:
            os.close(level)
        return top

    yield make
    for top in made:
        if os.path.lexists(top):
            remove_tree(top)


def depth_below(folder: Path, path: str) -> int:
    return len(Path(path).relative_to(folder).parts)


@pytest.fixture
def teacher_log():
    """What the hooks and steps log, as the teacher's nbgrader log would show it."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    handler = Keep()
    logger = get_logger()
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


# --- the submission folder ----------------------------------------------------------------------

def make_special_files(folder: Path, outside: Path):
    (outside / "solutions").mkdir(parents=True)
    (outside / "solutions" / "answer.py").write_text("secret\n")
    (outside / "gradebook.db").write_text("grades\n")
    (folder / "sub").mkdir(parents=True)
    (folder / "kept.txt").write_text("mine\n")
    (folder / "sub" / "also_kept.py").write_text("x = 1\n")
    os.symlink(outside / "gradebook.db", folder / "grades.db")
    os.symlink(outside / "solutions", folder / "sub" / "solutions")
    os.symlink(folder / "nowhere", folder / "dangling")
    os.mkfifo(folder / "pipe")
    listener, cwd = socket.socket(socket.AF_UNIX), os.getcwd()
    os.chdir(folder)  # a socket's path may be at most 108 bytes long
    try:
        listener.bind("sock")
    finally:
        os.chdir(cwd)
        listener.close()


def test_links_and_special_files_are_removed_without_following_them(tmp_path):
    folder, outside = tmp_path / "submission", tmp_path / "course"
    make_special_files(folder, outside)
    dropped, files = remove_unsafe_entries(folder)
    assert {d.path: d.why.split(";")[0] for d in dropped} == {
        "grades.db": "it is a link", "sub/solutions": "it is a link", "dangling": "it is a link",
        "pipe": "it is a named pipe", "sock": "it is a socket"}
    assert sorted(files) == [("kept.txt", 5), ("sub/also_kept.py", 6)]
    left = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    assert left == ["kept.txt", "sub", "sub/also_kept.py"]
    assert (outside / "solutions" / "answer.py").read_text() == "secret\n"
    assert (outside / "gradebook.db").read_text() == "grades\n"


@pytest.mark.parametrize("kind, words", [
    (stat.S_IFREG, None), (stat.S_IFDIR, None), (stat.S_IFLNK, "a link"), (stat.S_IFIFO, "a named pipe"),
    (stat.S_IFSOCK, "a socket"), (stat.S_IFCHR, "a device file"), (stat.S_IFBLK, "a device file"),
])
def test_what_is_no_plain_file(kind, words):
    # Device files need privileges to make, so their mode stands in for them.
    assert intake.special_kind(kind | 0o644) == words


def test_the_note_fits_the_notebooks_format():
    assert "id" in intake.note_cell(["x"], 5) and "id" not in intake.note_cell(["x"], 4)
    assert intake.note_cell(["`a` was removed", "b"]).source.endswith("- `a` was removed\n- b")
    assert intake.shown("evil`name\n<script>.py") == "evil?name??script?.py"


def test_extra_files_beyond_the_quota_go_largest_first(tmp_path):
    for name, size in (("a.bin", 300), ("b.bin", 200), ("c.txt", 100)):
        (tmp_path / name).write_bytes(b"x" * size)
    _, files = remove_unsafe_entries(tmp_path)
    dropped = enforce_quota(tmp_path, files, quota=350)
    assert [d.path for d in dropped] == ["a.bin"] and "may total at most" in dropped[0].why
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.bin", "c.txt"]
    assert enforce_quota(tmp_path, [("b.bin", 200), ("c.txt", 100)], quota=350) == []


@pytest.mark.parametrize("content, reason", [
    (b'{"cells": [{"cell_type": "code", "source": "' + SECRET.encode(), "not valid JSON"),
    (b"\x89PNG\r\n\x1a\n\x00\x00" + SECRET.encode(), "not text"),
    (json.dumps({"nbformat": 5, "nbformat_minor": 0, "cells": [], "metadata": {}}).encode(), "format 4"),
    (json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": [], "metadata": {}}).encode(), "no cells"),
    (json.dumps({"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}}).encode(), "no cells"),
    (json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [
        {"cell_type": "code", "input": SECRET, "outputs": 5}]}]}).encode(), "could not be converted"),
    (('{"nbformat": 4, "nbformat_minor": 5, "cells": [{"cell_type": "raw", "source": ""}], "metadata": '
      + '{"a": ' * 700 + f'"{SECRET}"' + "}" * 701).encode(), "nested too deeply"),
    (json.dumps([SECRET]).encode(), "not a Jupyter notebook"),
    (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                 "cells": [{"cell_type": "x", "source": 1}]}).encode(), "not notebook cells"),
])
def test_a_file_that_is_no_notebook_says_why_without_quoting_it(tmp_path, content, reason, teacher_log):
    path = tmp_path / "lesson.ipynb"
    path.write_bytes(content)
    with pytest.raises(Unreadable, match=reason) as problem:
        read_submitted_notebook(path, 10 * intake.MB)
    assert SECRET not in str(problem.value)
    assert not any(SECRET in line for line in teacher_log)


def test_links_pipes_folders_and_huge_files_are_no_notebooks(tmp_path):
    nbformat.write(mini_notebook(), tmp_path / "real.ipynb")
    os.symlink(tmp_path / "real.ipynb", tmp_path / "link.ipynb")
    os.mkfifo(tmp_path / "pipe.ipynb")  # reading it would block forever
    (tmp_path / "folder.ipynb").mkdir()
    for name, reason in (("link", "a link"), ("pipe", "a named pipe"), ("folder", "a folder")):
        with pytest.raises(Unreadable, match=reason):
            read_submitted_notebook(tmp_path / f"{name}.ipynb", 10 * intake.MB)
    with pytest.raises(Unreadable, match="over the limit"):
        read_submitted_notebook(tmp_path / "real.ipynb", 100)
    submitted = read_submitted_notebook(tmp_path / "real.ipynb", 10 * intake.MB)
    assert not submitted.changed and len(submitted.notebook.cells) == 5


def test_a_notebook_off_the_schema_is_rebuilt_from_its_cells(tmp_path):
    data = json.loads(nbformat.writes(mini_notebook()))
    data["cells"][2]["outputs"] = "not a list"
    data["cells"][2]["metadata"]["collapsed"] = "very"
    (tmp_path / "odd.ipynb").write_text(json.dumps(data))
    submitted = read_submitted_notebook(tmp_path / "odd.ipynb", 10 * intake.MB)
    notebook = submitted.notebook
    assert submitted.rebuilt and submitted.changed
    nbformat.validate(notebook)
    assert notebook.cells[2].metadata.nbgrader.grade_id == "add_solution"
    assert "return a + b" in notebook.cells[2].source


def with_saved_outputs(notebook, size):
    """The notebook with about `size` bytes of saved output in its last cell, as printing a big
    tensor would leave, and an execution count in each code cell."""
    printed = "tensor([" + "0.1234, " * (size // 8)
    notebook.cells[-1].outputs = [new_output("stream", name="stdout", text=printed)]
    for count, cell in enumerate(c for c in notebook.cells if c.cell_type == "code"):
        cell.execution_count = count + 1
    return notebook


def test_a_notebook_large_with_saved_outputs_is_graded_without_them(tmp_path):
    path = tmp_path / "lesson.ipynb"
    nbformat.write(with_saved_outputs(mini_notebook(), 300_000), path)
    limit = 100_000
    with pytest.raises(Unreadable, match="over the limit"):  # a file too large to open at all
        read_submitted_notebook(path, limit, file_limit=200_000)
    submitted = read_submitted_notebook(path, limit, file_limit=1_000_000)
    assert submitted.outputs_cleared_from == path.stat().st_size and not submitted.rebuilt
    code = [c for c in submitted.notebook.cells if c.cell_type == "code"]
    assert [c.outputs for c in code] == [[]] * 4 and {c.execution_count for c in code} == {None}
    assert [c.source for c in submitted.notebook.cells] == [c.source for c in mini_notebook().cells]
    assert submitted.notebook.cells[2].metadata.nbgrader.grade_id == "add_solution"
    # only what is graded counts: its code and text
    long_code = mini_notebook()
    long_code.cells[-1].source = "# " + "x" * 150_000
    nbformat.write(long_code, path)
    with pytest.raises(Unreadable, match="even without its saved outputs its cells are"):
        read_submitted_notebook(path, limit, file_limit=1_000_000)


def test_a_notebook_of_an_older_format_is_converted_with_its_grade_ids(tmp_path, teacher_log):
    original = with_saved_outputs(mini_notebook(), 1000)
    for version in (3, 2):
        path = tmp_path / f"v{version}.ipynb"
        older = nbformat.convert(copy.deepcopy(original), version)  # nbformat converts in place
        path.write_text(nbformat.versions[version].writes_json(older))  # its lines split, as Jupyter wrote
        assert json.loads(path.read_text())["nbformat"] == version
        submitted = read_submitted_notebook(path, 10 * intake.MB)
        assert submitted.converted_from == version and not submitted.rebuilt
        notebook = submitted.notebook
        assert (notebook.nbformat, notebook.nbformat_minor) == (4, 5)
        assert all("id" in c for c in notebook.cells)
        nbformat.validate(notebook)
        assert [c.source for c in notebook.cells] == [c.source for c in original.cells]
        assert [c.metadata.get("nbgrader") for c in notebook.cells] == [
            c.metadata.get("nbgrader") for c in original.cells]
    # older and too large with its outputs: both at once
    path = tmp_path / "v3_big.ipynb"
    path.write_text(nbformat.writes(nbformat.convert(with_saved_outputs(mini_notebook(), 300_000), 3)))
    submitted = read_submitted_notebook(path, 100_000, file_limit=1_000_000)
    assert submitted.converted_from == 3 and submitted.outputs_cleared_from
    assert [c.get("outputs") for c in submitted.notebook.cells if c.cell_type == "code"] == [[]] * 4
    assert teacher_log == []


def test_intake_rewrites_a_notebook_it_converted_or_cleared_and_says_so(tmp_path):
    folder, path = submission(tmp_path)
    path.write_text(nbformat.writes(nbformat.convert(with_saved_outputs(mini_notebook(), 300_000), 3)))
    SubmissionIntake(notebook_limit_mb=100_000 / intake.MB)(assignment="mini", student="ann",
                                                           notebooks=[str(path)])
    written = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    assert written.nbformat == 4 and path.stat().st_size < 100_000
    notes = written.metadata[intake.NOTES_KEY]   # the notes travel in the notebook, for IntakeNotes
    assert len(notes) == 2
    assert "was saved in the old notebook format 3; it was converted to format 4" in notes[0]
    assert "over the limit of 0.095 MB, because of its saved outputs: they were cleared" in notes[1]


def test_a_folder_too_deep_for_python_is_removed_without_recursion(tmp_path, deep_folder):
    folder, path = submission(tmp_path)
    nbformat.write(mini_notebook(), path)
    deep_folder(folder, 1200, files_at=(3, 18, 19, 1100))
    with pytest.raises(RecursionError):  # nbgrader alone, copying the submission's files
        find_all_files(str(folder))
    with pytest.raises(RecursionError):  # and Python's own removal
        shutil.rmtree(deep_folder(tmp_path, 1200))
    SubmissionIntake()(assignment="mini", student="ann", notebooks=[str(path)])
    kept = sorted(find_all_files(str(folder)), key=len)
    assert [depth_below(folder, p) for p in kept] == [1, 5, 20]  # the notebook, file3, file18
    [note] = nbformat.read(path, as_version=4).metadata[intake.NOTES_KEY]
    cut = "/".join(["deep"] + ["d"] * 20)
    assert note.startswith(f"`{cut}` and 1 more were removed: the grader takes in nothing more than 20 "
                           "folders below the notebook")
    assert nbformat.read(path, as_version=4).cells[0].source == "# Mini lesson"


def test_removing_a_tree_needs_no_recursion_and_follows_no_link(tmp_path, deep_folder):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("kept\n")
    deep = deep_folder(tmp_path, 3000, files_at=range(1, 3001, 100))
    middle = Path(os.path.join(deep, *["d"] * 10))
    os.symlink(outside, middle / "link")
    (middle / "sub").mkdir()
    (middle / "sub" / "file").write_text("x")
    os.chmod(middle / "sub", 0)  # a folder its student left unreadable
    assert remove_tree(deep) == 3000 + 30 + 3 + 1
    assert not deep.exists() and (outside / "keep.txt").read_text() == "kept\n"
    (tmp_path / "file").write_text("x")
    assert remove_tree(tmp_path / "file") == 1 and not (tmp_path / "file").exists()


def test_a_folder_with_too_many_entries_keeps_the_shallowest(tmp_path):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("x")
    for number in range(1500):
        (tmp_path / "many" / f"{number // 500}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "many" / f"{number // 500}" / f"{number:04}.txt").write_text("x")
    dropped, files = remove_unsafe_entries(tmp_path, max_entries=1000)
    # a.txt, b.txt, many, many/0, many/1, many/2, then the first 994 files of many/0, many/1
    assert len(files) == 996 and ("many/1/0993.txt", 1) in files and ("many/1/0994.txt", 1) not in files
    assert sum(1 for _ in tmp_path.rglob("*")) == 1000
    [note] = [item.note() for item in dropped]
    assert note.startswith("`many/1/0994.txt` and 505 more were removed: a submission may hold at most 1,000")


def submission(tmp_path, student="ann", name="mini.ipynb"):
    folder = tmp_path / "course" / "submitted" / student / "mini"
    folder.mkdir(parents=True)
    return folder, folder / name


def test_intake_replaces_a_linked_or_unreadable_notebook_by_a_placeholder(tmp_path, teacher_log):
    folder, path = submission(tmp_path)
    solution = tmp_path / "course" / "source" / "mini" / "mini.ipynb"
    solution.parent.mkdir(parents=True)
    nbformat.write(mini_notebook(), solution)
    os.symlink(solution, path)
    other_folder, other = submission(tmp_path, "bob")
    other.write_text('{"cells": [' + SECRET)
    hook = SubmissionIntake()
    hook(assignment="mini", student="*", notebooks=[str(path)])
    hook(assignment="mini", student="*", notebooks=[str(other)])
    for notebook_path, reason in ((path, "it is a link"), (other, "it is not valid JSON")):
        assert stat.S_ISREG(os.lstat(notebook_path).st_mode)
        placeholder = nbformat.read(notebook_path, as_version=4)
        assert reason in placeholder.metadata[PLACEHOLDER_KEY]["note"]
        assert "graded as the blank release: 0 points" in placeholder.cells[0].source
    assert nbformat.read(solution, as_version=4).cells[2].source.startswith("def add")
    assert any("it is not valid JSON" in line for line in teacher_log)
    assert not any(SECRET in line for line in teacher_log)


def test_intake_cleans_the_folder_and_keeps_its_notes(tmp_path, teacher_log):
    folder, path = submission(tmp_path)
    nbformat.write(mini_notebook(), path)
    make_special_files(folder, tmp_path / "elsewhere")
    (folder / "big.bin").write_bytes(b"x" * 3000)
    hook = SubmissionIntake(extra_files_quota_mb=2000 / intake.MB)
    hook(assignment="mini", student="ann", notebooks=[str(path)])
    assert sorted(p.name for p in folder.iterdir()) == ["kept.txt", "mini.ipynb", "sub"]
    notes = nbformat.read(path, as_version=4).metadata[intake.NOTES_KEY]
    assert len(notes) == 6 and any("`big.bin` was removed: it is" in n and "at most" in n for n in notes)
    assert any("`pipe` was removed: it is a named pipe" in n for n in notes)
    assert len([line for line in teacher_log if "was removed" in line]) == 6
    # a second intake finds nothing more to remove, and says nothing more
    SubmissionIntake()(assignment="mini", student="ann", notebooks=[str(path)])
    assert intake.NOTES_KEY not in nbformat.read(path, as_version=4).metadata


def test_notes_a_student_wrote_under_the_intakes_key_never_reach_the_feedback(tmp_path):
    folder, path = submission(tmp_path)
    notebook = mini_notebook()
    notebook.metadata[intake.NOTES_KEY] = ["Full marks were given by hand."]
    nbformat.write(notebook, path)
    SubmissionIntake()(assignment="mini", student="ann", notebooks=[str(path)])
    taken_in = nbformat.read(path, as_version=4)
    assert intake.NOTES_KEY not in taken_in.metadata
    taken_in.metadata[intake.NOTES_KEY] = ["a note", {"not": "a string"}]
    assert intake.intake_notes(taken_in) == ["a note"] and intake.NOTES_KEY not in taken_in.metadata


@pytest.mark.parametrize("linked", ["assignment", "student"])
def test_a_submission_folder_that_is_a_link_becomes_a_real_folder(tmp_path, linked):
    target = tmp_path / "elsewhere"
    target.mkdir()
    nbformat.write(mini_notebook(), target / "mini.ipynb")
    student = tmp_path / "course" / "submitted" / "ann"
    if linked == "assignment":
        student.mkdir(parents=True)
        os.symlink(target, student / "mini")
    else:
        (target / "mini").mkdir()
        shutil.copy(target / "mini.ipynb", target / "mini" / "mini.ipynb")
        student.parent.mkdir(parents=True)
        os.symlink(target, student)
    path = student / "mini" / "mini.ipynb"
    SubmissionIntake()(assignment="mini", student="ann", notebooks=[str(path)])
    assert not student.is_symlink() and not (student / "mini").is_symlink()
    placeholder = nbformat.read(path, as_version=4)
    assert "submission folder was a link" in placeholder.metadata[PLACEHOLDER_KEY]["note"]
    assert nbformat.read(target / "mini.ipynb", as_version=4).cells[0].source == "# Mini lesson"


def test_the_intake_hook_never_raises(tmp_path, teacher_log):
    missing = tmp_path / "no" / "such" / "x" / "a.ipynb"
    SubmissionIntake()(assignment="*", student="*", notebooks=[str(missing)])
    assert not missing.parent.exists()
    SubmissionIntake()(assignment=None, student=None, notebooks=None)


def test_a_folder_the_grader_cannot_list_is_named_in_the_log(tmp_path, teacher_log, monkeypatch):
    submitted = tmp_path / "submitted"
    for student in ("ann", "bob"):
        (submitted / student / "mini").mkdir(parents=True)
    hidden_folder = str(submitted / "bob" / "mini")
    listdir = os.listdir

    def refusing(path="."):
        if os.fspath(path) == hidden_folder:
            raise PermissionError(13, "Permission denied")
        return listdir(path)

    monkeypatch.setattr(os, "listdir", refusing)
    for _ in range(2):
        intake.warn_unlistable(submitted, "*", "mini")
    assert len([line for line in teacher_log if "cannot list" in line and "bob/mini" in line]) == 1
    assert not any("ann/mini" in line for line in teacher_log)


# --- the sanitize step ------------------------------------------------------------------------

def sanitize(course, notebook, steps, student="ann"):
    config = open_course(course).config
    resources = {"nbgrader": {"student": student, "assignment": "mini", "notebook": "mini",
                              "db_url": f"sqlite:///{course / 'gradebook.db'}"}}
    for step in steps:
        notebook, resources = step(config=config).preprocess(notebook, resources)
    return notebook


def test_a_pasted_test_cell_no_longer_fails_the_notebook(mini_course):
    def pasted():
        notebook = solved(mini_course)
        test = next(c for c in notebook.cells if grade_id(c) == "add_test")
        copy = nbformat.from_dict(test)
        copy.id = "pasted-copy"
        notebook.cells.insert(notebook.cells.index(test) + 1, copy)
        return notebook

    def overwrite(config):
        return OverwriteCells(config=config, add_missing_cells=True)

    with pytest.raises(KeyError, match="grade_id"):  # nbgrader alone
        sanitize(mini_course, pasted(), [DeduplicateIds, overwrite])
    notebook = sanitize(mini_course, pasted(), [IntakeNotes, DeduplicateIds, overwrite])
    ids = [grade_id(c) for c in notebook.cells]
    assert ids.count("add_test") == 1
    assert "appeared more than once (a pasted copy)" in notebook.cells[0].source


def test_a_pasted_answer_cell_runs_as_the_students_own_code(mini_course):
    notebook = solved(mini_course)
    answer = notebook.cells[2]
    copy = nbformat.from_dict(answer)
    copy.id = "answer-copy"
    stray = new_code_cell("x = 1", metadata=grading("from_another_lesson", solution=True))
    empty = new_code_cell("y = 2", metadata={"nbgrader": {}})
    notebook.cells[3:3] = [copy, stray, empty]
    notebook = sanitize(mini_course, notebook, [IntakeNotes])
    graded = [grade_id(c) for c in notebook.cells]
    assert graded.count("add_solution") == 1 and "from_another_lesson" not in graded
    assert [c.source for c in notebook.cells].count(answer.source) == 2
    assert all("nbgrader" not in c.metadata for c in notebook.cells if c.source in ("x = 1", "y = 2"))
    note = notebook.cells[0].source
    assert "answer cell `add_solution` appeared more than once" in note and "`from_another_lesson`" in note


def test_a_placeholder_is_graded_as_the_blank_release(mini_course):
    notebook = intake.placeholder_notebook("mini.ipynb", "it is not text")
    notebook = sanitize(mini_course, notebook, [IntakeNotes])
    release = release_notebook(mini_course)
    assert [c.source for c in notebook.cells[1:]] == [c.source for c in release.cells]
    assert "could not be read as a notebook (it is not text)" in notebook.cells[0].source


def test_a_clean_submission_gets_no_note(mini_course):
    notebook = sanitize(mini_course, solved(mini_course), [IntakeNotes], student="nobody_special")
    assert notebook.cells[0].source == "# Mini lesson"


# --- feedback -------------------------------------------------------------------------------------

def graded_notebook(student_source, outputs):
    notebook = mini_notebook()
    notebook.cells[4].source = student_source
    notebook.cells[4].outputs = outputs
    return notebook


def redact(notebook):
    notebook, _ = RedactHiddenTests().preprocess(notebook, {})
    notebook, _ = ClearHiddenTests().preprocess(notebook, {})
    return notebook


def test_printed_input_history_loses_its_hidden_lines():
    history = ["", "import math", mini_notebook().cells[3].source, 'print("done")']
    outputs = [
        new_output("stream", name="stdout", text=f"history follows\n{history!r}\n{history[2]}\nthe end\n"),
        new_output("execute_result", data={"text/plain": repr(history), "text/html": html.escape(history[2]),
                                           "application/json": {"history": history}}, execution_count=1),
        new_output("error", ename="ValueError", evalue=history[2],
                   traceback=["\x1b[0;31m" + HIDDEN.replace("add", "\x1b[0madd\x1b[0;31m") + "\x1b[0m"]),
    ]
    notebook = redact(graded_notebook("print(In)", outputs))
    stream, result, error = notebook.cells[4].outputs
    assert stream.text.splitlines()[0] == "history follows" and stream.text.splitlines()[-1] == "the end"
    assert REDACTED in stream.text and "forty-two" not in stream.text and "10**12" not in stream.text
    assert set(result.data) == {"text/plain", "text/html"} and REDACTED in result.data["text/plain"]
    text = json.dumps(nbformat.from_dict(notebook))
    assert "forty-two" not in text and "10**12 + 1" not in text and "BEGIN HIDDEN" not in text
    assert 'add(1, 2) should be 3' in notebook.cells[3].source, "the visible test stays"
    assert error.ename == "ValueError"


def test_failure_messages_and_ordinary_output_stay():
    outputs = [new_output("stream", name="stdout", text="visible check passed\nadd(40, 2) gave 41\n"),
               new_output("error", ename="AssertionError", evalue="forty-two expected", traceback=[])]
    notebook = redact(graded_notebook("print(add(40, 2))", outputs))
    assert notebook.cells[4].outputs[0].text == "visible check passed\nadd(40, 2) gave 41\n"
    assert notebook.cells[4].outputs[1].evalue == "forty-two expected"
    assert redact_text("a\nb\n", ["zzz"]) == "a\nb\n"
    assert redact_text(f"{HIDDEN}\n{HIDDEN}\nok\n", [HIDDEN]) == f"{REDACTED}\nok\n"


def test_marker_text_in_a_students_cell_no_longer_fails_the_feedback():
    comment = "# the teacher hides tests between ### BEGIN HIDDEN TESTS and ### END HIDDEN TESTS\nx = 1"
    with pytest.raises(RuntimeError, match="No end hidden tests"):  # nbgrader alone
        ClearHiddenTests().preprocess(graded_notebook(comment, []), {})
    printed = new_output("stream", name="stdout", text="### END HIDDEN TESTS\n")
    notebook = redact(graded_notebook(comment, [printed]))
    assert notebook.cells[4].source.endswith("BEGIN_HIDDEN_TESTS and ### END_HIDDEN_TESTS\nx = 1")
    assert notebook.cells[4].outputs[0].text == REDACTED + "\n"
    assert HIDDEN not in notebook.cells[3].source, "the test cell's own hidden tests are still removed"


def grading_folders(tmp_path):
    graded = tmp_path / "autograded" / "ann" / "mini"
    feedback = tmp_path / "feedback" / "ann" / "mini"
    graded.mkdir(parents=True)
    feedback.mkdir(parents=True)
    return graded, feedback


def test_links_left_by_grading_are_removed_before_feedback_copies_them(tmp_path, teacher_log):
    graded, _ = grading_folders(tmp_path)
    (tmp_path / "gradebook.db").write_text("grades\n")
    nbformat.write(mini_notebook(), graded / "mini.ipynb")
    os.symlink(tmp_path / "gradebook.db", graded / "grades.db")
    os.symlink(tmp_path / "gradebook.db", graded / "other.ipynb")
    os.mkfifo(graded / "pipe")
    notebooks = [str(graded / "mini.ipynb"), str(graded / "other.ipynb")]
    clean_graded_folder(assignment="mini", student="*", notebooks=notebooks)
    assert notebooks == [str(graded / "mini.ipynb")], "nbgrader's own list loses the link, in place"
    assert sorted(p.name for p in graded.iterdir()) == ["mini.ipynb"]
    assert (tmp_path / "gradebook.db").read_text() == "grades\n"
    assert len([line for line in teacher_log if "left behind by grading" in line]) == 3


ACTIVE_FILES = ("page.html", "PAGE.HTM", "inc.shtml", "doc.xhtml", "feed.xml", "app.js", "mod.mjs",
                "paper.pdf", "style.css", "data:,x.html", "sub/deeper/drawing.svg")
INERT_FILES = ("plot.png", "photo.jpg", "anim.gif", "notes.txt", "table.csv", "result.json", "helper.py",
               "weights.npy", "trace.log", "page.html.gz", "sub/deeper/notes.md")


def formgrader_content_type(path: Path) -> str:
    """What the formgrader's file handler, tornado's StaticFileHandler, sends for `path`."""
    handler = SimpleNamespace(absolute_path=str(path))
    return StaticFileHandler.get_content_type(handler)


def test_files_a_browser_would_run_are_renamed_to_text_after_grading(tmp_path, teacher_log):
    graded, _ = grading_folders(tmp_path)
    nbformat.write(mini_notebook(), graded / "mini.ipynb")
    (graded / "sub" / "deeper").mkdir(parents=True)
    for name in ACTIVE_FILES + INERT_FILES:
        (graded / name).write_text(f"<script>alert('{name}')</script>")
    (graded / "old.html").write_text("<script>alert(1)</script>")
    (graded / "old.html.txt").write_text("handed in as text\n")  # the name old.html would take
    for name in ACTIVE_FILES + INERT_FILES:
        assert served_type(graded / name) == formgrader_content_type(graded / name), name
    assert all(served_type(graded / name) not in INERT_TYPES for name in ACTIVE_FILES)
    clean_graded_folder(assignment="mini", student="*", notebooks=[str(graded / "mini.ipynb")])

    left = sorted(path.relative_to(graded).as_posix() for path in graded.rglob("*") if path.is_file())
    expected = ["mini.ipynb", "old.html.txt", *INERT_FILES, *(name + ".txt" for name in ACTIVE_FILES)]
    assert left == sorted(expected)
    assert all(formgrader_content_type(graded / name) in INERT_TYPES for name in left)
    svg = "<script>alert('sub/deeper/drawing.svg')</script>"
    assert (graded / "sub/deeper/drawing.svg.txt").read_text() == svg, "still there to read"
    assert (graded / "old.html.txt").read_text() == "handed in as text\n", "a file handed in is not replaced"
    renamed = [line for line in teacher_log if "so that the formgrader serves it as text" in line]
    assert len(renamed) == len(ACTIVE_FILES)
    assert "ann/mini: page.html renamed page.html.txt, so that the formgrader serves it as text, not as " \
           "text/html" in renamed
    assert len([line for line in teacher_log if "old.html removed" in line]) == 1

    teacher_log.clear()  # generate_feedback runs the same clean-up: nothing more to rename
    clean_graded_folder(assignment="mini", student="*", notebooks=[str(graded / "mini.ipynb")])
    assert sorted(path.relative_to(graded).as_posix() for path in graded.rglob("*") if path.is_file()) == left
    assert teacher_log == []


def test_the_log_names_a_bounded_number_of_renamed_files(tmp_path, teacher_log):
    graded, _ = grading_folders(tmp_path)
    for index in range(50):
        (graded / f"page{index}.html").write_text("<script></script>")
    clean_graded_folder(assignment="mini", student="*", notebooks=[str(graded / "mini.ipynb")])
    assert sorted(path.name for path in graded.iterdir()) == sorted(f"page{i}.html.txt" for i in range(50))
    assert len(teacher_log) == LOGGED_RENAMES + 1
    more = 50 - LOGGED_RENAMES
    assert teacher_log[-1] == f"ann/mini: {more} more files renamed or removed, for the same reason"


def test_the_feedback_folder_keeps_only_the_pages(tmp_path):
    graded, feedback = grading_folders(tmp_path)
    for name in ("mini.html", "timestamp.txt", "submission_secret.txt", "notes.txt", "data.bin"):
        (feedback / name).write_text("x")
    (feedback / "folder").mkdir()
    (feedback / "folder" / "inner.html").write_text("x")
    os.symlink(feedback / "mini.html", feedback / "link.html")
    keep_only_feedback_pages(assignment="mini", student="*", notebooks=[str(graded / "mini.ipynb")])
    left = sorted(p.name for p in feedback.iterdir())
    assert left == ["mini.html", "submission_secret.txt", "timestamp.txt"]


# --- the demo class's new headers -------------------------------------------------------------

def test_demo_files_are_written_as_declared(tmp_path):
    demo = tmp_path / "demo.py"
    demo.write_text("# about: links and pipes\n# base: release\n# note: was removed\n"
                    "# paste: add_test after add_test\n"
                    "# file: grades.db -> link gradebook.db\n# file: pipe -> fifo\n"
                    '# file: mini.ipynb -> text {"cells": [\n')
    parsed = parse_submission(demo)
    assert parsed.files == (("grades.db", "link", "gradebook.db"), ("pipe", "fifo", ""),
                            ("mini.ipynb", "text", '{"cells": ['))
    assert parsed.note == "was removed" and parsed.pasted == ("add_test", "add_test")
    target = tmp_path / "submitted" / "ann" / "mini"
    target.mkdir(parents=True)
    (tmp_path / "gradebook.db").write_text("grades\n")
    os.symlink(tmp_path / "gradebook.db", target / "mini.ipynb")  # left from an earlier run
    write_files(tmp_path, target, parsed)
    assert os.readlink(target / "grades.db") == str((tmp_path / "gradebook.db").resolve())
    assert stat.S_ISFIFO(os.lstat(target / "pipe").st_mode)
    assert (target / "mini.ipynb").read_text() == '{"cells": [\n'
    assert (tmp_path / "gradebook.db").read_text() == "grades\n", "written through the old link"


# --- through nbgrader -------------------------------------------------------------------------

def feedback_page(course, student):
    [page] = (course / "feedback" / student / "mini").glob("*.html")
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def graded_scores(course):
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {s.student.id: s.score for s in gradebook.assignment_submissions("mini")}


@pytest.mark.slow
def test_nbgrader_grades_and_explains_what_the_intake_found(mini_course):
    submitted = mini_course / "submitted"
    corrupt = submitted / "corrupt" / "mini"
    corrupt.mkdir(parents=True)
    (corrupt / "mini.ipynb").write_text('{"nbformat": 4, "cells": [{"source": "' + SECRET)
    (corrupt / "timestamp.txt").write_text("2030-01-01 00:00:00.000000 UTC\n")
    crowded = submitted / "crowded" / "mini"
    crowded.mkdir(parents=True)
    nbformat.write(solved(mini_course, 'import os\nprint("files seen:", sorted(os.listdir(".")))'),
                   crowded / "mini.ipynb")
    (crowded / "big.bin").write_bytes(b"x" * 30_000)
    (crowded / "small.txt").write_text("kept\n")
    (crowded / "page.html").write_text("<script>alert(1)</script>\n")
    os.mkfifo(crowded / "pipe")
    os.symlink(mini_course / "gradebook.db", crowded / "grades.db")
    leaves_links = submitted / "leaves_links" / "mini"
    leaves_links.mkdir(parents=True)
    nbformat.write(solved(mini_course, 'import os\nos.symlink("../../../gradebook.db", "grades.db")\n'
                                       'os.mkfifo("pipe")\nos.symlink("../../../source", "lesson")'),
                   leaves_links / "mini.ipynb")

    api = open_course(mini_course, cell_timeout=60)
    api.config.Autograde.pre_convert_hook = SubmissionIntake(extra_files_quota_mb=20_000 / intake.MB)
    result = api.autograde("mini", "*", force=True, create=True)
    assert result["success"], result.get("log")
    assert SECRET not in result["log"]
    assert "mini.ipynb could not be read as a notebook (it is not valid JSON)" in result["log"]
    # what grading left behind, and links put there after it, never reach feedback
    graded = mini_course / "autograded" / "leaves_links" / "mini"
    assert sorted(p.name for p in graded.iterdir()) == ["mini.ipynb"]
    # read by the student's code under its own name, served to the teacher as text once graded
    graded_crowded = mini_course / "autograded" / "crowded" / "mini"
    assert sorted(p.name for p in graded_crowded.iterdir()) == ["mini.ipynb", "page.html.txt", "small.txt"]
    os.symlink(mini_course / "gradebook.db", graded / "late_link.db")
    os.mkfifo(graded / "late_pipe")
    result = api.generate_feedback("mini", force=True)
    assert result["success"], result.get("log")

    scores = {student: score for student, score in graded_scores(mini_course).items()
              if not student.startswith("odd_")}  # the next test's students, in the same course
    assert scores == {"corrupt": 0, "crowded": 2, "leaves_links": 2}
    corrupt_page = feedback_page(mini_course, "corrupt")
    assert "it is not valid JSON), so it was graded as the blank release: 0 points" in corrupt_page
    crowded_page = feedback_page(mini_course, "crowded")
    assert "files seen: ['mini.ipynb', 'page.html', 'small.txt']" in crowded_page
    for removed in ("big.bin was removed", "pipe was removed: it is a named pipe", "grades.db was removed"):
        assert removed in crowded_page
    for student in scores:
        page = feedback_page(mini_course, student)
        assert "forty-two" not in page and "BEGIN HIDDEN" not in page
        folder = mini_course / "feedback" / student / "mini"
        names = sorted(p.name for p in folder.iterdir())
        assert names == (["mini.html", "timestamp.txt"] if student == "corrupt" else ["mini.html"])
        assert all(stat.S_ISREG(os.lstat(p).st_mode) for p in folder.iterdir())
    assert stat.S_ISREG(os.lstat(mini_course / "gradebook.db").st_mode)
    source = nbformat.read(mini_course / "source" / "mini" / "mini.ipynb", as_version=4)
    assert [c.source for c in source.cells] == [c.source for c in mini_notebook().cells]


@pytest.mark.slow
def test_nbgrader_grades_a_deep_folder_saved_outputs_and_an_old_format_to_the_end(mini_course, deep_folder):
    course = mini_course
    folders = {student: course / "submitted" / student / "mini"
               for student in ("odd_deep_folder", "odd_saved_outputs", "odd_old_format")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    # a folder 1,200 deep beside the notebook: RecursionError in nbgrader's walk, and no grade
    nbformat.write(solved(course, 'import os\nprint("kept:", os.path.exists("deep/d/d/d/file3.txt"))'),
                   folders["odd_deep_folder"] / "mini.ipynb")
    deep_folder(folders["odd_deep_folder"], 1200, files_at=(3, 1100))
    # 60 MB of printed tensor: over the 50 MB limit, which is for what is graded
    saved_outputs = folders["odd_saved_outputs"] / "mini.ipynb"
    nbformat.write(with_saved_outputs(solved(course), 60 * intake.MB), saved_outputs)
    assert saved_outputs.stat().st_size > 60 * intake.MB
    # notebook format 3, with worksheets, as IPython 2 wrote it
    old = nbformat.convert(solved(course), 3)
    (folders["odd_old_format"] / "mini.ipynb").write_text(nbformat.versions[3].writes_json(old))

    api = open_course(course, cell_timeout=60)
    assert isinstance(api.config.Autograde.pre_convert_hook, SubmissionIntake), "the course's own intake"
    result = api.autograde("mini", "odd_*", force=True, create=True)
    assert result["success"], result.get("log")
    assert len(result["log"]) < 100_000, "no saved output reaches the log"
    result = api.generate_feedback("mini", "odd_*", force=True)
    assert result["success"], result.get("log")

    scores = {student: score for student, score in graded_scores(course).items() if student in folders}
    assert scores == {"odd_deep_folder": 2, "odd_saved_outputs": 2, "odd_old_format": 2}
    graded = course / "autograded" / "odd_deep_folder" / "mini"
    copied = find_all_files(str(graded))
    assert max(depth_below(graded, path) for path in copied) <= 20
    assert str(graded / "deep" / "d" / "d" / "d" / "file3.txt") in copied
    page = feedback_page(course, "odd_deep_folder")
    assert "kept: True" in page
    assert "was removed: the grader takes in nothing more than 20 folders below the notebook" in page
    page = feedback_page(course, "odd_saved_outputs")
    assert "mini.ipynb is 60 MB, over the limit of 50 MB, because of its saved outputs: they were cleared " \
           "before grading" in page
    assert "0.1234, 0.1234" not in page and "done" in page
    assert saved_outputs.stat().st_size < intake.MB
    page = feedback_page(course, "odd_old_format")
    assert "mini.ipynb was saved in the old notebook format 3; it was converted to format 4" in page
    written = nbformat.read(folders["odd_old_format"] / "mini.ipynb", as_version=nbformat.NO_CONVERT)
    assert written.nbformat == 4
    for student in scores:
        assert "forty-two" not in feedback_page(course, student)
