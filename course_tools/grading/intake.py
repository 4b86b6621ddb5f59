"""What the grader takes in from a submission folder before nbgrader reads it.

nbgrader's autograde copies every extra file of submitted/<student>/<assignment>/ into the folder
where the student's kernel runs (`shutil.copy` follows links and blocks on a named pipe), and
reads each notebook with nbformat: a notebook that is a link is graded as whatever it points
to (the worked solution in source/, say), and one that cannot be read fails the whole
submission, with a log line that quotes its first bytes. Two steps of the course's Autograde
configuration stand in front of that:

- `SubmissionIntake`, the `Autograde.pre_convert_hook`, runs on each submission folder before
  nbgrader copies anything: it makes the folder a real folder if it is a link, removes every
  link and special file under it (never following one), removes what lies too deep or comes
  after too many files and folders (nbgrader's walk of the folder recurses once per level, and
  takes time that grows with the square of the files in a folder), removes extra files beyond a
  quota (largest first), converts a notebook of an older format to format 4, clears the saved
  outputs of a notebook too large with them (grading clears and regenerates them anyway), and
  replaces each notebook it cannot read as a notebook by a placeholder that says why;
- `IntakeNotes`, the first sanitize preprocessor, turns a placeholder into the blank release
  notebook (graded: zero points, with a feedback page), keeps one cell per grade id where a
  student pasted a cell twice (nbgrader's own DeduplicateIds leaves a cell that makes
  `OverwriteCells.add_missing_task_cells` raise KeyError), drops grading metadata that names no
  cell of the notebook, and puts everything the intake did at the top of the notebook, where
  the student reads it in their feedback.

Nothing a student handed in is ever written to the teacher's log: file names are shown with
every unusual character replaced, and a notebook's content never.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import logging
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets.log import get_logger

from course_tools.grading.cell_order import release_notebook
from course_tools.grading.submission_files import (
    enforce_quota,
    megabytes,
    remove_entry,
    remove_unsafe_entries,
    shown,
    special_kind,
)
from course_tools.units import MB

# Notebook metadata key of a placeholder written by SubmissionIntake, read by IntakeNotes.
PLACEHOLDER_KEY = "course_intake"
# Notebook metadata key of the notes an intake wrote into the notebooks it took in, read (and
# removed) by IntakeNotes: they travel with the submission, whichever process grades it. Each
# intake removes what an earlier one, or the student, left under this key.
NOTES_KEY = "course_intake_notes"
NOTE_TITLE = "**Note from the grader about your submission**"
_UNLISTABLE_WARNED: set[str] = set()


class Unreadable(Exception):
    """A submitted notebook that cannot be graded as a notebook; the message says why, in words
    for the student, and never quotes the file."""


@dataclass
class GradableNotebook:
    """A submitted notebook as the intake made it ready to grade, and what that changed."""

    notebook: nbformat.NotebookNode
    rebuilt: bool = False  # rebuilt from its cells to follow nbformat 4's schema
    converted_from: int | None = None  # the older format it was converted from
    outputs_cleared_from: int | None = None  # its size in bytes, when its saved outputs were cleared
    stale_notes: bool = False  # it carried notes under NOTES_KEY, now removed

    @property
    def changed(self) -> bool:
        return (self.rebuilt or self.converted_from is not None or self.outputs_cleared_from is not None
                or self.stale_notes)


def read_submitted_notebook(path: Path, size_limit: int, file_limit: int | None = None) -> GradableNotebook:
    """The notebook at `path`, made ready to grade.

    `size_limit` bounds what is graded: a larger file, up to `file_limit` bytes (default
    `size_limit`), is read without its saved outputs and execution counts, which grading clears
    and regenerates anyway, and must fit then. Raises Unreadable when it is not a notebook, or too
    large. nbformat itself is never handed the file whole: its reader logs schema errors quoting
    the offending cell."""
    file_limit = max(size_limit, file_limit or 0)
    raw = _read_bounded(path, file_limit)
    oversized = len(raw) > size_limit
    try:
        # Each saved output is dropped as soon as it is parsed, so that memory holds one at most.
        data = json.loads(raw.decode("utf-8"), object_hook=_without_outputs if oversized else None)
    except UnicodeDecodeError:
        raise Unreadable("it is not text") from None
    except (ValueError, RecursionError):
        raise Unreadable("it is not valid JSON") from None
    file_size, raw = len(raw), None  # the file's bytes, up to `file_limit` of them, are no longer needed
    if not isinstance(data, dict) or "nbformat" not in data:
        raise Unreadable("it is not a Jupyter notebook")
    try:
        return _made_gradable(data, file_size if oversized else None, size_limit)
    except RecursionError:  # nbformat and json.dumps recurse into metadata nested as deep as json allows
        raise Unreadable("its contents are nested too deeply") from None


def _read_bounded(path: Path, file_limit: int) -> bytes:
    try:
        info = os.lstat(path)
    except OSError:
        raise Unreadable("the grader cannot find it") from None
    kind = special_kind(info.st_mode)
    if kind:
        raise Unreadable(f"it is {kind}, not the notebook itself")
    if stat.S_ISDIR(info.st_mode):
        raise Unreadable("it is a folder")
    if info.st_size > file_limit:
        raise Unreadable(f"it is {megabytes(info.st_size)}, over the limit of {megabytes(file_limit)}")
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as handle:
            raw = handle.read(file_limit + 1)
    except OSError:
        raise Unreadable("the grader cannot read it") from None
    if len(raw) > file_limit:
        raise Unreadable(f"it is over the grader's limit of {megabytes(file_limit)}")
    return raw


def _made_gradable(data: dict, oversized: int | None, size_limit: int) -> GradableNotebook:
    """The parsed notebook `data` in format 4 and nbformat's schema; `oversized` is the file's size
    when it is over `size_limit`, its outputs then already dropped by the parser."""
    outputs_cleared_from = converted_from = None
    if oversized is not None:
        _clear_outputs(data)
        size = len(json.dumps(data, ensure_ascii=False).encode("utf-8"))
        if size > size_limit:
            raise Unreadable(f"even without its saved outputs its cells are {megabytes(size)}, over the "
                             f"limit of {megabytes(size_limit)}")
        outputs_cleared_from = oversized
    version = data.get("nbformat")
    if type(version) is int and version in OLDER_FORMATS:  # not True, which equals 1
        converted_from = version
        data = _converted(data)
    elif version != 4:
        raise Unreadable("it is not in notebook format 4, the one Jupyter writes, nor in an older one")
    cells = data.get("cells")
    if not isinstance(cells, list) or not cells:
        raise Unreadable("it has no cells")
    try:
        notebook = nbformat.versions[4].to_notebook_json(data)  # sources as strings, as nbformat.read gives
    except (AttributeError, KeyError, TypeError):  # cells too odd to join their lines: see below
        notebook = nbformat.from_dict(data)
    rebuilt = not _valid(notebook)
    if rebuilt:
        notebook = _rebuild(data, keep_metadata=True)
        if notebook is None or not _valid(notebook):
            notebook = _rebuild(data, keep_metadata=False)
        if notebook is None or not _valid(notebook):
            raise Unreadable("its cells are not notebook cells")
    stale_notes = notebook.metadata.pop(NOTES_KEY, None) is not None
    return GradableNotebook(notebook, rebuilt, converted_from, outputs_cleared_from, stale_notes)


# Notebook formats older than 4 that nbformat converts: 3 (IPython 2, 2014), 2 and 1 before it.
OLDER_FORMATS = (1, 2, 3)


def _without_outputs(parsed: dict) -> dict | None:
    # A JSON object with this key is a saved output (or a student's odd metadata, which loses
    # nothing graded when it becomes null).
    return None if "output_type" in parsed else parsed


def _clear_outputs(data: dict) -> None:
    """Clear saved outputs and execution counts in place, as grading's ClearOutput would, in
    notebook format 4 and in the worksheets of the older ones."""
    cell_lists = [data.get("cells")]
    worksheets = data.get("worksheets")
    if isinstance(worksheets, list):
        cell_lists += [sheet.get("cells") for sheet in worksheets if isinstance(sheet, dict)]
    for cells in cell_lists:
        for cell in cells if isinstance(cells, list) else []:
            if isinstance(cell, dict) and "outputs" in cell:
                cell["outputs"] = []
                for count in ("execution_count", "prompt_number"):  # format 4's name, and 3's
                    if count in cell:
                        cell[count] = None


def _converted(data: dict) -> nbformat.NotebookNode:
    """An older notebook in format 4, its cells' metadata (nbgrader's grade ids) kept."""
    try:
        with _quiet(get_logger()):  # nbformat logs validation errors quoting the notebook
            older = nbformat.versions[data["nbformat"]].to_notebook_json(data)
            return nbformat.convert(older, 4)
    except Exception:  # whatever a malformed older notebook makes the converters trip on
        raise Unreadable(f"it is in the old notebook format {data['nbformat']}, and could not be "
                         "converted to format 4") from None


@contextmanager
def _quiet(logger: logging.Logger):
    def nothing(record: logging.LogRecord) -> bool:
        return False

    logger.addFilter(nothing)
    try:
        yield
    finally:
        logger.removeFilter(nothing)


def _valid(notebook) -> bool:
    try:
        nbformat.validate(notebook)
        return True
    except Exception:  # the schema's errors, and whatever odd content makes the validator trip on
        return False


def _rebuild(data: dict, keep_metadata: bool):
    """The notebook's cells, their type, source and metadata (or only the grading metadata),
    without outputs (the sanitize step clears them anyway)."""
    makers = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell,
              "raw": nbformat.v4.new_raw_cell}
    cells = []
    for cell in data["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") not in makers:
            return None
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(part, str) for part in source):
            source = "".join(source)
        if not isinstance(source, str):
            return None
        metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        if not keep_metadata:
            grading = metadata.get("nbgrader")
            metadata = {"nbgrader": grading} if isinstance(grading, dict) else {}
        rebuilt = makers[cell["cell_type"]](source)
        rebuilt.metadata = nbformat.from_dict(metadata)  # validated with the whole notebook
        cells.append(rebuilt)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = cells
    if keep_metadata and isinstance(data.get("metadata"), dict):
        notebook.metadata = data["metadata"]
    return notebook


def placeholder_notebook(name: str, reason: str) -> nbformat.NotebookNode:
    """What stands in submitted/ for a notebook that could not be read: IntakeNotes grades the
    blank release in its place, with this note on top."""
    note = (f"Your submitted file `{shown(name)}` could not be read as a notebook ({reason}), so it was "
            "graded as the blank release: 0 points. Hand in the notebook itself.")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"{NOTE_TITLE}\n\n- {note}")])
    notebook.metadata[PLACEHOLDER_KEY] = {"note": note}
    return notebook


class SubmissionIntake:
    """The course's `Autograde.pre_convert_hook` (see the module docstring).

    nbgrader calls it once per submission folder, after deciding to grade it and before copying
    anything, as hook(assignment=<pattern>, student=<pattern>, notebooks=[submitted notebook
    paths]); it logs any failure of its own at INFO level only, so this hook logs its own
    warnings and errors and never raises.
    """

    def __init__(self, extra_files_quota_mb: float = 200, notebook_limit_mb: float = 50,
                 notebook_file_limit_mb: float = 500, folder_depth_limit: int = 20,
                 extra_entries_limit: int = 1000):
        """`notebook_limit_mb` bounds a notebook's cells without saved outputs; a larger file, up to
        `notebook_file_limit_mb`, is graded without them. Beside the notebooks, nothing deeper
        than `folder_depth_limit` folders, nor more than `extra_entries_limit` files and folders,
        and at most `extra_files_quota_mb` in all."""
        self.extra_files_quota = int(extra_files_quota_mb * MB)
        self.notebook_limit = int(notebook_limit_mb * MB)
        self.notebook_file_limit = int(notebook_file_limit_mb * MB)
        self.folder_depth_limit = folder_depth_limit
        self.extra_entries_limit = extra_entries_limit

    def __repr__(self) -> str:
        return (f"SubmissionIntake(extra_files_quota_mb={self.extra_files_quota / MB:g}, "
                f"notebook_limit_mb={self.notebook_limit / MB:g}, "
                f"notebook_file_limit_mb={self.notebook_file_limit / MB:g}, "
                f"folder_depth_limit={self.folder_depth_limit}, "
                f"extra_entries_limit={self.extra_entries_limit})")

    def __call__(self, assignment=None, student=None, notebooks=None, **_ignored) -> None:
        log = get_logger()
        folders: dict[str, list[str]] = {}
        for notebook in notebooks or []:
            folder = os.path.dirname(os.path.abspath(notebook))
            folders.setdefault(folder, []).append(os.path.basename(notebook))
        for folder, names in folders.items():
            try:
                notes = self.take_in(Path(folder), names)
            except Exception as error:  # a hook must never stop grading the class
                log.error("Intake of %s failed (%s): its files were not checked before grading",
                          shown(folder), type(error).__name__)
                continue
            for note in notes:
                log.warning("Intake of %s: %s", _label(Path(folder)), note)
        if folders:
            warn_unlistable(Path(next(iter(folders))).parent.parent, student or "*", assignment or "*")

    def take_in(self, folder: Path, notebook_names: list[str]) -> list[str]:
        """Make one submission folder safe to grade; returns the notes for its feedback, which each
        of its notebooks also carries in its metadata (NOTES_KEY) for IntakeNotes."""
        linked = False
        for link in (folder.parent, folder):
            if os.path.islink(link):
                os.unlink(link)
                linked = True
        if linked:
            folder.mkdir(parents=True, exist_ok=True)
        notes, taken_in, to_write = [], {}, set()
        for name in notebook_names:
            path = folder / name
            try:
                if linked:
                    raise Unreadable("your submission folder was a link to another place, not a folder")
                submitted = read_submitted_notebook(path, self.notebook_limit, self.notebook_file_limit)
            except Unreadable as problem:
                remove_entry(path)
                # The placeholder carries its own note, so the note stays with the submission.
                taken_in[path] = placeholder_notebook(name, str(problem))
                to_write.add(path)
                get_logger().warning("Intake of %s: %s could not be read as a notebook (%s): graded as "
                                     "the blank release", _label(folder), shown(name), problem)
                continue
            taken_in[path] = submitted.notebook
            if submitted.changed:
                to_write.add(path)
            notes += _changes_noted(name, submitted, self.notebook_limit)
        dropped, files = remove_unsafe_entries(folder, skip=frozenset(notebook_names),
                                               max_depth=self.folder_depth_limit,
                                               max_entries=self.extra_entries_limit)
        dropped += enforce_quota(folder, files, self.extra_files_quota)
        notes += [item.note() for item in dropped]
        for path, notebook in taken_in.items():
            if notes:
                notebook.metadata[NOTES_KEY] = notes
                to_write.add(path)
            if path in to_write:
                remove_entry(path)
                nbformat.write(notebook, path)
        return notes


def _changes_noted(name: str, submitted: GradableNotebook, size_limit: int) -> list[str]:
    notes = []
    if submitted.converted_from is not None:
        notes.append(f"`{shown(name)}` was saved in the old notebook format {submitted.converted_from}; it "
                     "was converted to format 4, the one Jupyter writes now, and graded.")
    if submitted.outputs_cleared_from is not None:
        notes.append(f"`{shown(name)}` is {megabytes(submitted.outputs_cleared_from)}, over the limit of "
                     f"{megabytes(size_limit)}, because of its saved outputs: they were cleared before "
                     "grading, which runs every cell again and makes them anew. Clear large outputs before "
                     "you hand in.")
    if submitted.rebuilt:
        notes.append(f"`{shown(name)}` did not follow the notebook format exactly; it was graded from its "
                     "cells' code and text.")
    return notes


def _label(folder: Path) -> str:
    return shown("/".join(Path(folder).parts[-2:]))


def warn_unlistable(submitted_root: Path, student_pattern: str, assignment_pattern: str) -> None:
    """Say once which submission folders nbgrader skips without a word: it finds a folder's
    notebooks by listing it, so a folder the grader cannot list is never graded."""
    try:
        students = sorted(os.listdir(submitted_root))
    except OSError:
        return
    for student in fnmatch.filter(students, student_pattern):
        student_folder = submitted_root / student
        try:
            if not stat.S_ISDIR(os.lstat(student_folder).st_mode):
                continue
            names = fnmatch.filter(os.listdir(student_folder), assignment_pattern)
            candidates = [student_folder / name for name in names]
        except OSError:
            candidates = [student_folder]
        for candidate in candidates:
            try:
                if stat.S_ISDIR(os.lstat(candidate).st_mode):
                    os.listdir(candidate)
            except OSError:
                key = os.path.abspath(candidate)
                if key not in _UNLISTABLE_WARNED:
                    _UNLISTABLE_WARNED.add(key)
                    get_logger().error(
                        "The grader cannot list %s, so nbgrader does not grade it: make it readable "
                        "(chmod -R u+rwX) and autograde it again", shown(key))


def intake_notes(nb) -> list[str]:
    """The notes the intake wrote into this notebook, taken out of its metadata (only strings: the
    intake removed whatever a student put under the key)."""
    notes = nb.metadata.pop(NOTES_KEY, None)
    return [note for note in notes if isinstance(note, str)] if isinstance(notes, list) else []


def note_cell(notes: list[str], nbformat_minor: int = 5) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(NOTE_TITLE + "\n\n" + "\n".join(f"- {note}" for note in notes))
    if nbformat_minor < 5:  # cell ids came with nbformat 4.5
        cell.pop("id", None)
    return cell


class IntakeNotes(NbGraderPreprocessor):
    """The first sanitize step (see the module docstring): a placeholder becomes the blank release,
    each grade id keeps one cell, and the notes go at the top of the notebook."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        notes = []
        placeholder = nb.metadata.get(PLACEHOLDER_KEY)
        if isinstance(placeholder, dict):
            notes.append(str(placeholder.get("note", "Your notebook could not be read: graded blank.")))
        notes += intake_notes(nb)
        if isinstance(placeholder, dict):
            self._become_release(nb, resources)
        notes += self._one_cell_per_grade_id(nb, info)
        if notes:
            nb.cells.insert(0, note_cell(notes, nb.get("nbformat_minor", 5)))
        return nb, resources

    def _become_release(self, nb, resources) -> None:
        release = release_notebook(self.config, resources)
        if release is None:
            # OverwriteCells and RestoreCellOrder still bring back every graded and read-only cell.
            self.log.warning("No release notebook for %s: grading only the cells the gradebook holds",
                             resources["nbgrader"].get("notebook"))
            nb.cells = []
            return
        release = copy.deepcopy(release)   # the steps after this one read the release unchanged
        nb.cells = release.cells
        nb.metadata = release.metadata
        nb.nbformat_minor = release.nbformat_minor

    def _one_cell_per_grade_id(self, nb, info: dict) -> list[str]:
        try:
            with Gradebook(info["db_url"]) as gradebook:
                source_cells = gradebook.find_notebook(info["notebook"], info["assignment"]).source_cells
                locked = {cell.name: bool(cell.locked) for cell in source_cells}
        except MissingEntry:
            return []
        notes, seen, kept = [], set(), []
        for cell in nb.cells:
            metadata = cell.setdefault("metadata", {})
            grading = metadata.get("nbgrader")
            if grading is None:
                kept.append(cell)
                continue
            grade_id = grading.get("grade_id") if isinstance(grading, dict) else None
            if not isinstance(grade_id, str) or grade_id not in locked:
                # nbgrader drops an unknown grade id but keeps the rest of the grading metadata,
                # and then fails the whole notebook on the cell without a grade id.
                del metadata["nbgrader"]
                if grade_id:
                    notes.append(f"A cell carried the grading id `{shown(grade_id)}`, which this notebook "
                                 "does not have: it ran as your own cell.")
                kept.append(cell)
            elif grade_id not in seen:
                seen.add(grade_id)
                kept.append(cell)
            elif locked[grade_id]:
                notes.append(f"The read-only cell `{grade_id}` appeared more than once (a pasted copy): the "
                             "copy was left out, and the cell ran once, as released.")
            else:
                del metadata["nbgrader"]
                notes.append(f"The answer cell `{grade_id}` appeared more than once: the first one is graded "
                             "as your answer, and each copy ran as your own code where you put it.")
                kept.append(cell)
        for note in notes:
            self.log.warning("%s/%s: %s", shown(info["student"]), info["notebook"], note)
        nb.cells = kept
        return notes

    def preprocess_cell(self, cell, resources, index):
        return cell, resources
