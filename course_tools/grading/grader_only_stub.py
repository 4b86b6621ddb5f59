"""Stands in, inside the grading sandbox, for every module of helpers/checks/ (the judges).

Such a module computes the exercises' references: at grading its checks run in the grader's
process (course_tools.grading.verdict), so the student's kernel gets this stub in its place and cannot
call a reference as its answer. Importing the module still works; using it says why it is empty.
"""

GRADER_ONLY = True


def __getattr__(name: str):
    raise AttributeError(f"{__name__}.{name} is not available while the notebook is graded: its checks "
                         "run in the grader's process, and its references are not the student's to call")
