"""`make gpu-check` without a GPU: it says so, runs its CPU self-test and writes a report with every
lesson's numbers. No speed is asserted: the self-test's numbers only prove the code paths run."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from course_tools import gpu_check

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "course_tools" / "gpu_check.sh"


def _timings(value):
    """Every number stored under a key ending in _s (seconds), however deeply nested."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("_s") and isinstance(item, (int, float)):
                yield item
            else:
                yield from _timings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _timings(item)


def test_without_a_gpu_the_check_runs_its_self_test_and_writes_the_report(tmp_path):
    # Through the script `make gpu-check` runs, with this interpreter (which has everything the check
    # needs, so no environment is created) and with any GPU hidden.
    env = {**os.environ, "GPU_PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    out = tmp_path / "report"
    completed = subprocess.run(["bash", str(SCRIPT), "--out", str(out)], cwd=REPO_ROOT, env=env,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert gpu_check.NO_GPU_LINE in completed.stdout.splitlines(), completed.stdout

    markdown = (out / "report.md").read_text()
    report = json.loads((out / "report.json").read_text())
    assert report["mode"] == "cpu-self-test" and report["machine"]["device"] == "cpu"
    assert "CPU self-test" in markdown and "No CUDA GPU was found" in markdown
    assert "nbval" in markdown and "Not run" in markdown

    sections = re.split(r"^## ", markdown, flags=re.M)
    for lesson in gpu_check.LESSONS:
        section = next((s for s in sections if s.startswith(lesson)), None)
        assert section is not None, f"the report has no section for {lesson}:\n{markdown}"
        table_rows = [line for line in section.splitlines()
                      if line.startswith("| ") and not line.startswith("| ---")]
        assert any(re.search(r"\|\s*\d+(\.\d+)?\s*\|", row) for row in table_rows), (
            f"the {lesson} section has no number in its tables:\n{section}")
        measured = report["lessons"][lesson]
        assert "error" not in measured, measured.get("error")
        seconds = list(_timings(measured["tables"]))
        assert seconds and all(math.isfinite(s) and s > 0 for s in seconds), (lesson, seconds)


def test_requirements_come_from_requirements_txt_and_leave_torch_out():
    completed = subprocess.run(["bash", str(SCRIPT), "--print-requirements"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=30, check=True)
    lines = completed.stdout.split()
    names = {re.split(r"[<>=!~;\s]", line, maxsplit=1)[0].lower() for line in lines}
    assert {"nbval", "pytest", "nbformat", "nbclient", "ipykernel", "matplotlib", "tqdm", "numpy"} <= names
    assert "torch" not in names and "pytest-xdist" not in names
    pinned = {line for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
              if line.startswith(("nbval", "pytest>", "numpy"))}
    assert pinned <= set(lines), "the GPU check should use requirements.txt's bounds"


def test_nbval_results_are_counted_per_notebook_and_failures_reported(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">'
        '<testcase classname="notebooks.01_mixed_precision.mixed_precision.ipynb" name="Cell 0" />'
        '<testcase classname="notebooks.01_mixed_precision.mixed_precision.ipynb" name="Cell 7">'
        '<failure message="Cell outputs differ">expected True, got False</failure></testcase>'
        '<testcase classname="notebooks.04_memory.memory.ipynb" name="Cell 2"><skipped /></testcase>'
        '<testcase classname="notebooks.04_memory.memory.ipynb" name="Cell 3">'
        '<error message="kernel died" /></testcase>'
        "</testsuite></testsuites>")
    parsed = gpu_check.parse_junit(junit)
    assert parsed["totals"] == {"tests": 4, "passed": 1, "failed": 1, "errors": 1, "skipped": 1}
    assert parsed["notebooks"]["notebooks.04_memory.memory.ipynb"] == {
        "passed": 0, "failed": 0, "errors": 1, "skipped": 1}
    assert [(f["cell"], f["outcome"], f["message"]) for f in parsed["failures"]] == [
        ("Cell 7", "failed", "Cell outputs differ"), ("Cell 3", "errors", "kernel died")]

    report = {"mode": "gpu", "written": "now", "lessons": {},
              "machine": {"device": "a GPU", "capability": "9.0", "gpu_memory_bytes": 2**37, "torch": "2.4.0",
                          "cuda": "12.4", "python": "3.12.0", "platform": "Linux", "cpu_count": 16},
              "nbval": {"command": "python -m pytest notebooks", "returncode": 1, "duration_s": 60.0,
                        "summary": "1 failed, 1 passed", "log": "nbval.log", **parsed}}
    markdown = gpu_check.render_markdown(report)
    assert "**FAILED**" in markdown and "Cell outputs differ" in markdown and "kernel died" in markdown
