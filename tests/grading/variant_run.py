"""Run demo students' notebooks in this process, hidden tests included, under variant secrets:
`python tests/grading/variant_run.py <lesson> <secret,...> <student> [...] [--one-secret-each
<student> [...]]` prints {secret: {student: {test grade id: null (passed) or the failure}}} as
JSON (tests/grading/test_variants.py): the students before the flag under every secret, those
after it under one each, the secrets taken in turn.

Each student runs the source notebook with their cells in a fresh namespace: the setup cell, every
cell the grader would run (the release's `skip-when-grading` demonstrations left out) and the test
cells whole, hidden part included, of the exercises whose cells the student wrote (every test cell
for the worked solution; the other exercises hold the worked answer, which that run covers). The
variant is drawn as at grading, under the secret and the student's id.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

os.environ["NBGRADER_EXECUTION"] = "autograde"   # the lessons' small sizes, as at grading

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import nbformat  # noqa: E402
from IPython.core.inputtransformer2 import TransformerManager  # noqa: E402

from course_tools.cells import grade_id, is_solution, is_test  # noqa: E402
from course_tools.grading.demonstrations import SKIP_TAG  # noqa: E402
from course_tools.jobs.demo_class import DEMO_ROOT, load_demo_class, student_code  # noqa: E402
from course_tools.lessons import REPO_ROOT  # noqa: E402
from helpers.checks import variants  # noqa: E402


def _exercise(name: str | None) -> str:
    return (name or "").split("_", 1)[0]


def run_student(source, submission, secret: str) -> dict[str, str | None]:
    namespace = {"__name__": "__main__"}
    results = {}
    transform = TransformerManager().transform_cell
    written = {_exercise(name) for name in submission.cells}
    with variants.grading_student(secret or None, submission.student):
        for cell in source.cells:
            if cell.cell_type != "code" or SKIP_TAG in cell.metadata.get("tags", []):
                continue
            name = grade_id(cell)
            if is_test(cell) and written and _exercise(name) not in written:
                continue
            code = cell.source
            if is_solution(cell):
                code = submission.cells.get(name, student_code(cell.source))
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    exec(compile(transform(code), f"<{name or 'cell'}>", "exec"), namespace)
                failure = None
            except Exception as error:  # noqa: BLE001 - a failed test, or the student's error
                failure = f"{type(error).__name__}: {str(error)[:300]}"
            if is_test(cell):
                results[name] = failure
    return results


def main(lesson: str, secrets: str, every_secret: list[str], one_secret_each: list[str]) -> None:
    """The students of `every_secret` under every secret, those of `one_secret_each` under one, the
    secrets taken in turn (the class as a whole still meets every secret)."""
    [path] = (REPO_ROOT / "source" / lesson).glob("*.ipynb")
    source = nbformat.read(path, as_version=4)
    demo_root = Path(os.environ.get("VARIANT_DEMO_ROOT") or DEMO_ROOT)   # a test's own demo students
    submissions = {s.student: s for s in load_demo_class(lesson, demo_root)}
    names = secrets.split(",")
    runs = {secret: every_secret + [name for number, name in enumerate(one_secret_each)
                                    if number % len(names) == position]
            for position, secret in enumerate(names)}
    print(json.dumps({secret: {name: run_student(source, submissions[name], secret) for name in chosen}
                      for secret, chosen in runs.items()}))


if __name__ == "__main__":
    arguments = sys.argv[3:]
    flag = arguments.index("--one-secret-each") if "--one-secret-each" in arguments else len(arguments)
    main(sys.argv[1], sys.argv[2], arguments[:flag], arguments[flag + 1:])
