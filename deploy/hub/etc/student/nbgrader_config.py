"""A student's nbgrader: the course's exchange (setup.sh wrote its place into ../course.json)."""

import json
from pathlib import Path

from course_tools.grading.nbgrader_setenv import mend_nbgrader_setenv
from course_tools.lessons import CELL_TIMEOUT_S

c = get_config()  # noqa: F821 - provided by traitlets when it executes this file

course = json.loads((Path(__file__).resolve().parent.parent / "course.json").read_text())
c.CourseDirectory.course_id = course["course_id"]
c.Exchange.root = course["exchange"]

# Validate runs the notebook as the course's own configuration does (nbgrader_config.py, which a
# student's server on the hub does not read): the course's cell timeout, not nbgrader's 30 s, and
# its kernel killed once the notebook has run.
c.Execute.timeout = CELL_TIMEOUT_S
c.Execute.shutdown_kernel = "immediate"

# A Validate whose kernel died would leave NBGRADER_EXECUTION in this server for every later kernel
# (course_tools/grading/nbgrader_setenv.py).
mend_nbgrader_setenv()
