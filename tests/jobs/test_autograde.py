"""The parallel grader (course_tools.jobs.grade_class) with real parts: a Dask scheduler and two workers as
separate processes over TCP on 127.0.0.1, a throw-away PostgreSQL server, a worker killed while it
grades and a coordinator interrupted and run again. Each class grades as serial nbgrader does.

One small class of lesson 04 (the fastest to grade) serves every test. Each parallel run must
record, each submission once, the grades its demo files declare; tests/grading/test_grading.py grades the
same students with one serial `nbgrader autograde` call and holds them to the same declarations,
so the parallel grades equal the serial ones without grading the class serially a second time.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from support import copy_course

from course_tools.jobs.class_report import read_scores
from course_tools.jobs.demo_class import demo_file, load_demo_class, write_submissions
from course_tools.jobs.grade_class import default_db_url, grade_class
from course_tools.jobs.nbgrader_course import generate_release, open_course
from course_tools.lessons import COURSE_ID

pytestmark = pytest.mark.slow

ASSIGNMENT = "04_memory"
STUDENTS = ("reference", "counts_parameters", "wrong_quick_check")
# The student's kernel tries the gradebook's server: the sandbox has no network, and the server's
# Unix socket lies outside the kernel's view. It then waits, so that a coordinator interrupted when
# the first grade is recorded is surely in its middle: the other three take a few seconds each, and
# on a loaded machine their first grades came in so close together that the interruption landed
# after the last one.
CALLS_THE_GRADEBOOK = '''# about: Tries to reach the gradebook's server, then takes its time.
# base: solution
# loses: ex5_1_test
# says: reached the gradebook: False
# %% ex5_1_solution
import socket
import time

reached = False
for address in [("127.0.0.1", {port})]:
    try:
        socket.create_connection(address, timeout=2).close()
        reached = True
    except OSError:
        pass
try:
    unix = socket.socket(socket.AF_UNIX)
    unix.connect("{socket_path}")
    reached = True
except OSError:
    pass
print("reached the gradebook:", reached)
time.sleep(40)
QUICK_CHECK = "a"
'''


def make_class(root: Path, extra: dict[str, str] | None = None, db_url: str | None = None) -> Path:
    """A course at `root` with lesson 04 released (into the gradebook at `db_url`, by default
    sqlite in the course) and the small class handed in."""
    copy_course(root)
    generate_release(open_course(root, db_url=db_url), ASSIGNMENT)
    demo = root.parent / (root.name + "-demo") / ASSIGNMENT
    demo.mkdir(parents=True)
    for student in STUDENTS:
        shutil.copy(demo_file(ASSIGNMENT, student), demo)
    for student, text in (extra or {}).items():
        (demo / f"{student}.py").write_text(text)
    write_submissions(root, ASSIGNMENT, demo.parent)
    return root


def scores(db_url: str) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Each student's score per test cell, and the cells' maximum scores, from the gradebook."""
    with Gradebook(db_url, COURSE_ID) as gradebook:
        recorded = read_scores(gradebook, ASSIGNMENT)
    maxima = next(iter(recorded.values()))[1]
    return {student: cells for student, (cells, _) in recorded.items()}, maxima


def declared_scores(max_scores: dict[str, float]) -> dict[str, dict[str, float]]:
    """The grades serial nbgrader gives the class: what each demo file declares (test_grading.py
    holds one serial autograde of these students to it)."""
    return {submission.student: {cell: 0.0 if cell in submission.loses else points
                                  for cell, points in max_scores.items()}
            for submission in load_demo_class(ASSIGNMENT) if submission.student in STUDENTS}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def dask_processes(tmp_path):
    """`dask scheduler` and two `dask worker` processes on 127.0.0.1; yields the scheduler address."""
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    address = f"tcp://127.0.0.1:{free_port()}"
    environment = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1", "OMP_NUM_THREADS": "1"}
    processes = [subprocess.Popen([*dask, "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                                   "--no-dashboard"], env=environment, stderr=subprocess.DEVNULL)]
    for _ in range(2):
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
             "--no-dashboard", "--memory-limit", "0", "--host", "127.0.0.1"],
            env=environment, stderr=subprocess.DEVNULL, cwd=tmp_path))
    try:
        from dask.distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGINT)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_a_dask_cluster_grades_as_serial_nbgrader_even_when_a_worker_dies(tmp_path, dask_processes):
    from dask.distributed import Client

    root = make_class(tmp_path / "course")
    killed = []

    def kill_a_busy_worker():
        with Client(dask_processes, timeout=60) as client:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not killed:
                busy = [worker for worker, keys in client.processing().items() if keys]
                if busy and any((root / "autograded").glob(f"*/{ASSIGNMENT}")):
                    pids = client.run(os.getpid, workers=busy[:1])
                    os.kill(next(iter(pids.values())), signal.SIGKILL)
                    killed.append(busy[0])
                time.sleep(0.2)

    killer = threading.Thread(target=kill_a_busy_worker)
    killer.start()
    outcomes = grade_class(root, {ASSIGNMENT: None}, scheduler=dask_processes, progress=False)
    killer.join()
    assert killed, "the test never caught a worker grading"
    assert sorted(o.student for o in outcomes if o.status == "graded") == sorted(STUDENTS), (
        "the task of the killed worker should have run again on the other worker")
    recorded, maxima = scores(default_db_url(root))
    assert recorded == declared_scores(maxima)
    for student in STUDENTS:   # make grade writes each graded student's feedback page, in the worker
        assert list((root / "feedback" / student / ASSIGNMENT).glob("*.html")), f"no feedback for {student}"


def postgres_binaries() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture
def postgres():
    """A throw-away PostgreSQL server on 127.0.0.1 and a Unix socket; yields (url, port, socket)."""
    binaries = postgres_binaries()
    if binaries is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is missing: apt-get install postgresql (.ci/run does)")
        pytest.skip("PostgreSQL is missing: apt-get install postgresql")
    folder = Path(tempfile.mkdtemp(prefix="course-gradebook-"))
    # PostgreSQL refuses to run as root: a root grader runs it as the postgres user.
    as_owner = []
    if os.geteuid() == 0:
        folder.chmod(0o755)
        shutil.chown(folder, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()

    def run(*command):
        subprocess.run([*as_owner, *command], check=True, capture_output=True, timeout=120)

    try:
        run(str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "start", "-o",
            f"-h 127.0.0.1 -p {port} -k {folder} -c fsync=off")
        run(str(binaries / "createdb"), "-h", str(folder), "-p", str(port), "-U", "postgres", "gradebook")
        yield (f"postgresql+psycopg://postgres@/gradebook?host={folder}&port={port}", port,
               folder / f".s.PGSQL.{port}")
    finally:
        subprocess.run([*as_owner, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def signal_masks(pid: int) -> str:
    """The blocked, ignored and caught signals of a process (its /proc status lines), or why not."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as error:
        return str(error)
    masks = [line.replace("\t", "") for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
    return " ".join(masks)


def test_a_postgres_gradebook_survives_an_interrupted_coordinator(tmp_path, postgres):
    url, port, socket_path = postgres
    caller = CALLS_THE_GRADEBOOK.format(port=port, socket_path=socket_path)
    root = make_class(tmp_path / "course", {"calls_the_gradebook": caller}, db_url=url)
    def command(workers: int) -> list[str]:
        return [sys.executable, "-m", "course_tools.jobs.grade_class", ASSIGNMENT, "--root", str(root),
                "--workers", str(workers), "--db", url]

    first = subprocess.Popen(command(2), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    markers = root / ".grading" / ASSIGNMENT
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any(markers.glob("*.json")):
        time.sleep(0.2)
    graded_at_interrupt = sorted(path.stem for path in markers.glob("*.json"))
    signals = signal_masks(first.pid)
    os.killpg(first.pid, signal.SIGINT)
    output, _ = first.communicate(timeout=300)  # a guard against a hang, not a measure of speed
    graded_first = {path.stem for path in markers.glob("*.json")}
    assert graded_first and "calls_the_gradebook" not in graded_first, (
        f"interrupt it in its middle (graded when interrupted: {graded_at_interrupt}; the coordinator's "
        f"signal masks then: {signals}):\n{output}")

    # What is left (at most three submissions) needs one worker: a second would only start, at the
    # cost of another torch import and kernel template.
    second = subprocess.run(command(1), capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    regraded = {line.split(":")[0].split()[1] for line in second.stdout.splitlines()
                if line.startswith(ASSIGNMENT) and " / " in line}
    assert regraded.isdisjoint(graded_first), "a submission graded before the interruption was graded again"
    assert f"{len(graded_first)} unchanged since the last run" in second.stdout

    recorded, maxima = scores(url)
    assert {student: recorded[student] for student in STUDENTS} == declared_scores(maxima)
    caller_scores = recorded["calls_the_gradebook"]
    assert caller_scores["ex5_1_test"] == 0
    assert sum(caller_scores.values()) == sum(maxima.values()) - maxima["ex5_1_test"]
    autograded = (root / "autograded" / "calls_the_gradebook" / ASSIGNMENT / "memory.ipynb").read_text()
    assert "reached the gradebook: False" in autograded
    # make grade ends with the class report of the whole class, from the gradebook it graded into.
    assert f"class report: {root / 'reports' / (ASSIGNMENT + '.html')}" in second.stdout
    report = json.loads((root / "reports" / f"{ASSIGNMENT}.json").read_text())
    assert report["students"] == len(recorded)


def test_a_grading_failure_names_its_cause(tmp_path, monkeypatch):
    """nbgrader only says "Please see the above traceback"; the teacher must read the cause."""
    import course_tools.jobs.grade_class as autograde

    root = make_class(tmp_path / "course")
    load_config = autograde.load_config

    def without_the_kernel(folder):
        config = load_config(folder)
        config.GuardedExecute.kernel_name = "no-such-kernel"
        return config

    monkeypatch.setattr(autograde, "load_config", without_the_kernel)
    db_url = default_db_url(root)
    autograde._prepare(root, db_url, [(ASSIGNMENT, "reference")])
    outcome = autograde.grade_one(str(root), ASSIGNMENT, "reference", db_url)
    assert outcome["status"] == "failed"
    assert "NoSuchKernel" in outcome["message"] and "no-such-kernel" in outcome["message"], outcome
    assert "above traceback" not in outcome["message"]


def test_the_cause_is_the_first_exception_in_the_captured_log():
    from course_tools.jobs.grade_class import failure_cause

    log = ("[INFO] Converting notebook\n[ERROR] There was an error processing assignment\n"
           "[ERROR] Traceback (most recent call last):\n  File \"x.py\", line 1, in run\n    start()\n"
           "ModuleNotFoundError: No module named 'helpers'\n\nThe above exception was the direct cause of "
           "the following exception:\n\nTraceback (most recent call last):\n  File \"y.py\", line 2\n"
           "RuntimeError: the grading guard failed to start\n")
    result = {"success": False, "log": log,
              "error": "Traceback (most recent call last):\n"
                       "NbGraderException: Please see the above traceback"}
    assert failure_cause(result) == ("RuntimeError: the grading guard failed to start "
                                     "(caused by ModuleNotFoundError: No module named 'helpers')")
    assert failure_cause({"success": False, "error": "boom"}) == "boom"


def test_ctrl_c_stops_the_coordinator_however_it_was_started():
    """A process inherits ignored and blocked signals, and Python then never raises KeyboardInterrupt;
    the coordinator takes Ctrl-C back before it grades anything."""
    program = ("from course_tools.jobs.grade_class import stop_on_interrupt; stop_on_interrupt(); "
               "import time; print('ready', flush=True); time.sleep(120)")

    def deaf_to_ctrl_c():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    process = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=deaf_to_ctrl_c)
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGINT)
    _, errors = process.communicate(timeout=60)
    assert process.returncode != 0 and "KeyboardInterrupt" in errors, errors
