"""The demo classes' format as `make course` reads it: the representative part it grades."""

import pytest

from course_tools.jobs.demo_class import DEMO_ROOT, KIND_FOLDERS, KINDS, kind_of, load_demo_class
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


@pytest.mark.parametrize("assignment", assignment_ids(REPO_ROOT))
def test_each_demo_student_stands_in_the_folder_of_its_kind(assignment):
    """`ls demo_class/<assignment>` shows each student's kind: reference.py and untouched.py at
    the top, every other student in its kind's folder, and the folder agrees with what it does."""
    folder = DEMO_ROOT / assignment
    assert sorted(path.name for path in folder.glob("*.py")) == ["reference.py", "untouched.py"]
    assert {path.name for path in folder.iterdir() if path.is_dir()} <= set(KIND_FOLDERS)
    for submission in load_demo_class(assignment):
        kind = kind_of(submission)
        if kind == "alternative":
            assert not submission.loses, f"{submission.student} loses points: it is no alternative"
        if kind == "mistake":
            assert submission.loses, f"{submission.student} loses nothing: it is no mistake"


def test_a_kind_line_is_refused_the_folder_says_it(tmp_path):
    (tmp_path / "a1" / "mistakes").mkdir(parents=True)
    path = tmp_path / "a1" / "mistakes" / "late.py"
    path.write_text("# about: x\n# base: solution\n# kind: hostile\n# loses: ex1_1_test\n")
    with pytest.raises(ValueError, match="the folder it stands in"):
        load_demo_class("a1", tmp_path)
    path.write_text("# about: x\n# base: solution\n# loses: ex1_1_test\n")
    (tmp_path / "a1" / "attacks").mkdir()
    (tmp_path / "a1" / "attacks" / "late.py").write_text("# about: y\n# base: solution\n")
    with pytest.raises(ValueError, match="named twice"):
        load_demo_class("a1", tmp_path)
