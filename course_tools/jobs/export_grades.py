"""`make export`: the gradebook as the files a teacher imports into a learning-management system.

Writes, into exports/ (or --to):

- `nbgrader.csv`: nbgrader's own CSV export, a row per student and assignment (raw score, late
  penalty, score), as `nbgrader export` writes it;
- `canvas.csv`: Canvas's gradebook import format: `Student`, `ID`, `SIS User ID`, `SIS Login ID`,
  `Section`, then one column per assignment, and a second row `Points Possible`;
- `moodle.csv`: a CSV for Moodle's "Import grades: CSV file": `ID number`, `Email address`,
  `Full name`, then one column per assignment (map the identifier and each grade item on import);
- `late_penalties.csv`: every score a late penalty reduced: raw score, penalty, score.

Every score is nbgrader's: the raw score less the late penalty nbgrader recorded at autograde (its
LateSubmissionPlugin, when the course sets one), never below 0; an assignment a student never
handed in scores 0, as in nbgrader's export.

The LMS's ids come from a mapping file (`--mapping`, default `lms_students.csv` in the course
root), a CSV with the column `nbgrader_id` and any of `name`, `email`, `canvas_id`,
`sis_user_id`, `sis_login_id`, `section`, `moodle_id_number`. Every student in the gradebook must
have a row: a missing one stops the export with an error that names every missing student, so
no grade is dropped on the way to the LMS.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

from course_tools.lessons import REPO_ROOT

MAPPING_COLUMNS = ("nbgrader_id", "name", "email", "canvas_id", "sis_user_id", "sis_login_id", "section",
                   "moodle_id_number")
CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_COLUMNS = ("ID number", "Email address", "Full name")


class ExportError(Exception):
    """The export cannot be written as asked (a student missing from the mapping, a bad file)."""


@dataclass(frozen=True)
class Score:
    raw: float
    penalty: float

    @property
    def final(self) -> float:
        return max(0.0, self.raw - self.penalty)


def read_mapping(path: Path) -> dict[str, dict[str, str]]:
    """{nbgrader id: {column: value}} from the mapping CSV."""
    if not path.is_file():
        raise ExportError(f"no mapping file at {path}: write a CSV with the columns "
                          f"{', '.join(MAPPING_COLUMNS)} (nbgrader_id is required), one row per student")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or "nbgrader_id" not in reader.fieldnames:
            raise ExportError(f"{path} has no nbgrader_id column (its columns: {reader.fieldnames})")
        unknown = sorted(set(reader.fieldnames) - set(MAPPING_COLUMNS))
        if unknown:
            raise ExportError(f"{path} has columns the export does not know: {', '.join(unknown)}; "
                              f"the known ones are {', '.join(MAPPING_COLUMNS)}")
        mapping: dict[str, dict[str, str]] = {}
        for row in reader:
            student = (row.get("nbgrader_id") or "").strip()
            if not student:
                raise ExportError(f"{path}, line {reader.line_num}: a row without an nbgrader_id")
            if student in mapping:
                raise ExportError(f"{path}, line {reader.line_num}: {student} appears twice")
            mapping[student] = {column: (row.get(column) or "").strip() for column in MAPPING_COLUMNS}
    return mapping


def read_scores(gradebook) -> tuple[list[tuple[str, float]], list[str], dict[tuple[str, str], Score]]:
    """The assignments (name, points possible) in gradebook order, the students, and each recorded
    (student, assignment) score."""
    from nbgrader.api import MissingEntry

    assignments = [(a.name, float(a.max_score)) for a in gradebook.assignments]
    students = [s.id for s in gradebook.students]
    scores = {}
    for assignment, _ in assignments:
        for student in students:
            try:
                submission = gradebook.find_submission(assignment, student)
            except MissingEntry:
                continue
            scores[student, assignment] = Score(float(submission.score),
                                                float(submission.late_submission_penalty or 0.0))
    return assignments, students, scores


def _number(value: float) -> str:
    return f"{value:g}"


def write_exports(gradebook, mapping: dict[str, dict[str, str]], destination: Path) -> dict[str, Path]:
    """Write the four files into `destination`; returns {kind: path}. Raises ExportError, writing
    nothing, when a student of the gradebook has no row in `mapping`."""
    from nbgrader.plugins.export import CsvExportPlugin

    assignments, students, scores = read_scores(gradebook)
    missing = [student for student in students if student not in mapping]
    if missing:
        raise ExportError(f"{len(missing)} student{'s' if len(missing) > 1 else ''} of the gradebook "
                          f"{'have' if len(missing) > 1 else 'has'} no row in the mapping file: "
                          f"{', '.join(missing)}. Add them (nothing was exported)")
    destination.mkdir(parents=True, exist_ok=True)
    paths = {kind: destination / f"{kind}.csv" for kind in ("nbgrader", "canvas", "moodle", "late_penalties")}
    CsvExportPlugin(to=str(paths["nbgrader"])).export(gradebook)

    def final(student: str, assignment: str) -> str:
        score = scores.get((student, assignment))
        return _number(score.final if score else 0.0)

    with paths["canvas"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*CANVAS_COLUMNS, *(name for name, _ in assignments)])
        writer.writerow(["Points Possible", "", "", "", "", *(_number(points) for _, points in assignments)])
        for student in students:
            ids = mapping[student]
            writer.writerow([ids["name"] or student, ids["canvas_id"], ids["sis_user_id"],
                             ids["sis_login_id"], ids["section"],
                             *(final(student, name) for name, _ in assignments)])
    with paths["moodle"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*MOODLE_COLUMNS, *(name for name, _ in assignments)])
        for student in students:
            ids = mapping[student]
            writer.writerow([ids["moodle_id_number"], ids["email"], ids["name"] or student,
                             *(final(student, name) for name, _ in assignments)])
    with paths["late_penalties"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "assignment", "raw_score", "late_submission_penalty", "score"])
        for (student, assignment), score in sorted(scores.items()):
            if score.penalty > 0:
                writer.writerow([student, assignment, _number(score.raw), _number(score.penalty),
                                 _number(score.final)])
    return paths


def main(argv: list[str] | None = None) -> int:
    from nbgrader.api import Gradebook

    from course_tools.jobs.nbgrader_course import open_course

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the course folder")
    parser.add_argument("--mapping", type=Path,
                        help="the mapping CSV (default: lms_students.csv in the root)")
    parser.add_argument("--to", type=Path, help="the folder to write (default: exports/ in the root)")
    parser.add_argument("--db", help="the gradebook's URL (default: the course's sqlite gradebook)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    api = open_course(root, db_url=args.db)
    try:
        mapping = read_mapping(args.mapping or root / "lms_students.csv")
        with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gradebook:
            paths = write_exports(gradebook, mapping, args.to or root / "exports")
    except ExportError as error:
        print(f"export: {error}", file=sys.stderr)
        return 1
    with paths["late_penalties"].open(encoding="utf-8") as handle:
        reduced = sum(1 for _ in handle) - 1
    for kind, path in paths.items():
        print(f"{kind:>15}: {path}")
    print(f"{reduced} score{'s' if reduced != 1 else ''} reduced by a late penalty (late_penalties.csv)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
