"""The main job: regenerate the course, grade the demo class in one nbgrader call, report scores."""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.plugins.export import CsvExportPlugin

from course_tools.course import REPO_ROOT, assignment_ids, open_course, regenerate, require_success
from course_tools.demo_class import DEMO_ROOT, DemoSubmission, write_submissions


@dataclass
class GradedSubmission:
    """A demo student's grade cells as the gradebook records them."""

    submission: DemoSubmission
    scores: dict[str, float]
    max_scores: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.scores.values())

    @property
    def expected_total(self) -> float:
        return sum(points for cell, points in self.max_scores.items() if cell not in self.submission.loses)

    @property
    def lost(self) -> tuple[str, ...]:
        return tuple(cell for cell, score in self.scores.items() if score < self.max_scores[cell])

    @property
    def as_expected(self) -> bool:
        return set(self.lost) == set(self.submission.loses) and all(
            self.scores[c] == 0 for c in self.submission.loses if c in self.scores)


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


def grade_demo_class(root: Path, assignment: str, demo_root: Path = DEMO_ROOT) -> list[GradedSubmission]:
    """Hand in the demo class, autograde it in one call, write feedback, and read the gradebook."""
    api = open_course(root)
    submissions = write_submissions(root, assignment, demo_root)
    require_success(api.autograde(assignment, "*", force=True, create=True), f"autograde {assignment}")
    require_success(api.generate_feedback(assignment, force=True), f"generate_feedback {assignment}")
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gradebook:
        recorded = read_scores(gradebook, assignment)
    graded = []
    for submission in submissions:
        if submission.student not in recorded:
            raise RuntimeError(f"{submission.student} has no grades for {assignment} in the gradebook")
        graded.append(GradedSubmission(submission, *recorded[submission.student]))
    return graded


def export_grades(root: Path, destination: Path) -> None:
    """Write nbgrader's CSV export of the whole gradebook."""
    api = open_course(root)
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gradebook:
        CsvExportPlugin(to=str(destination)).export(gradebook)


def score_table(assignment: str, graded: list[GradedSubmission]) -> str:
    """A plain-text table: one row per demo student, one column per graded cell."""
    cells = sorted(graded[0].max_scores)
    short = [c.split("_")[0] for c in cells]
    width = max(len(g.submission.student) for g in graded)
    lines = [f"{assignment}: demo class",
             f"{'student':<{width}}  " + "  ".join(f"{s:>4}" for s in short) + "   total  expected  verdict"]
    for g in graded:
        row = "  ".join(f"{g.scores.get(c, 0):>4g}" for c in cells)
        verdict = "ok" if g.as_expected else f"UNEXPECTED (lost {', '.join(g.lost) or 'nothing'})"
        totals = f"{g.total:>5g}  {g.expected_total:>8g}"
        lines.append(f"{g.submission.student:<{width}}  {row}   {totals}  {verdict}")
    maximum = sum(graded[0].max_scores.values())
    lines.append(f"{'max':<{width}}  " + "  ".join(f"{graded[0].max_scores[c]:>4g}" for c in cells)
                 + f"   {maximum:>5g}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-regenerate", action="store_true",
                        help="grade against the committed release/ instead of regenerating both views")
    args = parser.parse_args(argv)
    # nbgrader 0.9.6 with SQLAlchemy 2.1 warns about its own session handling; harmless noise.
    warnings.filterwarnings("ignore", message=".*not in session.*")
    root = REPO_ROOT
    if not args.skip_regenerate:
        regenerate(root)
    all_ok = True
    for assignment in assignment_ids(root):
        if not (DEMO_ROOT / assignment).is_dir():
            print(f"{assignment}: no demo class yet, skipped")
            continue
        print(f"grading the {assignment} demo class in one nbgrader call ...", flush=True)
        graded = grade_demo_class(root, assignment)
        print(score_table(assignment, graded))
        all_ok &= all(g.as_expected for g in graded)
    export_grades(root, root / "grades.csv")
    print(f"feedback: {root / 'feedback'}/<student>/<assignment>/   grades: {root / 'grades.csv'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
