"""The main job: regenerate the course, grade every demo class as one pool of tasks, report scores.

`make course` hands in the four demo classes and grades them together with the course's parallel
grader (course_tools.jobs.grade_class: one nbgrader autograde per student, on a local Dask cluster). The
tests grade each class in one stock `nbgrader autograde` call instead (`grade_demo_class` in
tests/support.py), and read the gradebook with `read_scores` as this job does."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.plugins.export import CsvExportPlugin

from course_tools.grading.sandbox import grading_sandbox, sandbox_setting
from course_tools.jobs.build_views import regenerate
from course_tools.jobs.class_report import read_scores, write_report
from course_tools.jobs.demo_class import (
    DEMO_CELL_TIMEOUT_S,
    DEMO_ROOT,
    KINDS,
    DemoSubmission,
    kind_of,
    unmet_need,
    write_submissions,
)
from course_tools.jobs.grade_class import DEFAULT_WORKERS, grade_class, slowest_cells, write_cell_times
from course_tools.jobs.nbgrader_course import generate_release, load_config, open_course
from course_tools.lessons import REPO_ROOT, assignment_ids


@dataclass
class GradedSubmission:
    """A demo student's grade cells as the gradebook records them."""

    submission: DemoSubmission
    scores: dict[str, float]
    max_scores: dict[str, float]
    seconds: float | None = None

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


def corpus_summary(graded_by_assignment: dict[str, list[GradedSubmission]]) -> str:
    """How many submissions of each kind every demo class holds, how they grade, and the median time
    to grade one submission of each lesson."""
    assignments = list(graded_by_assignment)
    lines = ["kind of submission                      " + "  ".join(f"{a[:2]:>3}" for a in assignments)
             + "   graded as declared"]
    for kind, label in KINDS.items():
        classes = graded_by_assignment.values()
        counts = [sum(kind_of(g.submission) == kind for g in graded) for graded in classes]
        matching = [g for graded in classes for g in graded if kind_of(g.submission) == kind]
        ok = sum(g.as_expected for g in matching)
        lines.append(f"{label:<40}" + "  ".join(f"{c:>3}" for c in counts) + f"   {ok} of {len(matching)}")
    medians = []
    for graded in graded_by_assignment.values():
        times = [g.seconds for g in graded if g.seconds is not None]
        medians.append(f"{statistics.median(times):>3.0f}" if times else "  -")
    lines.append(f"{'median seconds of one grading task':<40}" + "  ".join(medians))
    return "\n".join(lines)


def export_grades(root: Path, destination: Path) -> None:
    """Write nbgrader's CSV export of the whole gradebook."""
    api = open_course(root)
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gradebook:
        CsvExportPlugin(to=str(destination)).export(gradebook)


def score_table(assignment: str, graded: list[GradedSubmission], sandboxed: bool = True) -> str:
    """A plain-text table: one row per demo student, one column per graded cell."""
    cells = sorted(graded[0].max_scores)
    short = [c.split("_")[0] for c in cells]
    width = max(len(g.submission.student) for g in graded)
    lines = [f"{assignment}: demo class",
             f"{'student':<{width}}  " + "  ".join(f"{s:>4}" for s in short) + "   total  expected  verdict"]
    for g in graded:
        row = "  ".join(f"{g.scores.get(c, 0):>4g}" for c in cells)
        verdict = "ok" if g.as_expected else f"UNEXPECTED (lost {', '.join(g.lost) or 'nothing'})"
        if not g.as_expected and unmet_need(g.submission, sandboxed):
            verdict = "as expected without a sandbox or memory cgroup: it cheated successfully"
        totals = f"{g.total:>5g}  {g.expected_total:>8g}"
        lines.append(f"{g.submission.student:<{width}}  {row}   {totals}  {verdict}")
    maximum = sum(graded[0].max_scores.values())
    lines.append(f"{'max':<{width}}  " + "  ".join(f"{graded[0].max_scores[c]:>4g}" for c in cells)
                 + f"   {maximum:>5g}")
    return "\n".join(lines)


def representative(submissions: list[DemoSubmission]) -> list[DemoSubmission]:
    """One demo student of each kind (the first by name): the reference, the untouched release, a
    correct alternative, a realistic mistake, a broken notebook, an attack."""
    chosen = []
    for kind in KINDS:
        of_kind = sorted((s for s in submissions if kind_of(s) == kind), key=lambda s: s.student)
        chosen += of_kind[:1]
    return chosen


def grade_demo_classes(root: Path, assignments: list[str], workers: int,
                       whole: bool = True) -> dict[str, list[GradedSubmission]]:
    """Hand in the demo classes (`whole`, or one student of each kind per lesson), grade them as one
    pool of tasks, write feedback, and read the gradebook."""
    submissions = {assignment: write_submissions(root, assignment) for assignment in assignments}
    if not whole:
        submissions = {assignment: representative(subs) for assignment, subs in submissions.items()}
    # Broken notebooks (endless loops, kernels that die) take the longest: they start first.
    broken = frozenset((assignment, s.student) for assignment, subs in submissions.items()
                       for s in subs if kind_of(s) == "broken")
    outcomes = grade_class(root, {a: [s.student for s in subs] for a, subs in submissions.items()},
                           workers=workers, force=True, cell_timeout=DEMO_CELL_TIMEOUT_S, first=broken)
    failed = [o for o in outcomes if o.status != "graded"]
    if failed:
        raise RuntimeError("could not grade " + ", ".join(f"{o.assignment}/{o.student} ({o.message})"
                                                          for o in failed))
    seconds = {(o.assignment, o.student): o.seconds for o in outcomes}
    api = open_course(root)
    graded = {}
    for assignment, handed_in in submissions.items():
        # grade_class wrote each student's feedback page in its worker.
        with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gradebook:
            recorded = read_scores(gradebook, assignment)
        graded[assignment] = [GradedSubmission(submission, *recorded[submission.student],
                                               seconds=seconds[assignment, submission.student])
                              for submission in handed_in]
    return graded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-regenerate", action="store_true",
                        help="regenerate only release/ (fast), not the executed notebooks/")
    parser.add_argument("--demo", choices=("representative", "all"), default="all",
                        help="grade one demo student of each kind per lesson, or every one (the tests "
                             "grade every one)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help=f"worker processes grading at once (default {DEFAULT_WORKERS})")
    args = parser.parse_args(argv)
    # nbgrader 0.9.6 with SQLAlchemy 2.1 warns about its own session handling; harmless noise.
    warnings.filterwarnings("ignore", message=".*not in session.*")
    root = REPO_ROOT
    if not args.skip_regenerate:
        regenerate(root)
    else:  # the gradebook still needs each assignment's cells; release/ comes out the same
        for assignment in assignment_ids(root):
            generate_release(open_course(root), assignment)
    sandbox = grading_sandbox(sandbox_setting(load_config(root)))
    print(sandbox.message, flush=True)
    assignments = [a for a in assignment_ids(root) if (DEMO_ROOT / a).is_dir()]
    for assignment in sorted(set(assignment_ids(root)) - set(assignments)):
        print(f"{assignment}: no demo class yet, skipped")
    which = "one student of each kind from" if args.demo == "representative" else "every student of"
    print(f"grading {which} {len(assignments)} demo classes as one pool of {args.workers} workers ...",
          flush=True)
    started = time.monotonic()
    graded_by_assignment = grade_demo_classes(root, assignments, args.workers, whole=args.demo == "all")
    print(f"graded in {time.monotonic() - started:.0f} s")
    all_ok = True
    for assignment, graded in graded_by_assignment.items():
        print(score_table(assignment, graded, sandbox.available))
        all_ok &= all(g.as_expected for g in graded if not unmet_need(g.submission, sandbox.available))
    print(corpus_summary(graded_by_assignment))
    export_grades(root, root / "grades.csv")
    for assignment in graded_by_assignment:
        print(f"class report: {write_report(root, assignment)}")
    rows = write_cell_times(root, assignments, root / "cell_times.csv")
    print(f"slowest cells (every cell's time in {root / 'cell_times.csv'}):\n" + slowest_cells(rows))
    print(f"feedback: {root / 'feedback'}/<student>/<assignment>/   grades: {root / 'grades.csv'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
