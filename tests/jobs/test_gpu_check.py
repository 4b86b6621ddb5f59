"""`make gpu-check` without a GPU: it says so, runs the worked notebooks on the CPU and reports the
figures they recorded (helpers.report.record). No speed is asserted: the self-test's numbers only
prove that the notebooks' code paths run and that their figures reach the report."""

import json
import os
import re
import subprocess
import sys

from course_tools.lessons import REPO_ROOT, assignment_ids
from course_tools.measure import gpu_check, gpu_report

SCRIPT = REPO_ROOT / "course_tools" / "measure" / "gpu_check.sh"
# The quickest notebook on a CPU: the self-test in CI runs it alone (make gpu-check runs them all).
QUICKEST = "04_memory"


def test_without_a_gpu_the_check_runs_the_notebook_and_reports_its_figures(tmp_path):
    # Through the script `make gpu-check` runs, with this interpreter (which has everything the check
    # needs, so no environment is created) and with any GPU hidden.
    env = {**os.environ, "GPU_PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("COURSE_FIGURES", None)
    out = tmp_path / "report"
    completed = subprocess.run(["bash", str(SCRIPT), "--out", str(out), "--lessons", QUICKEST],
                               cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert gpu_check.NO_GPU_LINE in completed.stdout.splitlines(), completed.stdout

    markdown = (out / "report.md").read_text()
    report = json.loads((out / "report.json").read_text())
    assert report["mode"] == "cpu-self-test" and report["machine"]["device"] == "cpu"
    assert "CPU self-test" in markdown and "No CUDA GPU was found" in markdown
    section = report["lessons"][QUICKEST]
    assert section["nbval"]["returncode"] == 0 and section["nbval"]["totals"]["failed"] == 0, section["nbval"]
    assert section["figures"] and not section["problems"], section
    numbers = [figure["value"] for figure in section["figures"] if isinstance(figure["value"], float)]
    assert numbers and all(value >= 0 for value in numbers), section["figures"]
    for figure in section["figures"]:
        assert f"| {figure['name']} |" in markdown, f"{figure['name']!r} is missing from report.md"


def test_every_lesson_of_source_is_checked_by_default():
    assert gpu_check.parse_args([]).lessons == assignment_ids(REPO_ROOT)
    assert gpu_check.parse_args(["--lessons", QUICKEST]).lessons == [QUICKEST]


def test_a_lesson_without_figures_is_reported_not_skipped(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">'
        '<testcase classname="notebooks.01_mixed_precision.mixed_precision.ipynb" name="Cell 0" />'
        '<testcase classname="notebooks.01_mixed_precision.mixed_precision.ipynb" name="Cell 7">'
        '<failure message="Cell outputs differ">expected True, got False</failure></testcase>'
        '<testcase classname="notebooks.01_mixed_precision.mixed_precision.ipynb" name="Cell 2">'
        '<skipped /></testcase>'
        '<testcase classname="notebooks.01_mixed_precision.mixed_precision.ipynb" name="Cell 3">'
        '<error message="kernel died" /></testcase>'
        "</testsuite></testsuites>")
    parsed = gpu_report.parse_junit(junit)
    assert parsed["totals"] == {"tests": 4, "passed": 1, "failed": 1, "errors": 1, "skipped": 1}
    assert [(f["cell"], f["outcome"], f["message"]) for f in parsed["failures"]] == [
        ("Cell 7", "failed", "Cell outputs differ"), ("Cell 3", "errors", "kernel died")]

    figures = tmp_path / "figures.jsonl"
    figures.write_text('{"name": "bf16 step", "value": 12.5, "unit": "ms"}\nnot json\n')
    recorded, problems = gpu_report.read_figures(figures)
    assert recorded == [{"name": "bf16 step", "value": 12.5, "unit": "ms"}]
    assert len(problems) == 1 and "line 2" in problems[0]

    nbval = {"command": "python -m pytest notebooks/x", "returncode": 1, "duration_s": 60.0,
             "summary": "1 failed, 1 passed", "log": "x.nbval.log", **parsed}
    report = {"mode": "gpu", "written": "now",
              "machine": {"device": "a GPU", "capability": "9.0", "gpu_memory_bytes": 2**37,
                          "torch": "2.13.0", "cuda": "12.8", "python": "3.12.0", "platform": "Linux",
                          "cpu_count": 16},
              "lessons": {"01_mixed_precision": {"nbval": nbval, "figures": recorded, "problems": problems},
                          "05_new_lesson": {"nbval": {**nbval, "returncode": 0, "failures": []},
                                            "figures": [], "problems": []}}}
    markdown = gpu_report.render_markdown(report)
    assert "**FAILED**" in markdown and "Cell outputs differ" in markdown and "kernel died" in markdown
    assert "| bf16 step | 12.5 ms |" in markdown
    new_lesson = re.split(r"^## ", markdown, flags=re.M)[-1]
    assert new_lesson.startswith("05_new_lesson") and "No figures" in new_lesson
    assert "no figures from 05_new_lesson" in markdown and "1 of 2 lessons passed" in markdown


def test_requirements_come_from_the_requirements_files_and_leave_torch_out():
    completed = subprocess.run(["bash", str(SCRIPT), "--print-requirements"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=30, check=True)
    lines = completed.stdout.split()
    names = {re.split(r"[<>=!~;\s]", line, maxsplit=1)[0].lower() for line in lines}
    assert {"nbval", "pytest", "nbformat", "nbclient", "ipykernel", "matplotlib", "tqdm", "numpy"} <= names
    assert "torch" not in names and "pytest-xdist" not in names
    pinned = {line for name in ("requirements.txt", "requirements-test.txt")
              for line in (REPO_ROOT / name).read_text().splitlines()
              if line.startswith(("nbval", "pytest>", "numpy"))}
    assert len(pinned) == 3 and pinned <= set(lines), "the GPU check should use the files' bounds"
