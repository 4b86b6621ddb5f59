"""Which demonstration cells the grader skips (course_tools.grading.demonstrations)."""

import nbformat
import pytest

from course_tools.grading.demonstrations import SKIP_TAG, global_names, skipped_at_grading

SETUP = "import torch\nfrom torch import nn\nDIM = 4"
SOLUTION = "def predict(model, rows):\n    return rows * sum(p.numel() for p in model.parameters())"
TEST = "assert predict(nn.Linear(2, 2), 3) == 18"


def code(source, *, grade_id=None, locked=False, solution=False, grade=False, tags=()):
    cell = nbformat.v4.new_code_cell(source)
    if grade_id:
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "locked": locked, "solution": solution,
                                     "grade": grade}
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def notebook(*demos, solution=SOLUTION, tagged=True):
    """setup, the demonstrations (tagged), the student's solution, the test."""
    return [code(SETUP, grade_id="setup", locked=True),
            *(code(d, tags=(SKIP_TAG,) if tagged else ()) for d in demos),
            code(solution, grade_id="ex1_solution", solution=True),
            code(TEST, grade_id="ex1_test", grade=True, locked=True)]


def skipped_sources(release, submission):
    return [submission[i].source for i in sorted(skipped_at_grading(submission, release))]


def test_an_unchanged_tagged_demonstration_nothing_reads_is_skipped():
    demos = ("model = nn.Linear(DIM, DIM)\nprint(model(torch.ones(DIM)))", "import math\nprint(math.pi)")
    release = notebook(*demos)
    assert skipped_sources(release, notebook(*demos, tagged=False)) == list(demos)


def test_the_tag_comes_from_the_release_never_from_the_submission():
    demo = "print(torch.ones(DIM))"
    assert skipped_sources(notebook(demo, tagged=False), notebook(demo)) == []


def test_a_demonstration_the_student_edited_runs():
    release = notebook("print(torch.ones(DIM))")
    assert skipped_sources(release, notebook("print(torch.ones(DIM))\nleaked = 1")) == []


def test_a_global_the_student_reads_keeps_its_cells_to_a_fixed_point():
    demos = ("HIDDEN = 2 * DIM", "shared = nn.Linear(DIM, HIDDEN)", "print('unrelated')")
    uses_global = "def predict(model, rows):\n    return rows * shared.weight.numel()"
    release = notebook(*demos)
    assert skipped_sources(release, notebook(*demos, solution=uses_global)) == ["print('unrelated')"]


def test_a_demonstration_that_changes_what_the_student_reads_runs():
    demos = ("shared = nn.Linear(DIM, DIM)", "shared.weight.data.zero_()", "print(DIM)")
    uses_global = "def predict(model, rows):\n    return shared.weight.sum()"
    release = notebook(*demos)
    assert skipped_sources(release, notebook(*demos, solution=uses_global)) == ["print(DIM)"]


def test_a_parameter_named_like_a_demonstration_global_is_not_a_read():
    demos = ("model = nn.Linear(DIM, DIM)", "rows = 3")
    release = notebook(*demos)
    assert skipped_sources(release, notebook(*demos)) == list(demos)


def test_a_name_a_test_reads_keeps_the_cell_that_binds_it():
    demo, release = "predict_rows = 3", notebook("predict_rows = 3")
    release[-1].source = submission_test = "assert predict(nn.Linear(2, 2), predict_rows) == 18"
    submission = notebook(demo)
    submission[-1].source = submission_test
    assert skipped_sources(release, submission) == []


def test_a_student_cell_that_reaches_globals_dynamically_keeps_everything():
    demo = "hidden_helper = 7"
    for reach in ("globals()['hidden_helper']", "eval('hidden_helper')", "%time hidden_helper"):
        student = f"def predict(model, rows):\n    return {reach}"
        assert skipped_sources(notebook(demo), notebook(demo, solution=student)) == [], reach


def test_a_cell_that_does_not_parse_skips_nothing():
    assert skipped_sources(notebook("print(DIM)"), notebook("print(DIM)", solution="def (:")) == []


def test_global_names_follow_scopes():
    cell = "x = 1\ndef f(model):\n    global y\n    y = model(x) + z\n%time f(2)"
    mentioned, bound, definitions, inner = global_names(cell)
    assert {"x", "f", "y", "z", "get_ipython"} <= mentioned and "model" not in mentioned
    assert bound == {"x", "f", "y"} and definitions == {"f"} and inner == {"y", "x", "z"}


def test_a_demonstration_that_calls_the_students_pure_functions_is_skipped():
    demos = ("rows = 3", "print(predict(nn.Linear(DIM, 2), rows))")
    release = notebook(*demos)
    assert skipped_sources(release, notebook(*demos)) == list(demos)


def test_a_demonstration_that_calls_the_students_stateful_functions_runs():
    demos = ("rows = 3", "print(predict(nn.Linear(DIM, 2), rows))")
    stateful = "calls = []\ndef predict(model, rows):\n    calls.append(rows)\n    return len(calls)"
    assert skipped_sources(notebook(*demos), notebook(*demos, solution=stateful)) == []


STATEFUL_WITHOUT_GLOBALS = {
    "a default argument": "def predict(model, rows, calls=[]):\n"
                          "    calls.append(rows)\n    return len(calls)",
    "a default made by a call": "def predict(model, rows, seen=dict()):\n"
                                "    seen[rows] = 1\n    return len(seen)",
    "the function's own attribute": "def predict(model, rows):\n"
                                    "    predict.calls = getattr(predict, 'calls', 0) + 1\n"
                                    "    return predict.calls",
    "an attribute set from the cell": "def predict(model, rows):\n"
                                      "    return rows * predict.scale\npredict.scale = 2",
    "a class attribute": "class Predictor:\n    calls = 0\n    def __call__(self, model, rows):\n"
                         "        type(self).calls += 1\n        return self.calls\n"
                         "def predict(model, rows):\n    return Predictor()(model, rows)",
    "a decorator's closure": "def counted(function):\n    calls = []\n    def wrapper(*args):\n"
                             "        calls.append(1)\n        return len(calls)\n    return wrapper\n"
                             "@counted\ndef predict(model, rows):\n    return rows",
    "a write into a global object": "def predict(model, rows):\n    nn.calls = getattr(nn, 'calls', 0) + 1\n"
                                    "    return nn.calls",
    "setattr on a module": "def predict(model, rows):\n    setattr(torch, 'seen', rows)\n    return rows",
    "a rebound time module": "import types\ntime = types.SimpleNamespace(perf_counter=[].append)\n"
                             "def predict(model, rows, clock=time.perf_counter):\n    return clock(rows)",
}


@pytest.mark.parametrize("how", STATEFUL_WITHOUT_GLOBALS)
def test_a_function_that_keeps_state_without_globals_keeps_the_demonstrations_that_call_it(how):
    """Skipping a demonstration that calls the student's function must never change a grade: a
    function that can remember a call (where no global name shows it) is called as stock would."""
    demos = ("rows = 3", "print(predict(nn.Linear(DIM, 2), rows))")
    submission = notebook(*demos, solution=STATEFUL_WITHOUT_GLOBALS[how])
    assert skipped_sources(notebook(*demos), submission) == [], how


@pytest.mark.parametrize("solution", [
    "def predict(model, rows, scale=2, dtype=torch.float32, shape=(1, -2)):\n    return rows * scale",
    "import math\ndef predict(model, rows, limit=math.inf):\n    def inner(r):\n        return r\n"
    "    return inner(rows)",
    "def predict(model, rows):\n    model.weight.data[0] = 1.0\n    out = {}\n    out['rows'] = rows\n"
    "    return out['rows']",
])
def test_plain_functions_with_literal_defaults_still_let_their_demonstrations_be_skipped(solution):
    demos = ("rows = 3", "print(predict(nn.Linear(DIM, 2), rows))")
    assert skipped_sources(notebook(*demos), notebook(*demos, solution=solution)) == list(demos)


def test_ordinary_uses_of_sys_and_inspect_do_not_count_as_reaching_globals():
    demo = "hidden_helper = 7"
    for harmless in ("import sys\ndef predict(model, rows):\n    print(rows, file=sys.stderr)",
                     "import inspect\ndef predict(model, rows):\n    return inspect.signature(print)"):
        assert skipped_sources(notebook(demo), notebook(demo, solution=harmless)) == [demo], harmless
    for reach in ("import sys\ndef predict(model, rows):\n    return sys.modules['__main__']",
                  "import sys\ndef predict(model, rows):\n    return sys._getframe().f_globals",
                  "from __main__ import hidden_helper",
                  # The same reaches, imported by name: no attribute is read.
                  "from sys import modules\ndef predict(model, rows):\n    return modules['__main__']",
                  "from sys import _getframe as frame\ndef predict(model, rows):\n    return frame(0)",
                  "from inspect import stack\ndef predict(model, rows):\n    return stack()[0][0]",
                  "from inspect import *\ndef predict(model, rows):\n    return stack()[0][0]",
                  "def predict(model, rows):\n    return predict.__globals__['hidden_helper']"):
        assert skipped_sources(notebook(demo), notebook(demo, solution=reach)) == [], reach


def test_builtins_are_not_a_dependency_but_rebinding_one_is():
    demo = "print(len([DIM]))"
    student = "def predict(model, rows):\n    print(len(str(rows)))\n    return rows"
    assert skipped_sources(notebook(demo), notebook(demo, solution=student)) == [demo]
    rebinds = "len = lambda value: 0"
    assert skipped_sources(notebook(rebinds), notebook(rebinds, solution=student)) == []


def test_every_tagged_demonstration_of_every_lesson_is_skipped_for_the_worked_solution():
    """A tag the grader cannot honour costs every submission the demonstration's time. It happens
    when a test reads a name a demonstration binds (a test's inputs are then the demonstration's):
    lesson 03's tests once read its trace and slow_epoch, and all sixteen of its demonstrations ran
    for every student."""
    from course_tools.lessons import REPO_ROOT, assignment_ids

    for lesson in assignment_ids(REPO_ROOT):
        [release_path] = (REPO_ROOT / "release" / lesson).glob("*.ipynb")
        release = nbformat.read(release_path, as_version=4).cells
        solution = nbformat.read(REPO_ROOT / "notebooks" / lesson / release_path.name, as_version=4).cells
        tagged = {i for i, cell in enumerate(solution) if SKIP_TAG in cell.metadata.get("tags", [])}
        kept = tagged - skipped_at_grading(solution, release)
        assert not kept, (f"{lesson}: tagged demonstrations {sorted(kept)} would run while grading; a test "
                          "or an exercise reads a name they bind (course_tools/grading/demonstrations.py)")


def test_torchs_own_stack_and_a_modules_call_do_not_count_as_reaching_globals():
    """`.stack`, `.modules` and `.import_module` are matched by name (inspect.stack, sys.modules);
    torch.stack read from the setup's `torch`, nn.modules, model.modules() and a torch module
    imported by a constant name reach nothing, unless a running cell could have made the setup's
    name, or its attribute, something else."""
    demo = "hidden_helper = 7"
    body = "\ndef predict(model, rows):\n    return "
    for harmless in (body + "torch.stack([rows]).sum() * len([*model.modules()])",
                     body + "rows if nn.modules.Linear else 0",
                     "import importlib" + body + "importlib.import_module('torch.utils.checkpoint')"):
        assert skipped_sources(notebook(demo), notebook(demo, solution=harmless)) == [demo], harmless
    uses = "\ndef predict(model, rows):\n    return torch.stack([rows])"
    for reach in ("import inspect as torch" + uses,
                  "import torch" + uses,  # the same torch, most likely; no parse can be sure
                  "import inspect\ndef predict(model, rows, torch=inspect):\n    return torch.stack()",
                  "import inspect" + body + "[torch.stack() for torch in [inspect]]",
                  "torch.stack = print" + uses,
                  "setattr(torch, 'stack', print)" + uses,
                  "torch.__dict__['stack'] = print" + uses,
                  body + "torch.sys.modules",
                  body + "model.modules",
                  body + "torch.ops.stack",
                  "import importlib" + body + "importlib.import_module('__main__')",
                  "import importlib" + body + "importlib.import_module('torch' if rows else 'sys')"):
        assert skipped_sources(notebook(demo), notebook(demo, solution=reach)) == [], reach
