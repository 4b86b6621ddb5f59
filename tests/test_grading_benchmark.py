"""The grading benchmark's arithmetic (the benchmark itself runs for minutes: make grading-benchmark)."""

import pytest

from course_tools.measure.grading_benchmark import projection, report


def test_projection_scales_the_per_submission_time_by_workers():
    table = projection(per_submission=9.0).splitlines()
    # 300 students x 4 lessons x 9 s = 3 h of one worker: 1.5 h on 2, 11 min on 16, 3 min on 64.
    assert table[2] == "| 300 | 1.5 h | 11 min | 3 min |"
    assert table[3] == "| 1,000 | 5.0 h | 38 min | 9 min |"


def test_report_states_each_way_against_the_floor():
    text = report("04_memory", 10, 2, floor_times=[5.0] * 10, stock_s=60.0, serial_s=70.0, parallel_s=35.0)
    assert "| stock nbgrader, serial | 6.0 | 1.20x | 10.0 |" in text
    assert "| the course's grader, serial | 7.0 | 1.40x |" in text
    assert "| the course's grader, 2 workers | 3.5 | 0.70x | 17.1 |" in text
    assert "Parallel against stock serial: 1.71x" in text


@pytest.mark.parametrize("argv", [["--submissions", "0"], ["--workers", "0"]])
def test_nonsense_sizes_are_refused(argv):
    from course_tools.measure.grading_benchmark import main

    with pytest.raises(SystemExit):
        main(argv)
