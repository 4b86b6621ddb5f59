"""What a teacher learns from a graded class: per exercise, who passed, the mistakes, and who lost
points only to the grader's limits.

After grading, `write_report(root, assignment)` reads what grading already wrote (the gradebook's
scores, the autograded notebooks' test cells and the release's stubs) and runs no student code. It
writes `reports/<assignment>.html` (tables and a bar chart per exercise, no script, readable
offline), `reports/<assignment>.json` (everything) and `reports/<assignment>.csv` (one row per
exercise and group). Each failed test cell falls in one group:

- a mistake a check recognised, by the name it gave it (`helpers.diagnosis.mistake`, recorded on the
  autograded cell by the grader: `course_tools.cells.DIAGNOSIS_KEY`), never by its text, which holds
  each student's numbers;
- `integrity`: the grader could not establish the test's integrity (a patched guard, a forged reply),
  as it recorded in the cell's metadata;
- `undiagnosed`: a failure no check named (a raw error, or a check's requirement without a named
  cause), so the teacher sees what the checks do not yet explain.

A test cell is `not attempted` when its exercise's solution cells are the release's stubs, and `not
graded` when the grader's limits ended it (time, a kernel that died, the notebook's time budget), as
the grader recorded in the cell's metadata (`course_tools.cells.GRADER_OUTCOME_KEY`; an error's
name is the kernel's to print): students who lost points only there are listed for a teacher to
look at by hand. A mistake recognised only by the error text the student's code raised is its own
group (`helpers.diagnosis.report_group`).

    python -m course_tools.jobs.class_report [assignment ...]
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from course_tools.cells import (
    MEMORY_MEASURED_KEY,
    grade_id,
    grader_outcome,
    is_solution,
    is_test,
    recorded_diagnosis,
)
from course_tools.grading.outcomes import DIED, OUT_OF_TIME, TAMPERED, TIMED_OUT, UNVERIFIED
from course_tools.jobs.nbgrader_course import open_course
from course_tools.lessons import REPO_ROOT, assignment_ids

PASSED, FAILED, NOT_ATTEMPTED, NOT_GRADED = "passed", "failed", "not attempted", "not graded"
STATUSES = (PASSED, FAILED, NOT_ATTEMPTED, NOT_GRADED)
UNDIAGNOSED, INTEGRITY = "undiagnosed", "integrity"
# Errors the grader writes when its own limits end a cell, not a check's verdict.
LIMIT_ERRORS = frozenset({DIED, TIMED_OUT, OUT_OF_TIME})
INTEGRITY_ERRORS = frozenset({TAMPERED, UNVERIFIED})
EXAMPLES = 3
MESSAGE_CHARS = 2_000


def read_scores(gradebook: Gradebook, assignment: str) -> dict[str, tuple[dict, dict]]:
    """student -> ({grade cell: score}, {grade cell: max score}) for every autograded submission."""
    result = {}
    for submission in gradebook.assignment_submissions(assignment):
        scores, max_scores = {}, {}
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                scores[grade.name] = float(grade.score)
                max_scores[grade.name] = float(grade.max_score)
        result[submission.student.id] = (scores, max_scores)
    return result


@dataclass
class CellOutcome:
    """One student's result on one test cell."""

    student: str
    points: float
    max_points: float
    status: str
    group: str = ""          # for a failed cell: the mistake's name, `integrity` or `undiagnosed`
    message: str = ""        # the failure as the student read it, cut short


@dataclass
class ExerciseReport:
    test: str
    max_points: float
    outcomes: list[CellOutcome] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    def points(self) -> dict:
        values = sorted(o.points for o in self.outcomes)
        if not values:
            return {"median": None, "lower_quartile": None, "upper_quartile": None, "min": None, "max": None}
        quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
        return {"median": statistics.median(values), "lower_quartile": quartiles[0],
                "upper_quartile": quartiles[2], "min": values[0], "max": values[-1]}

    def groups(self) -> list[dict]:
        """The failed cells by the mistake they name, largest first, each with a few example students."""
        by_group: dict[str, list[CellOutcome]] = {}
        for outcome in self.outcomes:
            if outcome.status == FAILED:
                by_group.setdefault(outcome.group, []).append(outcome)
        size = len(self.outcomes) or 1
        rows = [{"group": name, "count": len(members), "share": len(members) / size,
                 "examples": [m.student for m in members[:EXAMPLES]], "example_message": members[0].message}
                for name, members in by_group.items()]
        return sorted(rows, key=lambda row: (-row["count"], row["group"] == UNDIAGNOSED, row["group"]))


def _errors(cell) -> list[tuple[str, str]]:
    return [(str(o.get("ename", "")), str(o.get("evalue", ""))) for o in cell.get("outputs", [])
            if o.get("output_type") == "error"]


def _stubs(release_notebooks: list) -> dict[str, str]:
    """solution grade id -> the source the release hands out."""
    return {grade_id(cell): cell.source for notebook in release_notebooks for cell in notebook.cells
            if is_solution(cell)}


def _exercise(test_id: str) -> str:
    """ex3_1_test -> ex3_: the prefix the exercise's solution cells share."""
    return test_id.split("_", 1)[0] + "_"


def judge_cell(cell, points: float, max_points: float, untouched: bool) -> tuple[str, str, str]:
    """(status, group, message) of one autograded test cell."""
    errors = _errors(cell)
    if points >= max_points:
        return PASSED, "", ""
    message = errors[-1][1][:MESSAGE_CHARS] if errors else ""
    # What the grader recorded in the cell's metadata, never an error's name, which a kernel can print.
    outcome = grader_outcome(cell)
    if outcome in LIMIT_ERRORS or (not errors and cell.get("execution_count") is None):
        return NOT_GRADED, "", message or "the cell did not run: an earlier cell used up the grader's limits"
    if untouched:
        return NOT_ATTEMPTED, "", message
    if outcome in INTEGRITY_ERRORS:
        return FAILED, INTEGRITY, message
    return FAILED, recorded_diagnosis(cell) or UNDIAGNOSED, message


def build_report(root: Path, assignment: str, db_url: str | None = None) -> dict:
    """The class report of `assignment` as plain data (what the JSON file holds)."""
    root = Path(root)
    release = {path.stem: nbformat.read(path, as_version=4)
               for path in sorted((root / "release" / assignment).glob("*.ipynb"))}
    stubs = _stubs(list(release.values()))
    tests = [(name, grade_id(cell), cell) for name, notebook in release.items()
             for cell in notebook.cells if is_test(cell)]
    api = open_course(root, db_url=db_url)
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gradebook:
        scores = read_scores(gradebook, assignment)
    exercises = {test: ExerciseReport(test, 0.0) for _, test, _ in tests}
    unmeasured: set[str] = set()
    for student in sorted(scores):
        points, max_points = scores[student]
        graded = {}
        for path in (root / "autograded" / student / assignment).glob("*.ipynb"):
            notebook = nbformat.read(path, as_version=4)
            graded[path.stem] = {grade_id(c): c for c in notebook.cells}
            if notebook.metadata.get(MEMORY_MEASURED_KEY) is not True:
                unmeasured.add(student)
        for notebook_name, test, _ in tests:
            cells = graded.get(notebook_name, {})
            cell = cells.get(test, {})
            exercise = _exercise(test)
            untouched = all(cells.get(solution) is not None and cells[solution].source == stub
                            for solution, stub in stubs.items() if solution.startswith(exercise))
            maximum = max_points.get(test, 0.0)
            exercises[test].max_points = maximum
            status, group, message = judge_cell(cell, points.get(test, 0.0), maximum, untouched)
            exercises[test].outcomes.append(CellOutcome(student, points.get(test, 0.0), maximum, status,
                                                        group, message))
    limited = sorted({o.student for e in exercises.values() for o in e.outcomes if o.status == NOT_GRADED}
                     - {o.student for e in exercises.values() for o in e.outcomes
                        if o.status in (FAILED, NOT_ATTEMPTED)})
    return {
        "assignment": assignment,
        "students": len(scores),
        "exercises": [{"test": e.test, "max_points": e.max_points,
                       "counts": {status: e.count(status) for status in STATUSES},
                       "points": e.points(), "mistakes": e.groups(),
                       "outcomes": [asdict(o) for o in e.outcomes]} for e in exercises.values()],
        "lost_only_to_limits": limited,
        # Graded where the grader could not read the kernel's memory from outside: memory-judged
        # clauses fell back to the kernel's own evidence (docs/grading-trust.md).
        "memory_not_measured": sorted(unmeasured),
    }


def report_csv(report: dict) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["exercise", "group", "count", "share", "examples"])
    for exercise in report["exercises"]:
        for status in STATUSES:
            writer.writerow([exercise["test"], status, exercise["counts"][status],
                             f"{exercise['counts'][status] / max(report['students'], 1):.3f}", ""])
        for group in exercise["mistakes"]:
            writer.writerow([exercise["test"], f"mistake: {group['group']}", group["count"],
                             f"{group['share']:.3f}", " ".join(group["examples"])])
    return out.getvalue()


_STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;
text-align:left;vertical-align:top}th{background:#f3f3f3}code{font-size:.9em}.bar{fill:#4a78b5}
.undiagnosed{fill:#c0504d}.label{font-size:12px}"""


def _bar_chart(rows: list[tuple[str, int]], total: int, css: dict[str, str]) -> str:
    """An inline SVG: one horizontal bar per (label, count), as a share of `total`."""
    height, width, label_width = 22, 560, 240
    parts = [f'<svg role="img" width="{width}" height="{height * len(rows) + 4}" '
             f'xmlns="http://www.w3.org/2000/svg">']
    for row, (label, count) in enumerate(rows):
        y = row * height + 2
        length = 0 if not total else (width - label_width - 60) * count / total
        parts.append(f'<text class="label" x="0" y="{y + 15}">{html.escape(label[:34])}</text>'
                     f'<rect class="{css.get(label, "bar")}" x="{label_width}" y="{y + 3}" '
                     f'width="{length:.1f}" height="{height - 8}"/>'
                     f'<text class="label" x="{label_width + length + 4:.1f}" y="{y + 15}">{count}</text>')
    parts.append("</svg>")
    return "".join(parts)


def report_html(report: dict) -> str:
    escape = html.escape
    students = report["students"]
    body = [f"<h1>Class report: {escape(report['assignment'])}</h1>",
            f"<p>{students} graded submissions. A failed test falls in the group of the mistake its "
            "check named; <em>undiagnosed</em> holds failures no check explains yet.</p>"]
    for exercise in report["exercises"]:
        counts, points = exercise["counts"], exercise["points"]
        body.append(f"<h2><code>{escape(exercise['test'])}</code> ({exercise['max_points']:g} points)</h2>")
        body.append("<table><tr>" + "".join(f"<th>{escape(s)}</th>" for s in STATUSES)
                    + "<th>median points</th><th>quartiles</th></tr><tr>"
                    + "".join(f"<td>{counts[s]}</td>" for s in STATUSES)
                    + (f"<td>{points['median']:g}</td><td>{points['lower_quartile']:g} to "
                       f"{points['upper_quartile']:g}</td>" if points["median"] is not None
                       else "<td></td><td></td>")
                    + "</tr></table>")
        bars = [(s, counts[s]) for s in STATUSES] + [(g["group"], g["count"]) for g in exercise["mistakes"]]
        body.append(_bar_chart(bars, students, {UNDIAGNOSED: "bar undiagnosed"}))
        if exercise["mistakes"]:
            body.append("<table><tr><th>mistake</th><th>students</th><th>share</th><th>for example</th>"
                        "<th>what the first of them read</th></tr>")
            for group in exercise["mistakes"]:
                body.append(f"<tr><td><code>{escape(group['group'])}</code></td><td>{group['count']}</td>"
                            f"<td>{group['share']:.0%}</td><td>{escape(', '.join(group['examples']))}</td>"
                            f"<td>{escape(group['example_message'][:300])}</td></tr>")
            body.append("</table>")
    unmeasured = report.get("memory_not_measured", [])
    if unmeasured:
        body.append(f"<p><strong>Memory not measured from outside:</strong> {len(unmeasured)} of {students} "
                    "submissions were graded where the grader could not read the kernel's memory from its "
                    "own cgroup (not root, or no memory cgroup for each kernel); any memory requirement of "
                    "theirs was judged by the kernel's own evidence, which code that rewrites torch could "
                    "forge: " + escape(", ".join(unmeasured[:20])) + (" and more" if len(unmeasured) > 20
                                                                    else "") + ".</p>")
    limited = report["lost_only_to_limits"]
    body.append("<h2>Lost points only to the grader's limits</h2>")
    body.append("<p>" + (escape(", ".join(limited)) + ": look at these by hand." if limited else
                         "Nobody.") + "</p>")
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Class report: "
            f"{escape(report['assignment'])}</title><style>{_STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def write_report(root: Path, assignment: str, db_url: str | None = None) -> Path:
    """Write reports/<assignment>.html, .json and .csv under `root`; return the HTML page's path."""
    report = build_report(root, assignment, db_url)
    folder = Path(root) / "reports"
    folder.mkdir(exist_ok=True)
    (folder / f"{assignment}.json").write_text(json.dumps(report, indent=1) + "\n")
    (folder / f"{assignment}.csv").write_text(report_csv(report))
    page = folder / f"{assignment}.html"
    page.write_text(report_html(report))
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", help="assignment ids (default: every assignment)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the course folder")
    parser.add_argument("--db", default=None, help="gradebook URL (default: the course's sqlite gradebook)")
    args = parser.parse_args(argv)
    for assignment in args.assignments or assignment_ids(args.root):
        print(f"class report: {write_report(args.root, assignment, args.db)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
