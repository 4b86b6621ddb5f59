# about: Answers exercise 1 by calling the check's own reference.
# base: solution
# needs: sandbox
# loses: ex1_1_test
# says: is not available while the notebook is graded
# validate-misses: ex1_1_test in the student's own Jupyter the references are importable; the grading sandbox replaces them
# %% ex1_1_solution
from helpers.checks import precision as checks_precision


def cast_fate(values, dtype):
    return checks_precision.cast_fate_reference(values, dtype)
