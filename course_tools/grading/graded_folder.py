"""What a student's code leaves in its grading folder, made safe once grading is over.

`clean_graded_folder` runs as `Autograde.post_convert_hook` and `GenerateFeedback.pre_convert_hook`
(nbgrader_config.py). nbgrader's generate_feedback copies every extra file of
autograded/<student>/<assignment>/ (what the student handed in, and whatever their code wrote while
it was graded) into the feedback folder, following links, and the formgrader serves that folder
from the teacher's Jupyter origin, with their login. So the hook removes the links and special
files a student's code left there, so that neither the teacher's tools nor nbgrader's copy follow
them, and appends `.txt` to the name of every file the formgrader would serve under a type a
browser may run (HTML, SVG, XML, JavaScript, PDF...).

The hooks find the grading folder in nbgrader's default layout, <course>/<step>/<student>/<assignment>/,
from the notebook paths nbgrader hands them.
"""

from __future__ import annotations

import mimetypes
import os
import stat
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from traitlets.log import get_logger

from course_tools.grading.submission_files import remove_entry, remove_unsafe_entries, shown

# The types under which the formgrader may serve a file of a graded folder: a browser shows each
# as pixels, as text or as a download, never as a page or a script. Every other type (HTML, SVG,
# XML, JavaScript, PDF, and whatever a machine's mime.types adds) is one to distrust.
INERT_TYPES = frozenset({
    "text/plain", "text/csv", "text/markdown", "text/x-python", "application/json",
    "application/octet-stream", "application/gzip", "image/png", "image/jpeg", "image/gif",
})
# A student's code can write any number of files while it is graded; the log names this many.
LOGGED_RENAMES = 20

def step_folder(notebook: str, step: str) -> Path:
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
    folders = {step_folder(path, CourseDirectory().autograded_directory) for path in notebooks}
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
