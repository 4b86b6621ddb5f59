"""make export: nbgrader's gradebook as Canvas's and Moodle's import files, late penalties shown."""

import csv
from datetime import datetime, timedelta

import pytest
from nbgrader.api import Gradebook

from course_tools.jobs import export_grades
from course_tools.jobs.export_grades import ExportError, read_mapping, write_exports
from course_tools.jobs.nbgrader_course import put_environment_on_path

DUE = datetime(2026, 12, 1, 12, 0)


@pytest.fixture
def gradebook(tmp_path):
    """Two assignments (3 and 2 points); ana hands in both, bo the first one late (a 1-point penalty),
    cy nothing."""
    put_environment_on_path()       # nbgrader runs alembic to check the gradebook's schema
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as book:
        for name, points in (("01_mixed_precision", 3.0), ("02_gradient_accumulation", 2.0)):
            book.update_or_create_assignment(name, duedate=DUE)
            book.add_notebook("lesson", name)
            book.add_grade_cell("ex1_test", "lesson", name, max_score=points, cell_type="code")
        for student in ("ana", "bo", "cy"):
            book.add_student(student)
        handed_in = {("ana", "01_mixed_precision"): (2.5, 0.0, DUE),
                     ("ana", "02_gradient_accumulation"): (2.0, 0.0, DUE),
                     ("bo", "01_mixed_precision"): (3.0, 1.0, DUE + timedelta(days=1))}
        for (student, assignment), (score, penalty, when) in handed_in.items():
            submission = book.add_submission(assignment, student, timestamp=when)
            [notebook] = submission.notebooks
            notebook.late_submission_penalty = penalty
            [grade] = notebook.grades
            grade.auto_score = score
        book.db.commit()
        yield book


def write_mapping(path, rows):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=export_grades.MAPPING_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
    return path


MAPPING = [
    {"nbgrader_id": "ana", "name": "Ana Lima", "email": "ana@example.org", "canvas_id": "101",
     "sis_user_id": "S1", "sis_login_id": "ana", "section": "A", "moodle_id_number": "M1"},
    {"nbgrader_id": "bo", "name": "Bo Chen", "email": "bo@example.org", "canvas_id": "102",
     "sis_user_id": "S2", "sis_login_id": "bo", "section": "A", "moodle_id_number": "M2"},
    {"nbgrader_id": "cy", "name": "", "email": "", "canvas_id": "103", "sis_user_id": "S3",
     "sis_login_id": "cy", "section": "B", "moodle_id_number": "M3"},
]


def exported(gradebook, tmp_path, rows=MAPPING):
    return write_exports(gradebook, read_mapping(write_mapping(tmp_path / "map.csv", rows)), tmp_path / "out")


def rows_of(path):
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


def test_canvas_gets_its_columns_points_possible_and_the_penalised_scores(gradebook, tmp_path):
    paths = exported(gradebook, tmp_path)
    header, points, *students = rows_of(paths["canvas"])
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01_mixed_precision",
                      "02_gradient_accumulation"]
    assert points == ["Points Possible", "", "", "", "", "3", "2"]
    assert students == [["Ana Lima", "101", "S1", "ana", "A", "2.5", "2"],
                        ["Bo Chen", "102", "S2", "bo", "A", "2", "0"],      # 3 less the late penalty of 1
                        ["cy", "103", "S3", "cy", "B", "0", "0"]]            # nothing handed in: 0


def test_moodle_gets_an_identifier_column_and_one_column_per_grade_item(gradebook, tmp_path):
    paths = exported(gradebook, tmp_path)
    header, *students = rows_of(paths["moodle"])
    assert header == ["ID number", "Email address", "Full name", "01_mixed_precision",
                      "02_gradient_accumulation"]
    assert students[1] == ["M2", "bo@example.org", "Bo Chen", "2", "0"]


def test_nbgrader_csv_and_the_late_penalties_say_which_scores_were_reduced(gradebook, tmp_path):
    paths = exported(gradebook, tmp_path)
    with paths["nbgrader"].open(newline="") as handle:
        nbgrader_rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(handle)}
    late = nbgrader_rows["bo", "01_mixed_precision"]
    assert (late["raw_score"], late["late_submission_penalty"], late["score"]) == ("3.0", "1.0", "2.0")
    assert rows_of(paths["late_penalties"]) == [
        ["student", "assignment", "raw_score", "late_submission_penalty", "score"],
        ["bo", "01_mixed_precision", "3", "1", "2"]]


def test_a_student_missing_from_the_mapping_stops_the_export_and_is_named(gradebook, tmp_path):
    missing = "2 students of the gradebook have no row in the mapping file: bo, cy"
    with pytest.raises(ExportError, match=missing):
        exported(gradebook, tmp_path, MAPPING[:1])
    assert not (tmp_path / "out").exists(), "nothing may be exported when a student is missing"


@pytest.mark.parametrize(("content", "says"), [
    ("name,email\nAna,a@x\n", "no nbgrader_id column"),
    ("nbgrader_id,canvas\nana,1\n", "columns the export does not know: canvas"),
    ("nbgrader_id\nana\nana\n", "ana appears twice"),
    ("nbgrader_id\n\n ,\n", "a row without an nbgrader_id"),
])
def test_a_bad_mapping_file_is_refused_with_the_reason(tmp_path, content, says):
    path = tmp_path / "map.csv"
    path.write_text(content)
    with pytest.raises(ExportError, match=says):
        read_mapping(path)
    with pytest.raises(ExportError, match="no mapping file at"):
        read_mapping(tmp_path / "absent.csv")
