"""Measure grading: stock serial nbgrader against the course's grader, and the floor beneath both.

    python -m course_tools.measure.grading_benchmark                 # 32 submissions of 04_memory
    python -m course_tools.measure.grading_benchmark --submissions 64 --assignment 02_gradient_accumulation

A synthetic class is made from the lesson's demo class (its correct and mistaken students,
repeated under new names). The same class is then graded four ways, each in a fresh course copy:

- floor: every submission executed with nbclient alone, one after another (no grading at all);
- stock: `nbgrader autograde` with nbgrader's own steps, serially;
- course, serial: `nbgrader autograde` with this course's configuration (intake, sandbox, guard);
- course, parallel: course_tools.jobs.grade_class with `--workers` processes.

It prints seconds per submission for each, submissions per minute, the ratios docs/run-time.md quotes,
and a projection for whole courses. With --update-readme the table between docs/run-time.md's
grading-benchmark markers is rewritten. Timings belong here, never in a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_tools.cells import grade_id, is_read_only, is_test
from course_tools.grading.execute import KERNEL_START
from course_tools.jobs.class_report import read_scores
from course_tools.jobs.demo_class import demo_file, kind_of, load_demo_class, write_submissions
from course_tools.jobs.grade_class import cell_times_path, default_db_url, grade_class
from course_tools.jobs.nbgrader_course import generate_release, open_course, require_success
from course_tools.lessons import CELL_TIMEOUT_S, COURSE_ID, REPO_ROOT
from course_tools.measure.notebook_times import machine, update_readme

START, END = "<!-- grading-benchmark:start -->", "<!-- grading-benchmark:end -->"
# Only honest work and realistic mistakes: a class of endless loops would measure the timeout.
KINDS = ("reference", "alternative", "mistake")


def make_course(folder: Path, assignment: str, submissions: int) -> Path:
    """A course copy with the assignment released and `submissions` students handed in."""
    root = folder / "course"
    root.mkdir(parents=True)
    shutil.copytree(REPO_ROOT / "source", root / "source")
    shutil.copy(REPO_ROOT / "nbgrader_config.py", root)
    generate_release(open_course(root), assignment)
    demo = [s for s in load_demo_class(assignment) if kind_of(s) in KINDS and not s.files]
    class_folder = folder / "class" / assignment
    class_folder.mkdir(parents=True)
    for number in range(submissions):
        original = demo[number % len(demo)]
        text = demo_file(assignment, original.student).read_text()
        (class_folder / f"s{number:03d}.py").write_text(text)
    write_submissions(root, assignment, class_folder.parent)
    return root


def floor(root: Path, assignment: str) -> list[float]:
    """Seconds to execute each submitted notebook with nbclient alone."""
    times = []
    for path in sorted((root / "submitted").glob(f"*/{assignment}/*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(notebook, kernel_name="python3", timeout=CELL_TIMEOUT_S, allow_errors=True,
                                resources={"metadata": {"path": str(path.parent)}})
        started = time.perf_counter()
        client.execute()
        times.append(time.perf_counter() - started)
    return times


def stock(root: Path, assignment: str) -> float:
    """Seconds for nbgrader's own autograde steps over the class, serially."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.course_id = COURSE_ID
    config.Execute.timeout = CELL_TIMEOUT_S
    config.Execute.kernel_name = "python3"
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    started = time.perf_counter()
    require_success(api.autograde(assignment, "*", force=True, create=True), "stock autograde")
    return time.perf_counter() - started


def course_serial(root: Path, assignment: str) -> float:
    started = time.perf_counter()
    require_success(open_course(root).autograde(assignment, "*", force=True, create=True), "autograde")
    return time.perf_counter() - started


def course_parallel(root: Path, assignment: str, workers: int) -> tuple[float, dict[str, float]]:
    """Seconds for the class with the parallel grader, and where one submission's time went."""
    started = time.perf_counter()
    outcomes = grade_class(root, {assignment: None}, workers=workers, force=True, progress=False)
    if any(o.status != "graded" for o in outcomes):
        raise RuntimeError("the parallel grader could not grade every submission")
    return time.perf_counter() - started, breakdown(root, assignment, outcomes)


def scores(root: Path, assignment: str) -> dict[str, dict]:
    """student -> {grade cell: score} in the course copy's gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(default_db_url(root), COURSE_ID) as gradebook:
        return {student: got for student, (got, _) in read_scores(gradebook, assignment).items()}


def grade_differences(reference: dict[str, dict], other: dict[str, dict]) -> list[str]:
    """The students whose grades differ between two gradings of the same class (or who lack one)."""
    return sorted(student for student in reference.keys() | other.keys()
                  if reference.get(student) != other.get(student))


PHASES = ("kernel start: sandbox, fork from the template, the guard",
          "the setup cell: imports the template did not do",
          "demonstration and solution cells",
          "test cells, judged in the grader's process",
          "nbgrader around them: copying, checking, gradebook, writing")


def breakdown(root: Path, assignment: str, outcomes) -> dict[str, float]:
    """Mean seconds per submission in each of PHASES, from the cell times GuardedExecute recorded
    (`(kernel start)` rows included) and each task's whole autograde time."""
    release = [c for path in (root / "release" / assignment).glob("*.ipynb")
               for c in nbformat.read(path, as_version=4).cells]
    tests = {grade_id(c) for c in release if is_test(c)}
    setup = {grade_id(c) for c in release if is_read_only(c) and not is_test(c)}
    totals = dict.fromkeys(PHASES, 0.0)
    for outcome in outcomes:
        rows = [json.loads(line) for line in cell_times_path(root, assignment, outcome.student)
                .read_text().splitlines()]
        for row in rows:
            name = row["grade_id"]
            phase = (0 if name == KERNEL_START else 1 if name in setup else 3 if name in tests else 2)
            totals[PHASES[phase]] += row["seconds"]
        totals[PHASES[4]] += outcome.seconds - sum(row["seconds"] for row in rows)
    return {phase: seconds / len(outcomes) for phase, seconds in totals.items()}


def _duration(hours: float) -> str:
    return f"{hours:.1f} h" if hours >= 1 else f"{max(1, round(hours * 60))} min"


def projection(per_submission: float) -> str:
    """Hours for whole courses, scaling the measured per-submission time by worker count."""
    lines = ["| students x 4 lessons | 2 workers | 16 workers | 64 workers |",
             "| --- | --- | --- | --- |"]
    for students in (300, 1000):
        hours = [students * 4 * per_submission / count / 3600 for count in (2, 16, 64)]
        lines.append(f"| {students:,} | " + " | ".join(_duration(h) for h in hours) + " |")
    return "\n".join(lines)


def report(assignment: str, count: int, workers: int, floor_times: list[float], stock_s: float,
           serial_s: float, parallel_s: float, phases: dict[str, float],
           differing: dict[str, list[str]]) -> str:
    floor_each = statistics.mean(floor_times)
    stock_each, serial_each, parallel_each = stock_s / count, serial_s / count, parallel_s / count
    lines = [
        f"Measured by `make grading-benchmark` on {machine()}: {count} submissions of `{assignment}`.",
        "",
        "| grading | s per submission | vs. the floor | submissions per minute |",
        "| --- | --- | --- | --- |",
        f"| nbclient alone (the floor) | {floor_each:.1f} | 1.00x | {60 / floor_each:.1f} |",
        f"| stock nbgrader, serial | {stock_each:.1f} | {stock_each / floor_each:.2f}x | "
        f"{60 / stock_each:.1f} |",
        f"| the course's grader, serial | {serial_each:.1f} | {serial_each / floor_each:.2f}x | "
        f"{60 / serial_each:.1f} |",
        f"| the course's grader, {workers} workers | {parallel_each:.1f} | "
        f"{parallel_each / floor_each:.2f}x | {60 / parallel_each:.1f} |",
        "",
        f"Parallel against stock serial: {stock_each / parallel_each:.2f}x the submissions per minute.",
        "Grades against stock nbgrader's, cell by cell: " + "; ".join(
            f"{name}: " + (f"{len(students)} of {count} differ ({', '.join(students[:5])})" if students
                           else f"all {count} equal") for name, students in differing.items()) + ".",
        f"Projected from the {workers}-worker rate on this machine, assuming workers on as many cores:",
        "",
        projection(parallel_each * workers),
        "",
        f"Where one submission's time goes, with {workers} workers (mean seconds of one grading task):",
        "",
        "| phase | seconds | share |",
        "| --- | --- | --- |",
        *(f"| {phase} | {seconds:.2f} | {seconds / sum(phases.values()):.0%} |"
          for phase, seconds in phases.items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assignment", default="04_memory")
    parser.add_argument("--submissions", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args(argv)
    if args.submissions < 1 or args.workers < 1:
        parser.error("--submissions and --workers must be at least 1")
    # As the tests and the parallel grader's workers do: one OpenMP thread per kernel.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="grading-benchmark-") as folder:
        results, graded = {}, {}
        for name in ("floor", "stock", "serial", "parallel"):
            root = make_course(Path(folder) / name, args.assignment, args.submissions)
            print(f"{name}: grading {args.submissions} submissions ...", flush=True)
            if name == "floor":
                results[name] = floor(root, args.assignment)
            elif name == "stock":
                results[name] = stock(root, args.assignment)
            elif name == "serial":
                results[name] = course_serial(root, args.assignment)
            else:
                results[name], phases = course_parallel(root, args.assignment, args.workers)
            if name != "floor":
                graded[name] = scores(root, args.assignment)
        differing = {name: grade_differences(graded["stock"], graded[name])
                     for name in ("serial", "parallel")}
        text = report(args.assignment, args.submissions, args.workers, results["floor"], results["stock"],
                      results["serial"], results["parallel"], phases, differing)
    print(text)
    if any(differing.values()):
        raise SystemExit(f"the course's grader and stock nbgrader disagree: {differing}")
    if args.update_readme:
        update_readme(text, start=START, end=END)


if __name__ == "__main__":
    main()
