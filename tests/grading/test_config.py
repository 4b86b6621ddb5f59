"""nbgrader_config.py: every option is spelt right and really takes effect."""

import os
import shutil
from html.parser import HTMLParser

import nbformat
import pytest
from nbconvert.exporters import Exporter, HTMLExporter, NotebookExporter
from nbconvert.preprocessors import Preprocessor
from nbgrader.apps.nbgraderapp import NbGraderApp
from nbgrader.converters import Autograde, GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions, Execute, IgnorePattern, OverwriteCells

from course_tools.grading import cell_order
from course_tools.grading.active_content import NeutraliseActiveContent
from course_tools.grading.execute import GuardedExecute
from course_tools.grading.feedback import REDACTED, ConciseErrors, RedactHiddenTests, keep_only_feedback_pages
from course_tools.grading.graded_folder import clean_graded_folder
from course_tools.grading.intake import IntakeNotes, SubmissionIntake
from course_tools.jobs.nbgrader_course import load_config
from course_tools.lessons import COURSE_ID, REPO_ROOT


def configurable_classes():
    classes = {cls.__name__: cls for cls in NbGraderApp().all_configurable_classes()}
    # The formgrader and generate_feedback add nbconvert's HTMLExporter to nbgrader's classes; the
    # course's GuardedExecute stands in autograde's preprocessors and takes options of its own.
    return {**classes, HTMLExporter.__name__: HTMLExporter, GuardedExecute.__name__: GuardedExecute,
            Exporter.__name__: Exporter}


def test_every_section_and_option_exists():
    """traitlets silently ignores a misspelt class or option name; nbgrader would run without it."""
    config = load_config()
    classes = configurable_classes()
    for section, options in config.items():
        assert section in classes, f"nbgrader_config.py configures {section}, which nbgrader does not have"
        traits = classes[section].class_traits(config=True)
        for option in options:
            assert option in traits, f"{section}.{option} is not a configurable option of {section}"


def test_course_directory():
    coursedir = CourseDirectory(config=load_config())
    assert coursedir.course_id == COURSE_ID
    assert coursedir.root == str(REPO_ROOT)
    assert coursedir.solution_directory == "notebooks"
    for pattern in (".ipynb_checkpoints", "__pycache__", "*.pt", "*.ckpt", "*.pt.trace.json", "profiles"):
        assert pattern in coursedir.ignore, f"{pattern} should be kept out of release/ and submissions"


def test_execution_timeout_and_kernel():
    execute = Execute(config=load_config())
    assert execute.timeout >= 120, "training cells need more than nbgrader's default of 30 s"
    assert execute.kernel_name == "python3"
    assert GuardedExecute(config=load_config()).shutdown_kernel == "immediate"
    assert execute.shutdown_kernel == "immediate", "Validate waits for its kernel to tear torch down"


def test_validate_on_the_hub_runs_as_the_course_configures(tmp_path):
    """A student's server on the hub reads deploy/hub/etc/student/, not the course's configuration:
    its Validate still gets the course's cell timeout and kills its kernel when done."""
    from traitlets.config.loader import PyFileConfigLoader

    (tmp_path / "student").mkdir()
    shutil.copy(REPO_ROOT / "deploy" / "hub" / "etc" / "student" / "nbgrader_config.py", tmp_path / "student")
    (tmp_path / "course.json").write_text('{"course_id": "c", "exchange": "/srv/exchange"}')
    loader = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path / "student"))
    student = Execute(config=loader.load_config())
    course = Execute(config=load_config())
    assert (student.timeout, student.shutdown_kernel) == (course.timeout, course.shutdown_kernel)


def test_deleted_test_cells_come_back():
    assert OverwriteCells(config=load_config()).add_missing_cells is True


def test_stderr_never_costs_points():
    ignore = IgnorePattern(config=load_config())
    assert ignore.enabled
    cell = nbformat.v4.new_code_cell("import warnings; warnings.warn('harmless')")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="UserWarning: harmless\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="checks passed\n")]
    cleaned, _ = ignore.preprocess_cell(cell, {}, 0)
    assert [o.name for o in cleaned.outputs] == ["stdout"]


def test_stub_tells_the_student_what_to_do():
    stub = ClearSolutions(config=load_config()).code_stub["python"]
    assert "raise NotImplementedError(" in stub and "write your solution" in stub


def test_feedback_hides_hidden_tests_and_tracebacks():
    feedback = GenerateFeedback(config=load_config())
    names = [p if isinstance(p, str) else p.__name__ for p in feedback.preprocessors]
    assert ClearHiddenTests.__name__ in names
    assert ConciseErrors.__name__ in names


def test_concise_errors_keeps_only_the_message():
    cell = nbformat.v4.new_code_cell("assert False")
    traceback = ["---", "assert secret_hidden_check()", "AssertionError"]
    cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="step ran 8 times",
                                           traceback=traceback)]
    cleaned, _ = ConciseErrors().preprocess_cell(cell, {}, 0)
    assert cleaned.outputs[0].traceback == ["AssertionError: step ran 8 times"]


def test_feedback_redacts_printed_hidden_tests_before_clearing_them():
    names = [p.__name__ for p in GenerateFeedback(config=load_config()).preprocessors]
    assert names.index(RedactHiddenTests.__name__) < names.index(ClearHiddenTests.__name__)
    grading = {"nbgrader": {"grade": True, "solution": False, "grade_id": "t"}}
    test = nbformat.v4.new_code_cell("check(1)\n### BEGIN HIDDEN TESTS\nassert secret_hidden_check(2)\n"
                                     "### END HIDDEN TESTS", metadata=grading)
    student = nbformat.v4.new_code_cell("print(In)")
    student.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{[test.source]!r}\n")]
    notebook = nbformat.v4.new_notebook(cells=[test, student])
    cleaned, _ = RedactHiddenTests(config=load_config()).preprocess(notebook, {})
    assert cleaned.cells[1].outputs[0].text == REDACTED + "\n"


def test_feedback_folders_hold_only_the_pages(tmp_path):
    feedback = GenerateFeedback(config=load_config())
    assert feedback.pre_convert_hook is clean_graded_folder
    assert feedback.post_convert_hook is keep_only_feedback_pages
    graded, given = tmp_path / "autograded" / "ann" / "a", tmp_path / "feedback" / "ann" / "a"
    graded.mkdir(parents=True)
    given.mkdir(parents=True)
    os.symlink(tmp_path, graded / "course")
    (given / "a.html").write_text("page")
    (given / "left_behind.py").write_text("x = 1")
    feedback.pre_convert_hook(assignment="a", student="*", notebooks=[str(graded / "a.ipynb")])
    feedback.post_convert_hook(assignment="a", student="*", notebooks=[str(graded / "a.ipynb")])
    assert list(graded.iterdir()) == [] and [p.name for p in given.iterdir()] == ["a.html"]


def test_submissions_are_taken_in_before_grading(tmp_path):
    """Links, special files and extra files beyond 200 MB go before nbgrader copies a submission;
    what grading leaves behind goes after it."""
    autograde = Autograde(config=load_config())
    assert isinstance(autograde.pre_convert_hook, SubmissionIntake)
    assert autograde.pre_convert_hook.extra_files_quota == 200 * 1024 * 1024
    assert autograde.post_convert_hook is clean_graded_folder
    folder = tmp_path / "submitted" / "ann" / "a"
    folder.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), folder / "a.ipynb")
    os.symlink(tmp_path, folder / "course")
    os.mkfifo(folder / "pipe")
    autograde.pre_convert_hook(assignment="a", student="*", notebooks=[str(folder / "a.ipynb")])
    assert [p.name for p in folder.iterdir()] == ["a.ipynb"]


def test_autograde_keeps_nbgraders_steps_with_four_replaced_or_added():
    """IntakeNotes comes first, GuardedExecute stands where nbgrader's Execute stood, followed by
    NeutraliseActiveContent, and RestoreCellOrder follows OverwriteCells; every other step of
    nbgrader's own lists is still there, in order."""
    configured, default = Autograde(config=load_config()), Autograde()

    def names(steps):
        return [step.__name__ for step in steps]

    expected_autograde = []
    for name in names(default.autograde_preprocessors):
        expected_autograde += ["GuardedExecute", "NeutraliseActiveContent"] if name == "Execute" else [name]
    assert names(configured.autograde_preprocessors) == expected_autograde
    expected_sanitize = [IntakeNotes.__name__]
    for name in names(default.sanitize_preprocessors):
        expected_sanitize += [name, "RestoreCellOrder"] if name == "OverwriteCells" else [name]
    assert names(configured.sanitize_preprocessors) == expected_sanitize
    # The course's OverwriteCells: nbgrader's, giving a cell it brings back an id at once.
    assert cell_order.OverwriteCells in configured.sanitize_preprocessors


def test_guarded_execute_takes_the_course_execute_options():
    guarded = GuardedExecute(config=load_config())
    assert guarded.timeout == Execute(config=load_config()).timeout
    assert guarded.kernel_name == "python3"
    assert issubclass(GuardedExecute, Execute)
    assert "still running at the grader's time limit" in guarded.error_on_timeout["evalue"]


def test_the_demo_class_grades_under_its_own_timeout():
    from course_tools.jobs.demo_class import DEMO_CELL_TIMEOUT_S
    from course_tools.jobs.nbgrader_course import open_course

    api = open_course(cell_timeout=DEMO_CELL_TIMEOUT_S)
    assert GuardedExecute(config=api.config).timeout == DEMO_CELL_TIMEOUT_S
    assert GuardedExecute(config=open_course().config).timeout == Execute(config=load_config()).timeout


class _EventHandlers(HTMLParser):
    def __init__(self, markup: str):
        super().__init__()
        self.found = []
        # What follows an output in the page: an attribute left open runs on into it.
        self.feed(markup + '</div>\n<div class="output_area">')
        self.close()

    def handle_starttag(self, tag, attrs):
        self.found += [f"{tag} {name}" for name, _ in attrs if name.startswith("on")]


def test_feedback_pages_are_made_inert_after_every_other_step():
    """RedactHiddenTests rewrites whole output lines, and a student who prints a hidden-test marker
    chooses which: a line cut out of cleaned HTML can reopen an attribute, so the cleaning comes last."""
    feedback = GenerateFeedback(config=load_config())
    assert feedback.preprocessors[-1] is NeutraliseActiveContent
    grading = {"nbgrader": {"grade": True, "solution": False, "locked": True, "grade_id": "t", "points": 1,
                            "schema_version": 3}}

    def feedback_of(steps):
        test = nbformat.v4.new_code_cell("check(1)\n### BEGIN HIDDEN TESTS\nassert secret(2)\n"
                                         "### END HIDDEN TESTS", metadata=grading)
        student = nbformat.v4.new_code_cell("display(HTML(page))")
        page = '<img alt="x\n### BEGIN HIDDEN TESTS">\n" src="x" onerror="alert(1)" y="'
        student.outputs = [nbformat.v4.new_output("display_data", data={"text/html": page})]
        notebook = nbformat.v4.new_notebook(cells=[test, student])
        for step in steps:
            notebook, _ = step(config=load_config()).preprocess(notebook, {})
        return notebook.cells[1].outputs[0].data["text/html"]

    configured = [step for step in feedback.preprocessors if step.__name__ not in ("GetGrades",
                                                                                   "CSSHTMLHeaderPreprocessor")]
    assert _EventHandlers(feedback_of(configured)).found == []
    assert _EventHandlers(feedback_of([NeutraliseActiveContent, RedactHiddenTests])).found == ["img onerror"]


def test_the_formgrader_makes_a_notebook_graded_before_inert_as_it_renders_it():
    """The formgrader renders autograded notebooks with HTMLExporter(config=<the course's config>)."""
    cell = nbformat.v4.new_code_cell("show()")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": '<img src="x" onerror="alert(1)">', "application/javascript": "alert(2)"})]
    markdown = nbformat.v4.new_markdown_cell("<script>alert(3)</script>")
    notebook = nbformat.v4.new_notebook(cells=[markdown, cell])
    page, _ = HTMLExporter(config=load_config(), template_name="classic").from_notebook_node(notebook)
    assert "alert(" not in page and "onerror" not in page


def test_nbgraders_environment_switch_is_put_back_however_a_run_ends(monkeypatch):
    """nbgrader 0.9's own switch leaves NBGRADER_EXECUTION set when the run raises and deletes a
    variable that was set before; the course's puts each back as it was."""
    from course_tools.grading.nbgrader_setenv import setenv

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("NBGRADER_VALIDATING", "earlier")
    try:
        with setenv(NBGRADER_EXECUTION="validate", NBGRADER_VALIDATING="1"):
            assert os.environ["NBGRADER_EXECUTION"] == "validate"
            raise RuntimeError("Kernel died")
    except RuntimeError:
        pass
    assert "NBGRADER_EXECUTION" not in os.environ
    assert os.environ["NBGRADER_VALIDATING"] == "earlier"


def test_every_nbgrader_config_mends_the_switch(tmp_path, monkeypatch):
    """The course's configuration and the hub's teacher and student ones (whose servers run Validate
    and the formgrader's autograde in process) each put the course's switch in nbgrader's place."""
    from nbgrader import utils
    from traitlets.config.loader import PyFileConfigLoader

    from course_tools.grading.nbgrader_setenv import setenv

    hub_etc = tmp_path / "etc"
    shutil.copytree(REPO_ROOT / "deploy" / "hub" / "etc", hub_etc)
    (hub_etc / "course.json").write_text(
        '{"course_id": "c", "course_folder": "course", "exchange": "/srv/exchange"}')
    for folder in (REPO_ROOT, hub_etc / "teacher", hub_etc / "student"):
        monkeypatch.setattr(utils, "setenv", None)
        PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
        assert utils.setenv is setenv, f"{folder}/nbgrader_config.py leaves nbgrader's own switch in place"


def test_a_validate_whose_kernel_dies_leaves_the_environment_as_it_was(tmp_path, monkeypatch):
    """The Validate button runs nbgrader's Validator inside the student's JupyterLab server. A kernel
    that dies there must not leave NBGRADER_EXECUTION behind: every kernel that server started
    afterwards would run the student's notebook as if it were being graded."""
    from nbgrader.validator import Validator

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("NBGRADER_VALIDATING", raising=False)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nos._exit(1)")])
    notebook.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "dies.ipynb"
    nbformat.write(notebook, path)
    try:
        Validator(config=load_config()).validate(str(path))
    except Exception:  # noqa: BLE001 - nbgrader raises DeadKernelError; what matters is what it leaves
        pass
    left = {name: os.environ[name] for name in ("NBGRADER_EXECUTION", "NBGRADER_VALIDATING")
            if name in os.environ}
    assert not left, f"Validate left {left} in the server's environment"


class _Unchanged(Preprocessor):
    def preprocess(self, nb, resources):
        return nb, resources


class _Retypes(Preprocessor):
    def preprocess(self, nb, resources):
        nb.cells[0].cell_type = "not a cell type"
        return nb, resources


def test_exporters_validate_the_notebook_once_after_every_step(monkeypatch):
    exporter = NotebookExporter(config=load_config())
    for _ in range(3):
        exporter.register_preprocessor(_Unchanged(enabled=True), enabled=True)
    validations = []
    validate = exporter._validate_preprocessor
    monkeypatch.setattr(exporter, "_validate_preprocessor", lambda *a: validations.append(validate(*a)))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    exporter.from_notebook_node(notebook)
    assert len(validations) == 1
    exporter.register_preprocessor(_Retypes(enabled=True), enabled=True)
    with pytest.raises(nbformat.ValidationError):
        exporter.from_notebook_node(notebook)
