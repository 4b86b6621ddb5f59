"""Test cells judged in the grader's process (course_tools.grading.verdict): the kernel runs only
students' code."""

import base64
import json

from nbformat.v4 import new_code_cell, new_notebook

from course_tools.grading.execute import GuardedExecute
from course_tools.grading.outcomes import DIED, TIMED_OUT


def graded(grade_id, source, **flags):
    cell = new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "schema_version": 3, "solution": False,
                                 "locked": True, "grade": False, **flags}
    return cell


SETUP = ("from helpers.transport import remote\n"
         "from helpers.collect.memory import collect_saved_bytes\nFACTOR = 2")
TEST = ('outcome = remote.run_student(answer, collect_saved_bytes, 3, 4)\n'
        'error = remote.raised_of(outcome)\n'
        'assert error is None, f"answer stopped with {error}"\n'
        'got = outcome["value"]\n'
        'assert got == 12 * FACTOR // 2, f"answer(3, 4) should be 12, got {got}"\n'
        'print("visible checks passed")\n'
        '### BEGIN HIDDEN TESTS\n'
        'hidden = remote.run_student(answer, collect_saved_bytes, 5, 7)["value"]\n'
        'assert hidden == 35, "the secret hidden check"\n'
        '### END HIDDEN TESTS\n')


def judged(tmp_path, *student_cells, **options):
    cells = [graded("setup", SETUP)]
    for number, source in enumerate(student_cells):
        cells.append(new_code_cell(source) if not source.startswith("TEST") else
                     graded(f"ex{number}_test", TEST, grade=True, points=1))
    notebook = new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = GuardedExecute(tests_in_grader=True, sandbox="off", kernel_name="python3",
                              **options)
    resources = {"metadata": {"path": str(tmp_path)}, "nbgrader": {"assignment": "a1"}}
    executed, _ = executor.preprocess(notebook, resources)
    return executed.cells


def errors(cell):
    return [(o.ename, o.evalue) for o in cell.outputs if o.output_type == "error"]


def text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_a_right_answer_passes_and_a_wrong_one_fails_with_the_checks_message(tmp_path):
    cells = judged(tmp_path, "def answer(a, b):\n    print('computing')\n    return a * b", "TEST",
                   "def answer(a, b):\n    return a + b", "TEST")
    assert errors(cells[2]) == [] and text(cells[2]) == "computing\nvisible checks passed\ncomputing\n"
    assert errors(cells[4]) == [("AssertionError", "answer(3, 4) should be 12, got 7")]


def test_the_tests_source_never_reaches_the_kernel(tmp_path):
    spy = ("import json, base64\nseen = []\nkernel = get_ipython().kernel\n"
           "name = next(n for n in kernel.shell_handlers if 'course' in n)\n"
           "original = kernel.shell_handlers[name]\n"
           "def listen(stream, idents, message):\n"
           "    seen.append(json.dumps(message['content'], default=str))\n"
           "    return original(stream, idents, message)\n"
           "kernel.shell_handlers[name] = listen\n"
           "def answer(a, b):\n    return a * b")
    leak = "print(base64.b64encode(json.dumps([seen, In, _ih]).encode()).decode())"
    cells = judged(tmp_path, spy, "TEST", leak)
    assert errors(cells[2]) == []
    leaked = base64.b64decode(text(cells[3])).decode()
    assert json.loads(leaked)[0], "the spy saw the grader's requests"
    for line in ("secret hidden check", "should be 12", "run_student", "12 * FACTOR"):
        assert line not in leaked


def test_a_kernel_that_dies_during_a_call_costs_only_that_test(tmp_path):
    cells = judged(tmp_path, "import os\ndef answer(a, b):\n    os._exit(1)", "TEST",
                   "def answer(a, b):\n    return a * b", "TEST")
    assert DIED in dict(errors(cells[2]))
    assert errors(cells[4]) == []


def test_a_call_that_never_returns_is_interrupted(tmp_path):
    cells = judged(tmp_path, "def answer(a, b):\n    while True:\n        pass", "TEST",
                   "def answer(a, b):\n    return a * b", "TEST", timeout=3)
    assert TIMED_OUT in dict(errors(cells[2]))
    assert errors(cells[4]) == []


def test_a_reply_too_large_to_read_fails_its_test_and_grading_goes_on(tmp_path):
    huge = "import torch\ndef answer(a, b):\n    return torch.zeros(24 * 2**20)"   # 96 MiB of float32
    cells = judged(tmp_path, huge, "TEST", "def answer(a, b):\n    return a * b", "TEST")
    [(name, message)] = errors(cells[2])
    assert name == "AssertionError" and "96 MiB of tensors, more than the 64 MiB a check reads" in message
    assert errors(cells[4]) == []


def test_what_a_test_prints_of_a_students_value_is_capped(tmp_path):
    shout = "def answer(a, b):\n    return 'x' * 900_000"
    test = graded("ex_test", "print(answer(3, 4))", grade=True, points=1)
    notebook = new_notebook(cells=[graded("setup", SETUP), new_code_cell(shout), test])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = GuardedExecute(tests_in_grader=True, sandbox="off", kernel_name="python3",
                              max_output_chars=10_000)
    executed, _ = executor.preprocess(notebook, {"metadata": {"path": str(tmp_path)},
                                                 "nbgrader": {"assignment": "a1"}})
    printed = text(executed.cells[2])
    assert len(printed) < 11_000 and "output cut at 10,000 characters" in printed


def test_the_restored_note_names_what_was_patched_in_a_few_short_names(tmp_path):
    patch = ("from helpers.transport import remote\n"
             "for n in range(20):\n    setattr(remote.Raised, str(n) * 100_000, 1)\n"
             "def answer(a, b):\n    return a * b")
    cells = judged(tmp_path, patch, "TEST")
    note = text(cells[2])
    assert "The grader restored what the notebook's code had replaced" in note
    assert len(note) < 2_000 and "and 12 more" in note
    assert errors(cells[2]) == []


def test_nothing_the_setup_cell_makes_in_a_temporary_folder_outlives_the_notebook(tmp_path):
    """The grader runs the setup cell in its own process too (lessons 03 and 04 make a folder there)."""
    import os
    import tempfile
    from pathlib import Path

    made_here = f"setup-made-{os.getpid()}-"     # by the grader's process, not the kernel's
    setup = SETUP + "\nimport os, tempfile\nSCRATCH = tempfile.mkdtemp(prefix=f'setup-made-{os.getpid()}-')"
    cells = [graded("setup", setup), new_code_cell("def answer(a, b):\n    return a * b"),
             graded("ex_test", TEST, grade=True, points=1)]
    notebook = new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = GuardedExecute(tests_in_grader=True, sandbox="off", kernel_name="python3")
    executed, _ = executor.preprocess(notebook, {"metadata": {"path": str(tmp_path)},
                                                 "nbgrader": {"assignment": "a1"}})
    assert errors(executed.cells[2]) == []
    assert not list(Path(tempfile.gettempdir()).glob(made_here + "*"))
    assert not list(Path(tempfile.gettempdir()).glob(f"course-grader-*/{made_here}*"))


SHARED_BUFFER_REPLY = '''kernel = get_ipython().kernel
name = next(n for n in kernel.shell_handlers if "course" in n)
original = kernel.shell_handlers[name]
tensor = {"t": "tensor", "buffer": 0, "shape": [4 * 2**20], "dtype": "float32", "requires_grad": False}
def forged(stream, idents, message):
    content = message["content"]
    if content["op"] != "call":
        return original(stream, idents, message)
    reply = {"status": "ok", "nonce": content.get("nonce"), "undone": [],
             "result": {"t": "list", "items": [tensor] * 64}}
    kernel.session.send(stream, "course_guard_reply", reply, message, idents, buffers=[bytes(16 * 2**20)])
kernel.shell_handlers[name] = forged
def answer(a, b):
    return a * b'''


def test_a_reply_that_names_one_buffer_many_times_costs_the_grader_its_size_once(tmp_path):
    """64 tensors naming one 16 MiB buffer: a decoder copying per name would hold a gigabyte."""
    import tracemalloc

    tracemalloc.start()
    try:
        cells = judged(tmp_path, SHARED_BUFFER_REPLY, "TEST")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    [(name, message)] = errors(cells[2])
    assert name == "AssertionError" and "two tensors that name the same bytes" in message
    assert peak < 160 * 2**20, f"the grader's process peaked at {peak / 2**20:.0f} MiB of Python objects"


def test_the_mistake_a_check_names_is_recorded_and_a_students_own_record_is_not(tmp_path):
    from course_tools.cells import DIAGNOSIS_KEY, recorded_diagnosis

    named = graded("ex1_test", "from helpers.diagnosis import mistake\n"
                               "raise mistake('sums_instead_of_multiplies', 'answer(3, 4) should be 12')",
                   grade=True, points=1)
    forged = graded("ex2_test", "assert True", grade=True, points=1)
    forged.metadata[DIAGNOSIS_KEY] = "a_name_the_student_wrote"
    plain = graded("ex3_test", "assert False, 'no name'", grade=True, points=1)
    notebook = new_notebook(cells=[graded("setup", SETUP), named, forged, plain])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = GuardedExecute(tests_in_grader=True, sandbox="off", kernel_name="python3")
    executed, _ = executor.preprocess(notebook, {"metadata": {"path": str(tmp_path)},
                                                 "nbgrader": {"assignment": "a1"}})
    assert [recorded_diagnosis(c) for c in executed.cells[1:]] == ["sums_instead_of_multiplies", None, None]
    assert errors(executed.cells[1]) == [("AssertionError", "answer(3, 4) should be 12")]


# -- the verdict alone, against a fake session (course_tools.grading.notebook_session) -------------

class FakeSession:
    """A notebook being graded, without a kernel: records what the verdict asks of it."""

    max_output_chars = 10_000
    interrupt_grace_seconds = 1

    def __init__(self, cells):
        self.cells = cells
        self.failed, self.probed = [], []

    def time_left(self) -> int:
        return 30

    def timeout_message(self) -> str:
        return "stopped at the time limit"

    def append_output(self, cell, index, output):
        cell.outputs.append(output)

    def fail_cell(self, index):
        self.failed.append(index)

    def check_responsive(self, index):
        self.probed.append(index)


class FakeChannel:
    """The guard's answers: the student's notebook holds `values` and the functions `functions`;
    a call gets `call_reply`."""

    def __init__(self, values=None, functions=(), call_reply=None):
        self.values, self.functions, self.call_reply = dict(values or {}), set(functions), call_reply
        self.requests = []

    def ask(self, index, op, timeout, outputs_into=None, buffers=None, **args):
        from helpers.transport import wire

        self.requests.append((op, args.get("names") or args.get("function")))
        if op == "describe":
            found = {name: self.values[name] for name in args["names"] if name in self.values}
            tree, buffers = wire.encode(found)
            kinds = {name: "function" if name in self.functions else "value" for name in args["names"]
                     if name in self.functions or name in self.values}
            return {"status": "ok", "kinds": kinds, "values": tree, "buffers": buffers}
        return self.call_reply


def verdict_of(source, channel, setup="FACTOR = 2"):
    from course_tools.grading.verdict import GraderSideTests

    cells = [graded("setup", setup), graded("ex1_test", source, grade=True, points=1)]
    session = FakeSession(cells)
    tests = GraderSideTests(session, channel)
    try:
        tests.run(cells[1], 1)
    finally:
        tests.close()
    return cells[1], session


def test_the_verdict_judges_the_students_values_against_a_fake_session():
    cell, session = verdict_of("assert answer == 6 * FACTOR, f'answer should be 12, got {answer}'",
                               FakeChannel(values={"answer": 12}))
    assert errors(cell) == [] and session.failed == []
    cell, _ = verdict_of("assert answer == 6 * FACTOR, f'answer should be 12, got {answer}'",
                         FakeChannel(values={"answer": 7}))
    assert errors(cell) == [("AssertionError", "answer should be 12, got 7")]


def test_the_verdict_records_the_mistake_a_check_names():
    from course_tools.cells import DIAGNOSIS_KEY

    test = ("from helpers.diagnosis import mistake\n"
            "if answer != 12:\n    raise mistake('added_instead', f'answer should be 12, got {answer}')")
    cell, _ = verdict_of(test, FakeChannel(values={"answer": 7}))
    assert errors(cell) == [("AssertionError", "answer should be 12, got 7")]
    assert cell.metadata[DIAGNOSIS_KEY] == "added_instead"


def test_an_interrupted_call_times_the_test_out_and_asks_the_session_to_check_the_kernel():
    channel = FakeChannel(functions={"answer"}, call_reply={"status": "ok", "interrupted": True})
    cell, session = verdict_of("assert answer(3, 4) == 12", channel)
    assert errors(cell) == [(TIMED_OUT, "stopped at the time limit")]
    assert session.failed == [1] and session.probed == [1]
    assert channel.requests == [("describe", ["answer"]), ("call", "answer")]


def test_an_unanswered_call_fails_the_tests_integrity_not_the_student():
    cell, session = verdict_of("assert answer(3, 4) == 12", FakeChannel(functions={"answer"}))
    [(name, message)] = errors(cell)
    assert "integrity" in message and "went unanswered" in message and session.failed == []
