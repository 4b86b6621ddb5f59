"""The class report's reading of one autograded test cell (course_tools.jobs.class_report); the
report of a whole graded class is tested on the demo classes in tests/grading/test_grading.py."""

import pytest
from nbformat.v4 import new_code_cell, new_output

from course_tools.cells import DIAGNOSIS_KEY, GRADER_OUTCOME_KEY
from course_tools.jobs.class_report import (
    FAILED,
    INTEGRITY,
    NOT_ATTEMPTED,
    NOT_GRADED,
    PASSED,
    STATUSES,
    UNDIAGNOSED,
    CellOutcome,
    ExerciseReport,
    judge_cell,
    report_html,
)


def cell(*errors, diagnosis=None, ran=True, graders=None):
    """A test cell with these error outputs; `graders`: the grader's own error it recorded."""
    made = new_code_cell("check(answer)", execution_count=3 if ran else None)
    made.outputs = [new_output("error", ename=name, evalue=message, traceback=[]) for name, message in errors]
    if diagnosis:
        made.metadata[DIAGNOSIS_KEY] = diagnosis
    if graders:
        made.metadata[GRADER_OUTCOME_KEY] = graders
    return made


@pytest.mark.parametrize(("the_cell", "points", "untouched", "expected"), [
    (cell(), 2.0, False, (PASSED, "")),
    (cell(("AssertionError", "stepped 8 times"), diagnosis="step_every_micro_batch"), 0.0, False,
     (FAILED, "step_every_micro_batch")),
    (cell(("AssertionError", "a check without a name")), 0.0, False, (FAILED, UNDIAGNOSED)),
    (cell(("NameError", "name 'x' is not defined")), 0.0, False, (FAILED, UNDIAGNOSED)),
    (cell(("TamperingDetected", "could not establish"), graders="TamperingDetected"), 0.0, False,
     (FAILED, INTEGRITY)),
    (cell(("NotImplementedError", "write your solution here")), 0.0, True, (NOT_ATTEMPTED, "")),
    (cell(("KernelDied", "the kernel died"), graders="KernelDied"), 0.0, False, (NOT_GRADED, "")),
    (cell(("CellTimeoutError", "the cell ran past 60 s"), graders="CellTimeoutError"), 0.0, True,
     (NOT_GRADED, "")),
    # What a kernel printed under the grader's names, without the grader's record: its own failure.
    (cell(("KernelDied", "the kernel died")), 0.0, False, (FAILED, UNDIAGNOSED)),
    (cell(("CellTimeoutError", "past 60 s"), ("TamperingDetected", "no")), 0.0, False, (FAILED, UNDIAGNOSED)),
    (cell(ran=False), 0.0, False, (NOT_GRADED, "")),
])
def test_each_test_cell_falls_in_one_status_and_group(the_cell, points, untouched, expected):
    status, group, _ = judge_cell(the_cell, points, 2.0, untouched)
    assert (status, group) == expected


def test_a_students_message_is_text_in_the_page_never_markup():
    exercise = ExerciseReport("ex1_1_test", 2.0, [
        CellOutcome("ana", 0.0, 2.0, FAILED, UNDIAGNOSED, "<script>alert(1)</script><img src=x onerror=y>")])
    report = {"assignment": "a1", "students": 1, "lost_only_to_limits": ["<b>bo</b>"],
              "exercises": [{"test": exercise.test, "max_points": 2.0,
                             "counts": {s: exercise.count(s) for s in STATUSES},
                             "points": exercise.points(), "mistakes": exercise.groups()}]}
    page = report_html(report)
    assert "<script" not in page and "<img" not in page and "<b>bo" not in page
    assert "&lt;script&gt;" in page


def test_submissions_graded_without_an_outside_memory_measure_are_named():
    report = {"assignment": "a1", "students": 2, "lost_only_to_limits": [], "exercises": [],
              "memory_not_measured": ["<i>ana</i>"]}
    page = report_html(report)
    assert "Memory not measured from outside" in page and "1 of 2 submissions" in page
    assert "&lt;i&gt;ana&lt;/i&gt;" in page
    assert "Memory not measured" not in report_html({**report, "memory_not_measured": []})
