"""Hidden tests whose inputs differ per student under a course secret (helpers.checks.variants).

The demo classes' correct work passes under three secrets, their realistic mistakes lose what they
declare under one each (the three in turn), a submission tuned to the published hidden inputs
loses, two students draw different inputs, and the secret never reaches the student's kernel or
anything the grader writes. The notebooks run in a subprocess with both halves of each check in
one process (tests/grading/variant_run.py), as they do in a student's own Jupyter.
"""

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from course_tools.grading.execute import GuardedExecute
from course_tools.jobs.demo_class import kind_of, load_demo_class
from course_tools.lessons import REPO_ROOT, assignment_ids
from helpers.checks import variants

LESSONS = assignment_ids(REPO_ROOT)
SECRETS = ("a first course secret", "a second one", "and a third")


def run(lesson: str, secrets, students, one_secret_each=()) -> dict:
    """`students` under every secret, those of `one_secret_each` under one each, in one process."""
    script = REPO_ROOT / "tests" / "grading" / "variant_run.py"
    flag = ["--one-secret-each", *one_secret_each] if one_secret_each else []
    finished = subprocess.run([sys.executable, str(script), lesson, ",".join(secrets), *students, *flag],
                              capture_output=True, text=True, timeout=600,
                              cwd=REPO_ROOT)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return json.loads(finished.stdout.strip().splitlines()[-1])


@functools.cache
def lesson_run(lesson: str) -> tuple[dict, list[str], list[str]]:
    """The two tests below share one process per lesson (torch and the helpers imported once): the
    correct work under every secret, each realistic mistake under one. The results, the correct
    students, the mistaken ones."""
    demo = load_demo_class(lesson)
    correct = [s.student for s in demo if kind_of(s) in ("reference", "alternative") and not s.loses]
    mistakes = [s.student for s in demo if kind_of(s) == "mistake"]
    return run(lesson, SECRETS, correct, one_secret_each=mistakes), correct, mistakes


def failures(by_student: dict) -> dict:
    return {student: {test: why for test, why in tests.items() if why}
            for student, tests in by_student.items()}


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS)
def test_correct_work_passes_under_every_secret(lesson):
    seen, correct, _ = lesson_run(lesson)
    for secret, by_student in seen.items():
        assert set(correct) <= set(by_student), secret
        failed = {student: tests for student, tests in failures(by_student).items()
                  if tests and student in correct}
        assert not failed, f"under the secret {secret!r}: {failed}"


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS)
def test_realistic_mistakes_lose_what_they_declare_under_each_secret(lesson):
    """Each mistake under one secret, the secrets in turn: a variant family that stopped reaching
    a case shows in the mistakes that need it, at a third of the cost of every mistake thrice."""
    seen, _, names = lesson_run(lesson)
    mistakes = {s.student: s for s in load_demo_class(lesson) if s.student in names}
    assert sorted(student for by_student in seen.values() for student in by_student
                  if student in mistakes) == sorted(mistakes)
    for secret, by_student in seen.items():
        for student, failed in failures(by_student).items():
            if student in mistakes:
                assert set(failed) == set(mistakes[student].loses), (secret, student, failed)


TUNED = '''# about: predict_block_forwards looks the published hidden cases up in a table
# base: solution
# loses: ex6_1_test
# says: forward
# %% ex6_1_solution
_PUBLISHED = {(6, None, 3, True): 18, (5, 5, 2, True): 20, (5, 5, 2, False): 10, (7, 10, 3, False): 21,
              (16, 4, 2, False): 56, (13, 4, 1, False): 25, (10, 3, 1, True): 20,
              (8, 3, 3, True): 48, (8, 2, 4, False): 56}


def predict_block_forwards(depth, blocks_per_segment, accum_steps, checkpoint_last):
    return _PUBLISHED.get((depth, blocks_per_segment, accum_steps, checkpoint_last), 0)
'''


@pytest.mark.slow
def test_a_submission_tuned_to_the_published_hidden_inputs_loses_under_a_secret(tmp_path, monkeypatch):
    """The table holds the right answers of the published cases (it passes with no secret), and no
    other: under a secret, the hidden cases differ."""
    demo = tmp_path / "04_memory"
    demo.mkdir()
    (demo / "tuned_to_the_published_cases.py").write_text(TUNED)
    for name in ("reference.py", "untouched.py"):
        (demo / name).write_text((REPO_ROOT / "demo_class" / "04_memory" / name).read_text())
    monkeypatch.setenv("VARIANT_DEMO_ROOT", str(tmp_path))
    results = run("04_memory", ("", *SECRETS), ["tuned_to_the_published_cases"])
    assert failures(results[""]) == {"tuned_to_the_published_cases": {}}
    for secret in SECRETS:
        assert "ex6_1_test" in failures(results[secret])["tuned_to_the_published_cases"], secret


def test_two_students_draw_different_inputs_and_no_secret_gives_the_defaults():
    def draws(secret, student):
        with variants.grading_student(secret, student):
            variant = variants.draw("ex1")
            return variant.seed(7), variant.order(range(8)), variants.draw("ex2").seed(7)

    assert draws(None, "ana") == draws("", "bo") == (7, list(range(8)), 7)
    assert draws("s3cret", "ana") == draws("s3cret", "ana")
    assert draws("s3cret", "ana") != draws("s3cret", "bo")
    assert draws("s3cret", "ana") != draws("another", "ana")
    assert variants.draw("ex1").fixed, "outside grading the draws are the defaults again"


SETUP = "from helpers.transport import remote\nfrom helpers.collect.memory import collect_saved_bytes"
STUDENT = ("import os, sys\n"
           "def answer(a, b):\n"
           "    print(sorted(os.environ), sys.argv)\n"
           "    return a * b\n"
           "print(dict(os.environ))")
TEST = ('outcome = remote.run_student(answer, collect_saved_bytes, 3, 4)\n'
        'assert outcome["value"] == 12\n'
        '### BEGIN HIDDEN TESTS\n'
        'from helpers.checks import variants\n'
        'a = variants.draw("ex1").pick(5, 6, 7, 8, 9, 10, 11)\n'
        'hidden = remote.run_student(answer, collect_saved_bytes, a, 7)\n'
        'assert hidden["value"] == 7 * a, "the hidden check"\n'
        'print("hidden inputs", "fixed" if variants.draw("ex1").fixed else "drawn")\n'
        '### END HIDDEN TESTS\n')


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_the_secret_reaches_neither_the_kernel_nor_the_graded_notebook(tmp_path, monkeypatch, sandbox):
    import course_tools.grading.execute as execute

    secret = "the-course-secret-4f2a"
    monkeypatch.setenv(variants.SECRET_ENVIRONMENT, secret)
    monkeypatch.setattr(execute, "_secret_from_environment", [])

    def graded(grade_id, source, **flags):
        cell = new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "schema_version": 3, "solution": False,
                                     "locked": True, "grade": False, **flags}
        return cell

    notebook = new_notebook(cells=[graded("setup", SETUP), new_code_cell(STUDENT),
                                   graded("ex1_test", TEST, grade=True, points=1)])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = GuardedExecute(tests_in_grader=True, sandbox=sandbox, kernel_name="python3")
    executed, _ = executor.preprocess(notebook, {"metadata": {"path": str(tmp_path)},
                                                 "nbgrader": {"assignment": "a1", "student": "ana"}})
    written = json.dumps(executed)
    assert "hidden inputs drawn" in written and "AssertionError" not in written
    assert secret not in written and variants.SECRET_ENVIRONMENT not in written


def test_a_secret_file_the_sandbox_shows_is_refused_and_one_outside_is_read(tmp_path):
    """Every graded kernel sees /etc, /usr, /opt and the Python environment read-only: a secret there
    could be printed by a student's code and a classmate's hidden inputs recomputed from it."""
    from course_tools.grading.execute import SECRET_SUGGESTION, variant_secret

    inside = Path(sys.prefix) / "variant-secret-that-is-not-there"
    with pytest.raises(ValueError, match=f"lies under .*sandbox shows read-only.*{SECRET_SUGGESTION}"):
        variant_secret(str(inside))
    with pytest.raises(ValueError, match="lies under /etc"):
        variant_secret("/etc/course/variant-secret")
    outside = tmp_path / "variant-secret"
    outside.write_text("a course secret\n")
    assert variant_secret(str(outside)) == "a course secret"
