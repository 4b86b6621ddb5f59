"""nbgrader configuration of the course. tests/grading/test_config.py checks that every option below
takes effect."""

from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearOutput,
    DeduplicateIds,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    OverwriteKernelspec,
    SaveAutoGrades,
)

from course_tools.grading.active_content import NeutraliseActiveContent
from course_tools.grading.cell_order import OverwriteCells, RestoreCellOrder
from course_tools.grading.execute import GuardedExecute
from course_tools.grading.feedback import ConciseErrors, RedactHiddenTests, keep_only_feedback_pages
from course_tools.grading.feedback_page import FeedbackPageExporter
from course_tools.grading.graded_folder import clean_graded_folder
from course_tools.grading.intake import IntakeNotes, SubmissionIntake
from course_tools.grading.nbgrader_setenv import mend_nbgrader_setenv
from course_tools.lessons import CELL_TIMEOUT_S, COURSE_ID

c = get_config()  # noqa: F821 - provided by traitlets when it executes this file

# A Validate whose kernel died left NBGRADER_EXECUTION=validate in the student's JupyterLab server,
# and so in every kernel it started afterwards: nbgrader's switch now puts the environment back
# (course_tools/grading/nbgrader_setenv.py).
mend_nbgrader_setenv()

c.CourseDirectory.course_id = COURSE_ID
c.CourseDirectory.root = str(Path(__file__).resolve().parent)
# Worked, executed solutions are committed as notebooks/ (nbval runs over them).
c.CourseDirectory.solution_directory = "notebooks"
# Keep caches, checkpoints, profiler traces and data out of release/ and submissions.
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints",
    "*.pyc",
    "__pycache__",
    "feedback",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.pt.trace.json",
    "*.json.gz",
    "profiles",
    "data",
]

# The stub a student sees in place of each solution says what to do when it is run.
c.ClearSolutions.code_stub = {
    "python": (
        "# YOUR CODE HERE\n"
        'raise NotImplementedError("write your solution here, then run the test cell below")'
    )
}

# Training cells take seconds on a laptop CPU; nbgrader's default of 30 s per cell is too short.
c.Execute.timeout = CELL_TIMEOUT_S
# Students' kernelspecs differ ("Python 3 (ipykernel)", conda envs); grade with the course's own.
c.Execute.kernel_name = "python3"
# Validate throws its kernel away when the notebook has run: killing it at once spares the student
# a second while Python and torch tear themselves down (grading does the same, GuardedExecute).
c.Execute.shutdown_kernel = "immediate"

# nbgrader gives a test cell zero points when it writes anything to stderr, so a harmless
# UserWarning from the student's code, or a progress bar, would cost the exercise. A test fails
# only by raising; drop stderr from the graded outputs.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"[\s\S]"

# A student who deleted a read-only test cell still gets it back, and graded.
c.OverwriteCells.add_missing_cells = True

# Feedback shows each failure message but neither the hidden tests' code nor tracebacks echoing it,
# nor an output that prints it (RedactHiddenTests also keeps a student's marker text from failing
# ClearHiddenTests); and the feedback folder holds the notebooks' pages only, never what the
# student or their code left beside them (course_tools/grading/feedback.py). Nothing of the student's runs
# in the page: NeutraliseActiveContent comes last, because RedactHiddenTests rewrites output lines
# and a student who prints a marker chooses which (course_tools/grading/active_content.py).
c.GenerateFeedback.preprocessors = [
    GetGrades,
    CSSHTMLHeaderPreprocessor,
    RedactHiddenTests,
    ClearHiddenTests,
    ConciseErrors,
    NeutraliseActiveContent,
]
c.GenerateFeedback.pre_convert_hook = clean_graded_folder
# nbconvert validates the whole notebook against its schema after every preprocessor, a dozen times
# a submission in autograde (0.15 s of the grader's CPU); once, after the last, still stops a step
# that broke the notebook.
c.Exporter.optimistic_validation = True
# The same pages as nbconvert's HTMLExporter writes, in half the time: without its second parse of
# each whole page (course_tools/grading/feedback_page.py).
c.GenerateFeedback.exporter_class = FeedbackPageExporter
c.GenerateFeedback.post_convert_hook = keep_only_feedback_pages

# Before nbgrader copies or reads a submission: links and special files removed, extra files
# beyond a quota removed, an unreadable notebook graded as the blank release, all of it noted in
# the student's feedback (course_tools/grading/intake.py). After grading: links and special files the
# student's code left in its folder removed.
c.Autograde.pre_convert_hook = SubmissionIntake(extra_files_quota_mb=200, notebook_limit_mb=50,
                                                notebook_file_limit_mb=500, folder_depth_limit=20,
                                                extra_entries_limit=1000)
c.Autograde.post_convert_hook = clean_graded_folder

# Before running a submission: the intake's notes and one cell per grade id (a pasted test cell
# would make OverwriteCells fail the notebook), nbgrader's clean-up, then the release's cell order
# and any deleted read-only cell (the setup cell, say) restored, so that each test runs after the
# code it tests.
c.Autograde.sanitize_preprocessors = [
    IntakeNotes,
    ClearOutput,
    DeduplicateIds,
    OverwriteKernelspec,
    OverwriteCells,
    RestoreCellOrder,
    CheckCellMetadata,
]

# Grade every submission to completion, whatever its code does: GuardedExecute survives dying
# kernels and output floods, sandboxes each kernel (bubblewrap) where the machine allows, and
# undoes patching of checks, torch and builtins before each test (course_tools/grading/execute.py).
# The autograded notebook, which the formgrader shows the teacher on their own Jupyter origin,
# is written with nothing in it that runs (course_tools/grading/active_content.py).
c.Autograde.autograde_preprocessors = [
    GuardedExecute,
    NeutraliseActiveContent,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]

# Hidden tests draw their inputs per student from a secret the grader holds (helpers/checks/variants.py):
# set COURSE_VARIANT_SECRET in the grader's environment, or name a file outside the course here.
# Without either they use the inputs written in source/ (docs/after-grading.md).
# c.GuardedExecute.variant_secret_file = "~/.config/efficient-pytorch/variant-secret"
# (never under /etc, /usr, /opt or the Python environment: every graded kernel sees those read-only,
# and grading refuses a secret there)

# The formgrader renders each autograded notebook with this exporter when the teacher opens it: a
# notebook autograded before NeutraliseActiveContent existed is made inert there too. (nbconvert's
# own HTMLExporter.sanitize_html would escape tables and images into text.)
c.HTMLExporter.preprocessors = [NeutraliseActiveContent]
