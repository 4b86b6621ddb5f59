"""nbgrader configuration of the course. tests/test_config.py checks that every option below takes effect."""

from pathlib import Path

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

from course_tools.feedback import ConciseErrors

c = get_config()  # noqa: F821 - provided by traitlets when it executes this file

c.CourseDirectory.course_id = "efficient-pytorch"
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
c.Execute.timeout = 300
# Students' kernelspecs differ ("Python 3 (ipykernel)", conda envs); grade with the course's own.
c.Execute.kernel_name = "python3"

# nbgrader gives a test cell zero points when it writes anything to stderr, so a harmless
# UserWarning from the student's code, or a progress bar, would cost the exercise. A test fails
# only by raising; drop stderr from the graded outputs.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"[\s\S]"

# A student who deleted a read-only test cell still gets it back, and graded.
c.OverwriteCells.add_missing_cells = True

# Feedback shows each failure message but neither the hidden tests' code nor tracebacks echoing it.
c.GenerateFeedback.preprocessors = [
    GetGrades,
    CSSHTMLHeaderPreprocessor,
    ClearHiddenTests,
    ConciseErrors,
]
