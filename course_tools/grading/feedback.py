"""What feedback may show: the notebooks' pages, without hidden tests in sources or outputs.

nbgrader's generate_feedback copies every extra file of autograded/<student>/<assignment>/ (what
the student handed in, and whatever their code wrote while it was graded) into the feedback
folder, following links, and its ClearHiddenTests cleans cell sources only. The course's
configuration adds:

- `clean_graded_folder`, as `Autograde.post_convert_hook` and `GenerateFeedback.pre_convert_hook`:
  removes the links and special files a student's code left in its grading folder, so neither
  the teacher's tools nor nbgrader's copy follow them, and appends `.txt` to the name of every
  file there that the formgrader would serve under a type a browser may run (HTML, SVG, XML,
  JavaScript, PDF...): it serves the folder from the teacher's Jupyter origin, with their login;
- `keep_only_feedback_pages`, as `GenerateFeedback.post_convert_hook`: the feedback folder keeps
  the notebooks' HTML pages (and the two bookkeeping files release_feedback reads), nothing else;
- `RedactHiddenTests`, before ClearHiddenTests: every output line that shows a hidden test line
  (a printed input history, say) is replaced by "(hidden test code removed)", and marker text a
  student typed in their own cell no longer makes ClearHiddenTests fail the whole feedback;
- `ConciseErrors`, after ClearHiddenTests: each error reduced to its message.

The hooks find the grading and feedback folders in nbgrader's default layout,
<course>/<step>/<student>/<assignment>/, from the notebook paths nbgrader hands them.
"""

from __future__ import annotations

import html
import json
import mimetypes
import os
import re
import stat
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from traitlets.log import get_logger

from course_tools.cells import hidden_test_lines, is_test
from course_tools.grading.submission_files import remove_entry, remove_unsafe_entries, shown

REDACTED = "(hidden test code removed)"
# nbgrader's release_feedback reads these two beside each page; they never reach the student.
BOOKKEEPING_FILES = ("timestamp.txt", "submission_secret.txt")
TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex")
# The types under which the formgrader may serve a file of a graded folder: a browser shows each
# as pixels, as text or as a download, never as a page or a script. Every other type (HTML, SVG,
# XML, JavaScript, PDF, and whatever a machine's mime.types adds) is one to distrust.
INERT_TYPES = frozenset({
    "text/plain", "text/csv", "text/markdown", "text/x-python", "application/json",
    "application/octet-stream", "application/gzip", "image/png", "image/jpeg", "image/gif",
})
# A student's code can write any number of files while it is graded; the log names this many.
LOGGED_RENAMES = 20
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ConciseErrors(NbGraderPreprocessor):
    """Replace each error output's traceback with "ErrorName: message".

    IPython tracebacks quote the source lines around the failure, which would show the hidden
    tests that ClearHiddenTests removed from the cell. The message, written for the student,
    is what feedback should show.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [f"{output['ename']}: {output['evalue']}"]
        return cell, resources


def _defused(marker: str) -> str:
    return marker.replace(" ", "_") if " " in marker else marker[:1] + "_" + marker[1:]


def _variants(line: str):
    """The line as printed, and as it reads once unescaped: `print(In)` shows each cell as a repr,
    HTML outputs escape quotes, tracebacks colour their tokens."""
    for text in {line, html.unescape(line), _ANSI.sub("", line)}:
        yield text
        yield (text.replace("\\n", "\n").replace("\\t", "\t").replace("\\'", "'").replace('\\"', '"')
               .replace("\\\\", "\\"))


def reveals(line: str, secrets) -> bool:
    return any(secret in variant for variant in _variants(line) for secret in secrets)


def redact_text(text, secrets) -> str:
    """`text` with each line that shows a secret replaced, consecutive ones by a single line."""
    if isinstance(text, list):
        text = "".join(text)
    kept = []
    for line in str(text).splitlines(keepends=True):
        if not reveals(line, secrets):
            kept.append(line)
        elif not (kept and kept[-1].rstrip("\n") == REDACTED):
            kept.append(REDACTED + ("\n" if line.endswith("\n") else ""))
        elif line.endswith("\n") and not kept[-1].endswith("\n"):
            kept[-1] += "\n"
    return "".join(kept)


def redact_output(output, secrets) -> None:
    kind = output.get("output_type")
    if kind == "stream":
        output["text"] = redact_text(output.get("text", ""), secrets)
    elif kind == "error":
        output["ename"] = redact_text(output.get("ename", ""), secrets)
        output["evalue"] = redact_text(output.get("evalue", ""), secrets)
        output["traceback"] = [redact_text(line, secrets) for line in output.get("traceback", [])]
    elif "data" in output:
        data = output["data"]
        for mime, value in list(data.items()):
            if mime.startswith("image/") and mime != "image/svg+xml":
                continue  # base64 pixels
            if mime in TEXT_MIMES and isinstance(value, (str, list)):
                data[mime] = redact_text(value, secrets)
            elif reveals(value if isinstance(value, str) else json.dumps(value), secrets):
                del data[mime]
        if not data:
            data["text/plain"] = REDACTED


class RedactHiddenTests(NbGraderPreprocessor):
    """Feedback never shows a hidden test line, whatever a cell printed; goes before ClearHiddenTests.

    The hidden lines are those of the notebook's own test cells (restored from the release at
    autograde), as `course_tools.cells.hidden_test_lines` defines them. Every output line that
    contains one, or a hidden-test marker, is replaced. Marker text in any other cell (a student's
    comment, say) is changed so that ClearHiddenTests, which raises on a hidden-test
    region outside a test cell, leaves the cell alone.
    """

    def preprocess(self, nb, resources):
        clear = ClearHiddenTests(config=self.config)
        markers = (clear.begin_test_delimeter, clear.end_test_delimeter)
        secrets = sorted(hidden_test_lines(cell for cell in nb.cells if is_test(cell))) + list(markers)
        for cell in nb.cells:
            if not is_test(cell):
                for marker in markers:
                    cell.source = cell.source.replace(marker, _defused(marker))
            for output in cell.get("outputs", []):
                redact_output(output, secrets)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        return cell, resources


def _step_folder(notebook: str, step: str) -> Path:
    """root/<any step>/<student>/<assignment>/<name>.ipynb -> root/<step>/<student>/<assignment>."""
    folder = Path(os.path.abspath(notebook)).parent
    return folder.parents[2] / step / folder.parent.name / folder.name


def served_type(path: Path) -> str:
    """The Content-Type the formgrader sends for the file at `path`: its SubmissionFilesHandler is
    tornado's StaticFileHandler, whose get_content_type this is. The path must be absolute, as
    tornado's is: mimetypes reads a bare name such as `data:,x.html` as a data URL (text/plain)."""
    mime, encoding = mimetypes.guess_type(os.path.abspath(path))
    if encoding == "gzip":
        return "application/gzip"
    if encoding is not None or mime is None:
        return "application/octet-stream"
    return mime


def serve_as_text(folder: Path, files: list[str]) -> list[tuple[str, str, bool]]:
    """Append `.txt` to the name of each of `files` (relative to `folder`) that the formgrader would
    serve under a type not in INERT_TYPES, so that it is still there to read, as text; a file whose
    new name is taken or too long is removed (what was handed in stays in submitted/). The
    notebooks nbgrader grades are left as they are. Returns (file, type, renamed) for each.

    This runs once grading is over, so the student's code found every file under its own name."""
    changed = []
    for relative in files:
        if "/" not in relative and relative.endswith(".ipynb"):
            continue
        path = folder / relative
        mime = served_type(path)
        if mime in INERT_TYPES:
            continue
        target = path.with_name(path.name + ".txt")
        try:
            if os.path.lexists(target):
                raise FileExistsError(target)
            os.rename(path, target)
            changed.append((relative, mime, True))
        except OSError:
            if remove_entry(path):
                changed.append((relative, mime, False))
    return changed


def _log_served_as_text(folder: Path, changed: list[tuple[str, str, bool]]) -> None:
    where = shown("/".join(folder.parts[-2:]))
    for relative, mime, renamed in changed[:LOGGED_RENAMES]:
        if renamed:
            get_logger().warning("%s: %s renamed %s, so that the formgrader serves it as text, not as %s",
                                 where, shown(relative), shown(relative + ".txt"), mime)
        else:
            get_logger().warning("%s: %s removed: the formgrader would serve it as %s, and it could not be "
                                 "renamed to end in .txt", where, shown(relative), mime)
    if len(changed) > LOGGED_RENAMES:
        get_logger().warning("%s: %d more files renamed or removed, for the same reason", where,
                             len(changed) - LOGGED_RENAMES)


def clean_graded_folder(assignment=None, student=None, notebooks=None, **_ignored) -> None:
    """Remove links and special files from the grading folder of these notebooks (autograded/),
    take a notebook that was one of them off nbgrader's list, in place, and rename the files the
    formgrader would serve as something a browser runs (`serve_as_text`)."""
    notebooks = notebooks if notebooks is not None else []
    folders = {_step_folder(path, CourseDirectory().autograded_directory) for path in notebooks}
    for folder in folders:
        try:
            if os.path.islink(folder):
                os.unlink(folder)
                get_logger().warning("%s was a link: removed, so no feedback for it", shown(folder))
                continue
            if not folder.is_dir():
                continue
            dropped, files = remove_unsafe_entries(folder)
        except Exception as error:  # nbgrader logs a hook's exceptions at INFO level only
            get_logger().error("Could not clean %s (%s): its files may hold links", shown(folder),
                               type(error).__name__)
            continue
        for item in dropped:
            get_logger().warning("%s: %s left behind by grading: %s", shown("/".join(folder.parts[-2:])),
                                 shown(item.path), item.why)
        try:
            changed = serve_as_text(folder, [relative for relative, _ in files])
        except Exception as error:
            get_logger().error("Could not rename the files of %s (%s): the formgrader may serve one that "
                               "runs in the teacher's browser", shown(folder), type(error).__name__)
            continue
        _log_served_as_text(folder, changed)
    notebooks[:] = [path for path in notebooks
                    if os.path.lexists(path) and stat.S_ISREG(os.lstat(path).st_mode)]


def keep_only_feedback_pages(assignment=None, student=None, notebooks=None, **_ignored) -> None:
    """Remove from the feedback folder of these notebooks everything but their HTML pages."""
    pages = {}
    for path in notebooks or []:
        folder = _step_folder(path, CourseDirectory().feedback_directory)
        pages.setdefault(folder, set()).add(Path(path).stem + ".html")
    for folder, keep in pages.items():
        try:
            if os.path.islink(folder) or not folder.is_dir():
                continue
            for name in os.listdir(folder):
                path = folder / name
                regular = stat.S_ISREG(os.lstat(path).st_mode)
                if not (regular and (name in keep or name in BOOKKEEPING_FILES)):
                    remove_entry(path)
        except Exception as error:
            get_logger().error("Could not clean %s (%s): it may hold more than feedback pages",
                               shown(folder), type(error).__name__)
