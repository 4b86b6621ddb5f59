"""What feedback may show: the notebooks' pages, without hidden tests in sources or outputs.

nbgrader's generate_feedback copies every extra file of autograded/<student>/<assignment>/ (what
the student handed in, and whatever their code wrote while it was graded) into the feedback
folder, following links, and its ClearHiddenTests cleans cell sources only. The course's
configuration adds:

- `clean_graded_folder` (course_tools.grading.graded_folder), before feedback is generated: the
  grading folder without links, special files or files a browser would run;
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
import os
import re
import stat
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from traitlets.log import get_logger

from course_tools.cells import hidden_test_lines, is_test
from course_tools.grading.graded_folder import step_folder
from course_tools.grading.submission_files import remove_entry, shown

REDACTED = "(hidden test code removed)"
# nbgrader's release_feedback reads these two beside each page; they never reach the student.
BOOKKEEPING_FILES = ("timestamp.txt", "submission_secret.txt")
TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex")
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


def keep_only_feedback_pages(assignment=None, student=None, notebooks=None, **_ignored) -> None:
    """Remove from the feedback folder of these notebooks everything but their HTML pages."""
    pages = {}
    for path in notebooks or []:
        folder = step_folder(path, CourseDirectory().feedback_directory)
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
