"""The demo classes' format as `make course` reads it: the representative part it grades."""

import pytest

from course_tools.jobs.demo_class import KINDS, kind_of, load_demo_class
from course_tools.jobs.grade_demo_class import representative
from course_tools.lessons import REPO_ROOT, assignment_ids


@pytest.mark.parametrize("assignment", assignment_ids(REPO_ROOT))
def test_make_course_grades_one_student_of_each_kind(assignment):
    """`make course` (DEMO=representative) grades one student of every kind the class holds."""
    whole = load_demo_class(assignment)
    chosen = representative(whole)
    assert [kind_of(s) for s in chosen] == [k for k in KINDS if any(kind_of(s) == k for s in whole)]
    assert {"reference", "untouched"} <= {s.student for s in chosen}
    assert representative(list(reversed(whole))) == chosen, "the choice depends on file order"
