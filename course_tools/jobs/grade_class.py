"""Grade a whole class in parallel: one task per student, each nbgrader's own autograde, on Dask.

    python -m course_tools.jobs.grade_class 04_memory                 # every submission in submitted/
    python -m course_tools.jobs.grade_class 04_memory alice bob       # only these students
    python -m course_tools.jobs.grade_class 04_memory --workers 4     # a LocalCluster of 4 processes
    python -m course_tools.jobs.grade_class 04_memory --scheduler tcp://10.0.0.5:8786 --db postgresql+psycopg://...

Each task runs `NbGraderAPI.autograde(assignment, student)` with the course's nbgrader_config.py
(sandbox, guard, timeouts), so a grade is exactly what `nbgrader autograde` gives. A task that
finishes writes a marker under `.grading/` beside the gradebook; a run grades only the students
without one (or whose submission changed since), so an interrupted run picks up where it
stopped. A task whose worker dies is retried once; a submission that still cannot be graded, for
a reason that is not the student's, is reported and its half-written grades are removed instead of
being recorded as a zero.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from course_tools.jobs.class_report import write_report
from course_tools.jobs.nbgrader_course import load_config, put_environment_on_path
from course_tools.lessons import REPO_ROOT, assignment_ids

STATE_DIR = ".grading"
# A submission's grading is mostly computing (importing torch, running the cells): one worker a core.
DEFAULT_WORKERS = os.cpu_count() or 1
TIMING_FIELDS = ("student", "notebook", "cell", "grade_id", "seconds", "outcome")


@dataclass
class Outcome:
    """What happened to one submission in this run."""

    assignment: str
    student: str
    status: str  # graded | unchanged | failed
    seconds: float = 0.0
    score: float | None = None
    max_score: float | None = None
    message: str = ""


# -- the course folder --------------------------------------------------------------------------

def default_db_url(root: Path) -> str:
    """sqlite beside the course, waiting up to a minute for another worker's write to finish."""
    return f"sqlite:///{Path(root).resolve() / 'gradebook.db'}?timeout=60"


def submitted_students(root: Path, assignment: str) -> list[str]:
    """Students with a folder submitted/<student>/<assignment>/, by name."""
    submitted = Path(root) / "submitted"
    if not submitted.is_dir():
        return []
    return sorted(p.name for p in submitted.iterdir()
                  if not p.name.startswith(".") and (p / assignment).is_dir())


def fingerprint(root: Path, assignment: str, student: str, max_depth: int = 20,
                max_entries: int = 5_000) -> str:
    """Names, sizes and times of the submitted files: changes when the student hands in again.

    The walk is iterative and bounded: a submission may hold a folder thousands of levels deep
    (the intake removes it only when the submission is graded)."""
    folder = Path(root) / "submitted" / student / assignment
    digest = hashlib.sha256()
    pending, seen = [(folder, 0)], 0
    while pending and seen < max_entries:
        current, depth = pending.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries[: max_entries - seen]:
            seen += 1
            info = entry.stat(follow_symlinks=False)
            digest.update(f"{Path(entry.path).relative_to(folder)}\0{info.st_size}\0{info.st_mtime_ns}\n"
                          .encode())
            if entry.is_dir(follow_symlinks=False) and depth < max_depth:
                pending.append((Path(entry.path), depth + 1))
    return digest.hexdigest()


def _marker(root: Path, assignment: str, student: str) -> Path:
    return Path(root) / STATE_DIR / assignment / f"{student}.json"


def is_graded(root: Path, assignment: str, student: str) -> bool:
    marker = _marker(root, assignment, student)
    try:
        return json.loads(marker.read_text())["fingerprint"] == fingerprint(root, assignment, student)
    except (OSError, ValueError, KeyError):
        return False


def cell_times_path(root: Path, assignment: str, student: str) -> Path:
    return Path(root) / STATE_DIR / assignment / "cell_times" / f"{student}.jsonl"


# -- one task -----------------------------------------------------------------------------------

def grade_one(root: str, assignment: str, student: str, db_url: str,
              cell_timeout: int | None = None) -> dict:
    """Run nbgrader's autograde for one student (in a worker process); return its Outcome as a dict."""
    import warnings

    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from sqlalchemy.exc import SAWarning

    # nbgrader 0.9.6 with SQLAlchemy 2.1 warns about its own session handling; harmless noise.
    warnings.filterwarnings("ignore", category=SAWarning)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    put_environment_on_path()
    config = load_config(Path(root))
    config.CourseDirectory.db_url = db_url
    if cell_timeout is not None:
        config.Execute.timeout = cell_timeout
    times = cell_times_path(Path(root), assignment, student)
    times.unlink(missing_ok=True)
    config.GuardedExecute.cell_times_path = str(times)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    started = time.monotonic()
    result = api.autograde(assignment, student, force=True, create=False)
    seconds = round(time.monotonic() - started, 2)
    if not result.get("success"):
        forget_submission(db_url, api.coursedir.course_id, assignment, student)
        return asdict(Outcome(assignment, student, "failed", seconds, message=failure_cause(result)))
    with Gradebook(db_url, api.coursedir.course_id) as gradebook:
        submission = gradebook.find_submission(assignment, student)
        score, max_score = float(submission.score), float(submission.max_score)
    # The student's feedback page, in this worker too: a teacher releases it with release_feedback.
    feedback = api.generate_feedback(assignment, student, force=True)
    if not feedback.get("success"):
        return asdict(Outcome(assignment, student, "failed", seconds, score, max_score,
                              message="graded, but its feedback page could not be written: "
                                      + failure_cause(feedback)))
    return asdict(Outcome(assignment, student, "graded", round(time.monotonic() - started, 2), score,
                          max_score))


def _exception_lines(text: str) -> list[str]:
    """The "Name: message" line that closes each Python traceback in `text`, in order.

    A logged traceback is indented as a whole, so the closing line is the first one indented less
    than the traceback's `File "..."` lines."""
    found, lines = [], text.splitlines()
    for start, line in enumerate(lines):
        if not line.rstrip().endswith("Traceback (most recent call last):"):
            continue
        frame_indent = None
        for after in lines[start + 1:]:
            if not after.strip():
                continue
            indent = len(after) - len(after.lstrip())
            if frame_indent is None and after.lstrip().startswith('File "'):
                frame_indent = indent
            elif frame_indent is None or indent < frame_indent:
                found.append(after.strip())
                break
    return found


def failure_cause(result: dict) -> str:
    """Why nbgrader could not grade a submission, from what its API captured.

    nbgrader's own exception only says "Please see the above traceback"; the traceback is in the
    captured log. The first exception there is the cause, the last the one that ended grading."""
    raised = _exception_lines(result.get("log") or "") or _exception_lines(result.get("error") or "")
    useful = [line for line in raised if "see the above traceback" not in line.lower()
              and "see the the above traceback" not in line.lower()]
    if not useful:
        last = (result.get("error") or "").strip().splitlines()[-1:]
        return (last[0] if last else "nbgrader reported a failure and logged no reason")[:500]
    cause, final = useful[0], useful[-1]
    return (cause if cause == final else f"{final} (caused by {cause})")[:500]


def forget_submission(db_url: str, course_id: str, assignment: str, student: str) -> None:
    """Remove what a failed or interrupted grading left in the gradebook: no grade is better than
    a half-recorded one."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gradebook:
        try:
            gradebook.remove_submission(assignment, student)
        except MissingEntry:
            pass


# -- the run ------------------------------------------------------------------------------------

def _client(workers: int, scheduler: str | None):
    from dask.distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler), None
    # One thread per worker process: each task drives one kernel; the kernels do the work.
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None, memory_limit=0)
    return Client(cluster), cluster


def _prepare(root: Path, db_url: str, tasks: list[tuple[str, str]]) -> None:
    """Create every student once, here, so that workers only write their own submission's rows,
    and remove what an interrupted run left half-recorded."""
    from nbgrader.api import Gradebook, MissingEntry

    course_id = load_config(root).CourseDirectory.course_id
    with Gradebook(db_url, course_id) as gradebook:
        for assignment in sorted({assignment for assignment, _ in tasks}):
            try:
                gradebook.find_assignment(assignment)
            except MissingEntry:
                raise SystemExit(
                    f"the gradebook has no assignment {assignment!r}: generate it into this gradebook first "
                    f"(nbgrader generate_assignment {assignment} --CourseDirectory.db_url=<the same URL>)"
                ) from None
        for student in sorted({student for _, student in tasks}):
            gradebook.update_or_create_student(student)
    for assignment, student in tasks:
        forget_submission(db_url, course_id, assignment, student)


def _report(outcome: Outcome, bar) -> None:
    if outcome.status == "graded":
        line = (f"{outcome.assignment} {outcome.student}: {outcome.score:g} / {outcome.max_score:g} "
                f"in {outcome.seconds:.1f} s")
    else:
        line = (f"{outcome.assignment} {outcome.student}: NOT GRADED, not the student's doing: "
                f"{outcome.message}")
    if bar is None:
        print(line, flush=True)
        return
    if outcome.status == "graded":
        bar.set_postfix_str(outcome.student, refresh=False)
    else:
        bar.write(line)
    bar.update(1)


def grade_class(root: Path, assignments: dict[str, list[str] | None], workers: int = 2,
                scheduler: str | None = None, db_url: str | None = None, force: bool = False,
                cell_timeout: int | None = None, progress: bool | None = None,
                first: frozenset[tuple[str, str]] = frozenset()) -> list[Outcome]:
    """Grade the named students (None: every submission) of each assignment as one pool of tasks;
    the (assignment, student) pairs in `first` start before the others (the slow ones: a pool
    ends no sooner than its last task)."""
    from dask import config as dask_config
    from dask.distributed import as_completed

    root = Path(root).resolve()
    db_url = db_url or default_db_url(root)
    put_environment_on_path()
    outcomes, tasks = [], []
    for assignment, students in assignments.items():
        for student in students or submitted_students(root, assignment):
            if not force and is_graded(root, assignment, student):
                outcomes.append(Outcome(assignment, student, "unchanged"))
            else:
                tasks.append((assignment, student))
    if not tasks:
        return outcomes
    _prepare(root, db_url, tasks)
    course_id = load_config(root).CourseDirectory.course_id
    progress = sys.stdout.isatty() if progress is None else progress
    # A task whose worker died runs once more on another; a second death is not the student's.
    with dask_config.set({"distributed.scheduler.allowed-failures": 1}):
        client, cluster = _client(workers, scheduler)
        try:
            futures = {client.submit(grade_one, str(root), assignment, student, db_url, cell_timeout,
                                     key=f"grade-{assignment}-{student}", pure=False,
                                     priority=int((assignment, student) in first)): (assignment, student)
                       for assignment, student in tasks}
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=len(futures), unit="submission", desc="grading", dynamic_ncols=True)
            for future in as_completed(futures):
                assignment, student = futures[future]
                try:
                    outcome = Outcome(**future.result())
                except Exception as error:  # a lost worker, twice: the infrastructure, not the student
                    message = f"{type(error).__name__}: {error}"
                    outcome = Outcome(assignment, student, "failed", message=message)
                    forget_submission(db_url, course_id, assignment, student)
                if outcome.status == "graded":
                    marker = _marker(root, assignment, student)
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.write_text(json.dumps({"fingerprint": fingerprint(root, assignment, student),
                                                  **asdict(outcome)}))
                _report(outcome, bar)
                outcomes.append(outcome)
            if bar is not None:
                bar.close()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    return outcomes


def write_cell_times(root: Path, assignments, destination: Path) -> list[dict]:
    """Gather every graded student's per-cell timings into one CSV; return the rows."""
    rows = []
    for assignment in assignments:
        for path in sorted((Path(root) / STATE_DIR / assignment / "cell_times").glob("*.jsonl")):
            for line in path.read_text().splitlines():
                rows.append({"assignment": assignment, **json.loads(line)})
    with destination.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=("assignment", *TIMING_FIELDS), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return rows


def slowest_cells(rows: list[dict], count: int = 5) -> str:
    """The cells that took longest on median over the class, one line each."""
    import statistics

    by_cell: dict[tuple, list[float]] = {}
    for row in rows:
        by_cell.setdefault((row["assignment"], row["grade_id"] or f"cell {row['cell']}"), []).append(
            float(row["seconds"]))
    ranked = sorted(by_cell.items(), key=lambda item: statistics.median(item[1]), reverse=True)
    return "\n".join(f"  {assignment} {cell}: median {statistics.median(values):.1f} s, "
                     f"max {max(values):.1f} s over {len(values)} runs"
                     for (assignment, cell), values in ranked[:count])


def summary(outcomes: list[Outcome], seconds: float) -> str:
    graded = [o for o in outcomes if o.status == "graded"]
    failed = [o for o in outcomes if o.status == "failed"]
    unchanged = len(outcomes) - len(graded) - len(failed)
    rate = len(graded) / seconds * 60 if seconds > 0 else 0.0
    text = (f"graded {len(graded)} submissions in {seconds:.0f} s ({rate:.1f} per minute); "
            f"{unchanged} unchanged since the last run; {len(failed)} could not be graded")
    for outcome in failed:
        text += f"\n  {outcome.assignment} {outcome.student}: {outcome.message} (run again to retry)"
    return text


def stop_on_interrupt() -> None:
    """Make Ctrl-C (SIGINT) stop this run, however it was started. A process inherits ignored and
    blocked signals from whatever started it, and Python then never raises KeyboardInterrupt: in
    one test run the coordinator, interrupted after its first grade, graded the whole class. The
    next run picks up where an interrupted one stopped, so stopping must work."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignment", help="an assignment id, or 'all'")
    parser.add_argument("students", nargs="*", help="grade only these students (default: every submission)")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS") or DEFAULT_WORKERS),
                        help=f"worker processes of the local Dask cluster (default {DEFAULT_WORKERS})")
    parser.add_argument("--scheduler", default=os.environ.get("SCHEDULER") or None,
                        help="address of a running Dask scheduler, e.g. tcp://host:8786")
    parser.add_argument("--db", default=os.environ.get("DB") or None,
                        help="gradebook URL (default: sqlite gradebook.db in the course folder)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the course folder")
    parser.add_argument("--force", action="store_true", help="grade again what is already graded")
    args = parser.parse_args(argv)
    stop_on_interrupt()
    names = assignment_ids(args.root) if args.assignment == "all" else [args.assignment]
    started = time.monotonic()
    outcomes = grade_class(args.root, {name: args.students or None for name in names}, args.workers,
                           args.scheduler, args.db, args.force)
    rows = write_cell_times(args.root, names, args.root / "cell_times.csv")
    print(summary(outcomes, time.monotonic() - started))
    for name in sorted({o.assignment for o in outcomes if o.status == "graded"}):
        print(f"class report: {write_report(args.root, name, args.db)}")
    if rows:
        print(f"slowest cells (all timings in {args.root / 'cell_times.csv'}):\n" + slowest_cells(rows))
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
