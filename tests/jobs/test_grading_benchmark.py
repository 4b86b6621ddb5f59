"""The grading benchmark's arithmetic (the benchmark itself runs for minutes: make grading-benchmark)."""

import json

import nbformat
import pytest

from course_tools.grading.execute import KERNEL_START
from course_tools.jobs.grade_class import Outcome, cell_times_path
from course_tools.measure.grading_benchmark import PHASES, breakdown, grade_differences, projection, report


def test_projection_scales_the_per_submission_time_by_workers():
    table = projection(per_submission=9.0).splitlines()
    # 300 students x 4 lessons x 9 s = 3 h of one worker: 1.5 h on 2, 11 min on 16, 3 min on 64.
    assert table[2] == "| 300 | 1.5 h | 11 min | 3 min |"
    assert table[3] == "| 1,000 | 5.0 h | 38 min | 9 min |"


def test_report_states_each_way_against_the_floor():
    phases = dict(zip(PHASES, (1.0, 1.0, 0.5, 0.5, 0.5), strict=True))
    text = report("04_memory", 10, 2, floor_times=[5.0] * 10, stock_s=60.0, serial_s=70.0, parallel_s=35.0,
                  phases=phases, differing={"serial": [], "parallel": ["s003"]})
    assert "| stock nbgrader, serial | 6.0 | 1.20x | 10.0 |" in text
    assert "| the course's grader, serial | 7.0 | 1.40x |" in text
    assert "| the course's grader, 2 workers | 3.5 | 0.70x | 17.1 |" in text
    assert "Parallel against stock serial: 1.71x" in text
    assert f"| {PHASES[0]} | 1.00 | 29% |" in text
    assert "serial: all 10 equal; parallel: 1 of 10 differ (s003)" in text


def test_grade_differences_name_every_student_graded_otherwise_or_not_at_all():
    stock = {"ann": {"ex1": 1.0}, "bo": {"ex1": 0.0}, "cy": {"ex1": 1.0}}
    assert grade_differences(stock, dict(stock)) == []
    assert grade_differences(stock, {"ann": {"ex1": 1.0}, "bo": {"ex1": 1.0}}) == ["bo", "cy"]


def test_breakdown_sorts_each_recorded_second_into_its_phase(tmp_path):
    def cell(source, **grading):
        return nbformat.v4.new_code_cell(source, metadata={"nbgrader": grading} if grading else {})

    release = tmp_path / "release" / "01_x"
    release.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[
        cell("import torch", grade_id="setup", locked=True),
        cell("def f(): ...", grade_id="ex1_solution", solution=True),
        cell("plot()"),
        cell("assert f()", grade_id="ex1_test", grade=True, points=1)]), release / "x.ipynb")
    rows = [(-1, KERNEL_START, 2.0), (0, "setup", 1.5), (1, "ex1_solution", 0.1), (2, "", 0.4),
            (3, "ex1_test", 1.0)]
    for student in ("ann", "bo"):
        path = cell_times_path(tmp_path, "01_x", student)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"cell": c, "grade_id": g, "seconds": t, "outcome": "ok"}) + "\n"
                                for c, g, t in rows))
    outcomes = [Outcome("01_x", student, "graded", seconds=6.0) for student in ("ann", "bo")]
    expected = dict(zip(PHASES, (2.0, 1.5, 0.5, 1.0, 1.0), strict=True))
    assert breakdown(tmp_path, "01_x", outcomes) == pytest.approx(expected)


@pytest.mark.parametrize("argv", [["--submissions", "0"], ["--workers", "0"]])
def test_nonsense_sizes_are_refused(argv):
    from course_tools.measure.grading_benchmark import main

    with pytest.raises(SystemExit):
        main(argv)
