"""GuardedExecute on small notebooks: dying, stuck and flooding kernels, and the restored cell order."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from course_tools.cells import grader_outcome
from course_tools.grading.cell_order import RestoreCellOrder
from course_tools.grading.execute import KERNEL_START, GuardedExecute
from course_tools.grading.outcomes import DIED, OUT_OF_TIME, TIMED_OUT
from course_tools.lessons import REPO_ROOT

REPO_HELPERS = REPO_ROOT / "helpers"


def run(cells, tmp_path, **options):
    notebook = new_notebook(cells=[new_code_cell(source) for source in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = GuardedExecute(tests_in_grader=False, kernel_name="python3", **options)
    executed, _ = executor.preprocess(notebook, {"metadata": {"path": str(tmp_path)}})
    return executed.cells


def errors(cell):
    return [(o.ename, o.evalue) for o in cell.outputs if o.output_type == "error"]


def text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_a_dead_kernel_is_replaced_and_the_cells_above_run_again(tmp_path):
    cells = run(["value = 41", "import os; os._exit(3)", "print(value + 1)"], tmp_path)
    [(name, message)] = errors(cells[1])
    assert name == DIED and "the kernel died while running this cell" in message
    assert text(cells[2]) == "42\n", "the fresh kernel should have re-run the cell that set `value`"


def test_a_kernel_that_ignores_the_interrupt_is_replaced(tmp_path):
    stuck = ("import time\nwhile True:\n    try:\n        time.sleep(60)\n"
             "    except KeyboardInterrupt:\n        pass")
    cells = run(["value = 1", stuck, "print(value)"], tmp_path, timeout=3, interrupt_grace_seconds=3)
    assert any(name == DIED and "kept running after the interrupt" in message
               for name, message in errors(cells[1]))
    assert text(cells[2]) == "1\n"


def test_an_interruptible_loop_only_costs_its_own_cell(tmp_path):
    fake = "class CellTimeoutError(Exception):\n    pass\nraise CellTimeoutError('past the limit, honestly')"
    cells = run(["while True:\n    pass", "print('next')", fake, "print('last')"], tmp_path, timeout=3)
    assert (TIMED_OUT, GuardedExecute().error_on_timeout["evalue"]) in errors(cells[0])
    assert "loop that never ends" in GuardedExecute().error_on_timeout["evalue"]
    assert DIED not in dict(errors(cells[0])), "an interrupted kernel is not a lost kernel"
    assert text(cells[1]) == "next\n"
    # The grader's record, in metadata no kernel writes, says which cell its limit ended.
    assert grader_outcome(cells[0]) == TIMED_OUT
    assert TIMED_OUT in dict(errors(cells[2])) and grader_outcome(cells[2]) is None
    assert text(cells[3]) == "last\n"


def test_an_output_flood_is_cut_while_it_streams(tmp_path):
    cells = run(["for i in range(100_000):\n    print('x' * 50)", "print('after')"], tmp_path,
                max_output_chars=10_000)
    assert len(text(cells[0])) < 10_200 and "output cut at 10,000 characters" in text(cells[0])
    assert text(cells[1]) == "after\n"


def test_a_kernel_that_keeps_dying_leaves_the_rest_unrun(tmp_path):
    cells = run(["import os; os._exit(1)"] * 3 + ["print('never')"], tmp_path, max_kernel_restarts=2)
    assert all(errors(cell)[0][0] == DIED for cell in cells)
    assert "not run" in errors(cells[3])[0][1]


def graded(grade_id, source="pass", cell_type="code", **flags):
    make = nbformat.v4.new_code_cell if cell_type == "code" else nbformat.v4.new_markdown_cell
    cell = make(source)
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "schema_version": 3, "grade": False,
                                 "solution": False, "locked": False, **flags}
    return cell


@pytest.fixture
def release_course(tmp_path):
    release = new_notebook(cells=[graded("setup", "import math", locked=True),
                                  graded("ex1_solution", solution=True),
                                  graded("ex1_test", grade=True, locked=True, points=1),
                                  graded("ex2_solution", solution=True),
                                  graded("ex2_test", grade=True, locked=True, points=1)])
    folder = tmp_path / "release" / "a1"
    folder.mkdir(parents=True)
    nbformat.write(release, folder / "lesson.ipynb")
    return tmp_path


def restore(cells, course):
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(course)
    notebook = new_notebook(cells=cells)
    resources = {"nbgrader": {"assignment": "a1", "notebook": "lesson"}}
    restored, _ = RestoreCellOrder(config=config).preprocess(notebook, resources)
    return [c.metadata.get("nbgrader", {}).get("grade_id", c.source) for c in restored.cells]


def test_moved_cells_go_back_and_own_cells_travel_with_the_cell_above(release_course):
    cells = [graded("setup", locked=True), graded("ex1_test", grade=True, locked=True),
             graded("ex1_solution", solution=True), new_code_cell("my scratch work"),
             graded("ex2_test", grade=True, locked=True), graded("ex2_solution", solution=True)]
    assert restore(cells, release_course) == ["setup", "ex1_solution", "my scratch work", "ex1_test",
                                              "ex2_solution", "ex2_test"]


def test_a_deleted_read_only_cell_comes_back(release_course):
    cells = [graded("ex1_solution", solution=True), graded("ex1_test", grade=True, locked=True),
             graded("ex2_solution", solution=True), graded("ex2_test", grade=True, locked=True)]
    assert restore(cells, release_course)[0] == "setup"


def test_a_cell_that_lost_its_id_gets_one(release_course):
    """OverwriteCells brings a deleted test cell back without the id notebook format 4.5 needs."""
    from traitlets.config import Config

    cells = [graded("setup", locked=True), graded("ex1_solution", solution=True),
             graded("ex1_test", grade=True, locked=True)]
    del cells[2]["id"]
    config = Config()
    config.CourseDirectory.root = str(release_course)
    resources = {"nbgrader": {"assignment": "a1", "notebook": "lesson"}}
    restored, _ = RestoreCellOrder(config=config).preprocess(new_notebook(cells=cells), resources)
    ids = [cell.get("id") for cell in restored.cells]
    assert all(ids) and len(set(ids)) == len(ids), ids
    nbformat.validate(restored)


# -- the guard against hooks into the interpreter ----------------------------------------------------

def guarded_run(cells, tmp_path, **options):
    """Run cells given as (kind, source): kind 'setup', 'student' or a test's grade id."""
    made = []
    for kind, source in cells:
        if kind == "student":
            made.append(new_code_cell(source))
        elif kind == "setup":
            made.append(graded("setup", source, locked=True))
        else:
            made.append(graded(kind, source, grade=True, locked=True, points=1))
    notebook = new_notebook(cells=made)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = GuardedExecute(tests_in_grader=True, sandbox="off", kernel_name="python3", **options)
    executed, _ = executor.preprocess(notebook, {"metadata": {"path": str(tmp_path)}})
    return executed.cells


ATTACKS = {
    "input_transformer": "get_ipython().input_transformers_post.append(\n"
                         "    lambda lines: ['pass\\n'] if any('assert' in l for l in lines) else lines)",
    "ast_transformer": "import ast\n"
                       "class DropAsserts(ast.NodeTransformer):\n"
                       "    def visit_Assert(self, node):\n"
                       "        return ast.Pass()\n"
                       "get_ipython().ast_transformers.append(DropAsserts())",
    "event": "get_ipython().events.register('pre_run_cell', lambda info: globals().update(\n"
             "    {name: 42 for name in list(globals()) if name.startswith('answer_')}))",
    "custom_exception": "get_ipython().set_custom_exc((AssertionError,), lambda *args, **kwargs: None)",
    "trace_function": "import sys\n"
                      "def tracer(frame, event, arg):\n"
                      "    names = [n for n in frame.f_globals if n.startswith('answer_')]\n"
                      "    frame.f_globals.update(dict.fromkeys(names, 42))\n"
                      "    return None\n"
                      "sys.settrace(tracer)",
    "import_hook": "import sys, types, importlib.abc, importlib.util\n"
                   "class Fake(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
                   "    def find_spec(self, name, path, target=None):\n"
                   "        if name == 'statistics':\n"
                   "            return importlib.util.spec_from_loader(name, self)\n"
                   "    def create_module(self, spec):\n"
                   "        return None\n"
                   "    def exec_module(self, module):\n"
                   "        module.mean = lambda values: 42\n"
                   "sys.modules.pop('statistics', None)\n"
                   "sys.meta_path.insert(0, Fake())",
    "replaced_module": "import sys, types\n"
                       "fake = types.ModuleType('math'); fake.isclose = lambda *a, **k: True\n"
                       "sys.modules['math'] = fake",
}


def test_no_interpreter_hook_a_solution_cell_installs_changes_a_test_verdict(tmp_path):
    cells = [("setup", "import math, statistics")]
    for number, (name, attack) in enumerate(ATTACKS.items()):
        cells += [("student", f"answer_{number} = 0\n" + attack),
                  (f"ex{number}_test", f"import math, statistics\n"
                                       f"assert statistics.mean([answer_{number}]) == 42 and "
                                       f"math.isclose(answer_{number}, 42), "
                                       f"'answer_{number} is wrong ({name})'")]
    executed = guarded_run(cells, tmp_path)
    tests = [cell for cell in executed if cell.metadata.get("nbgrader", {}).get("grade")]
    for number, (name, cell) in enumerate(zip(ATTACKS, tests, strict=True)):
        assert ("AssertionError", f"answer_{number} is wrong ({name})") in errors(cell), (
            f"the {name} attack changed the verdict: {cell.outputs}")
    assert "trace or profile function" in text(tests[4]) and "sys.meta_path" in text(tests[5])
    assert "sys.modules['math']" in text(tests[6]), "the feedback names what the grader put back"


def test_hidden_test_code_never_enters_the_input_history(tmp_path):
    executed = guarded_run([("setup", "import math"), ("student", "answer = 42"),
                            ("ex1_test", "assert answer == 42\n# the secret hidden check\n"),
                            ("student", "print(In, _ih, Out)")], tmp_path)
    assert errors(executed[2]) == []
    assert "secret hidden check" not in text(executed[3])


def test_a_test_whose_guard_was_removed_does_not_count(tmp_path):
    executed = guarded_run([("setup", "import math"),
                            ("student", "answer = 0\n"
                                        "get_ipython().kernel.shell_handlers.pop('course_guard_request')"),
                            ("ex1_test", "assert answer == 42")], tmp_path)
    [(name, message)] = errors(executed[2])
    assert name == "TamperingDetected" and "could not establish this test's integrity" in message


def test_audit_hooks_are_refused(tmp_path):
    """An audit hook sees every exec and import: one could patch a check as a test starts."""
    executed = guarded_run([("setup", "import math"),
                            ("student", "import sys\nseen = []\n"
                                        "sys.addaudithook(lambda *event: seen.append(event))\n"
                                        "exec('1')\nprint('events seen:', len(seen))")], tmp_path)
    assert text(executed[1]) == "events seen: 0\n"


def test_endless_cells_share_one_time_budget(tmp_path):
    cells = run(["value = 1"] + ["while True:\n    pass"] * 10 + ["print(value)"], tmp_path,
                timeout=2, submission_timeout=7)
    # Counted, not timed (a busy machine cannot flake it): a 7 s budget at 2 s a cell lets at most
    # four endless cells run into the cell timeout; every later cell is stopped by the budget.
    outcomes = [TIMED_OUT if TIMED_OUT in dict(errors(cell)) else next(iter(dict(errors(cell))), None)
                for cell in cells[1:]]
    assert outcomes[0] == TIMED_OUT and outcomes.count(TIMED_OUT) <= 4, outcomes
    assert set(outcomes[outcomes.count(TIMED_OUT):]) == {OUT_OF_TIME}, outcomes
    [(name, message)] = errors(cells[-1])
    assert name == OUT_OF_TIME and "time budget of 7 s" in message


def test_each_cell_time_and_outcome_is_recorded(tmp_path):
    times = tmp_path / "times.jsonl"
    run(["import time; time.sleep(0.3)", "1 / 0"], tmp_path, cell_times_path=str(times))
    import json

    rows = [json.loads(line) for line in times.read_text().splitlines()]
    assert [(row["cell"], row["outcome"]) for row in rows] == [
        (-1, "ok"), (0, "ok"), (1, "error: ZeroDivisionError")]
    assert rows[0]["grade_id"] == KERNEL_START and rows[0]["seconds"] > 0
    assert rows[1]["seconds"] >= 0.3


# -- what a kernel sends is data: forged messages, scores and floods of every kind --------------------

FORGE = """k = get_ipython().kernel
message = k.session.msg('stream', {{'name': 'stdout', 'text': 'forged'}}, parent=k.get_parent('shell'))
parts = k.session.serialize(message)
{tamper}
k.iopub_socket.send_multipart(parts)
print('sent')"""
TAMPERINGS = {
    "bad signature": "parts[parts.index(b'<IDS|MSG>') + 1] = b'0' * 64",
    "not JSON": "at = parts.index(b'<IDS|MSG>'); parts[at + 5] = b'{not json'\n"
                "parts[at + 1] = k.session.sign(parts[at + 2:at + 6])",
    "replayed": "k.iopub_socket.send_multipart(parts)",
    "missing content field": "at = parts.index(b'<IDS|MSG>'); parts[at + 5] = b'{}'\n"
                             "parts[at + 1] = k.session.sign(parts[at + 2:at + 6])",
    # 80 MiB of JSON, signed: parsed, it would cost the grader several times that.
    "too much JSON": "at = parts.index(b'<IDS|MSG>')\n"
                     "parts[at + 5] = b'{\"name\": \"stdout\", \"text\": \"' + b'x' * 80 * 2**20 + b'\"}'\n"
                     "parts[at + 1] = k.session.sign(parts[at + 2:at + 6])",
    # 59 MiB of empty lists, under the byte cap: parsed, 20 million Python lists, over a GiB.
    "too many values": "at = parts.index(b'<IDS|MSG>')\n"
                       "parts[at + 5] = (b'{\"name\": \"stdout\", \"text\": \"\", \"x\": ['\n"
                       "                 + b'[],' * 20_600_000 + b'[]]}')\n"
                       "parts[at + 1] = k.session.sign(parts[at + 2:at + 6])",
}


def test_values_in_a_message_are_counted_before_it_is_parsed():
    from course_tools.grading.kernel_messages import json_items

    assert json_items(b'{"a": [1, 2, [3, {"b": 4}]]}') == 8
    assert json_items(b'{"text": "[[[,,,{{{ \\" ,,,"}') == 2, "what strings hold is not counted"
    assert json_items(b"[" + b"[]," * 1000 + b"[]]") == 2003


@pytest.mark.parametrize("tampering", TAMPERINGS)
def test_a_message_the_grader_cannot_verify_fails_its_cell_and_grading_goes_on(tmp_path, tampering):
    cells = run(["value = 41", FORGE.format(tamper=TAMPERINGS[tampering]), "print(value + 1)"], tmp_path)
    [(name, message)] = errors(cells[1])
    assert name == "UnverifiedKernelMessage" and "could not verify" in message
    # A replay's first copy is the kernel's own, signed message: only the copy is dropped.
    assert text(cells[1]).count("forged") == (1 if tampering == "replayed" else 0)
    assert text(cells[2]) == "42\n", "the rest of the notebook is graded with the same kernel"


def test_what_the_code_under_test_displays_never_sets_the_score(tmp_path):
    """nbgrader reads a test cell's first execute_result as its score (a string: full marks)."""
    from nbgrader.utils import determine_grade

    student = ("def answer(a, b):\n"
               "    get_ipython().displayhook('full marks please')\n"
               "    get_ipython().displayhook(1.0)\n"
               "    return 41")
    setup = "from helpers.transport import remote\nfrom helpers.collect.memory import collect_saved_bytes"
    test = ("outcome = remote.run_student(answer, collect_saved_bytes, 6, 7)\n"
            "assert outcome['value'] == 42, 'answer() should be 42'")
    executed = guarded_run([("setup", setup), ("student", student), ("ex1_test", test)], tmp_path)
    test_cell = executed[2]
    assert [o.output_type for o in test_cell.outputs].count("execute_result") == 0
    assert ("AssertionError", "answer() should be 42") in errors(test_cell)
    assert determine_grade(test_cell) == (0, 1)


def test_displays_are_capped_per_cell_and_per_notebook(tmp_path):
    display = ("from IPython.display import display, HTML\n"
               "for i in range(60):\n    display(HTML('x' * 25_000))")
    cells = run([display, display, "print('after')"], tmp_path, max_output_chars=200_000,
                max_notebook_output_chars=300_000)
    kept = [sum(len(o.get("data", {}).get("text/html", "")) for o in cell.outputs) for cell in cells[:2]]
    assert kept[0] <= 200_000 and sum(kept) <= 300_000, kept
    assert "output cut at 200,000 characters" in text(cells[0])
    assert text(cells[2]).endswith("after\n")


def test_a_display_update_cannot_grow_past_the_cap(tmp_path):
    updates = ("from IPython.display import display, update_display\n"
               "for i in range(200):\n    display('small', display_id=f'd{i}')\n"
               "for i in range(200):\n    update_display('x' * 100_000, display_id=f'd{i}')")
    cells = run([updates], tmp_path, max_output_chars=200_000)
    kept = sum(len(str(o.get("data", {}).get("text/plain", ""))) for o in cells[0].outputs)
    assert kept <= 200_000 + 200 * 60, kept


def test_an_error_is_never_cut_away(tmp_path):
    cells = run(["print('x' * 300_000)\nraise ValueError('the real failure ' + 'y' * 50_000)"], tmp_path,
                max_output_chars=10_000)
    [(name, message)] = errors(cells[0])
    assert name == "ValueError" and message.startswith("the real failure") and len(message) <= 10_000


def test_a_package_handed_in_beside_the_notebook_does_not_replace_the_courses(tmp_path):
    """The kernel's folder comes first on its import path; the guard imports the course's own."""
    fake = tmp_path / "helpers"
    fake.mkdir()
    (fake / "__init__.py").write_text("FAKE = True\n")
    executed = guarded_run([("setup", "import helpers"),
                            ("ex1_test", "assert not hasattr(helpers, 'FAKE'), 'the fake helpers ran'\n"
                                         f"assert helpers.__file__.startswith({str(REPO_HELPERS)!r})")],
                           tmp_path)
    assert errors(executed[1]) == [], executed[1].outputs


@pytest.mark.parametrize("sandbox", ["auto", "off"])   # a forked kernel; one started as a command
def test_what_a_kernel_writes_to_its_fds_reaches_the_graders_stderr_capped_and_harmless(tmp_path, capfd,
                                                                                         sandbox):
    flood = ("import os\nos.write(1, b'\\x1b]0;retitled\\x07' + b'o' * 3_000_000)\n"
             "os.write(2, b'\\x1b[2J' + b'e' * 3_000_000)\nprint('printed')")
    cells = run([flood, "print('after')"], tmp_path, max_output_chars=10_000, sandbox=sandbox)
    assert text(cells[1]) == "after\n"
    # ipykernel watches fds 1 and 2 unless PYTEST_CURRENT_TEST is set, as it is without the sandbox's
    # clean environment: there the bytes go only to the descriptors the kernel started with.
    assert "output cut at 10,000 characters" in text(cells[0]) or sandbox == "off"
    seen = capfd.readouterr()
    grader_log = seen.out + seen.err
    assert len(grader_log) < 64 * 1024, f"the grader's stdout and stderr got {len(grader_log):,} characters"
    assert "\x1b" not in grader_log and "\x07" not in grader_log


def test_the_relay_keeps_the_first_bytes_and_counts_the_rest():
    import io
    import os

    from course_tools.grading.kernel_output import KernelOutputRelay

    sink = io.StringIO()
    relay = KernelOutputRelay(kept=10, sink=sink)
    os.write(relay.write_fd, b"\x1b[31mred\xc2\x9b and the rest of a long line")
    relay.close_writer()
    relay.join(5)
    assert sink.getvalue().startswith("?[31mred?\n")
    assert "28 more bytes" in sink.getvalue()
