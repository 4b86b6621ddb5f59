# about: Answers exercise 1 by calling the check's own reference measurement.
# base: solution
# needs: sandbox
# loses: ex1_1_test
# says: is not available while the notebook is graded
# validate-misses: ex1_1_test in the student's own Jupyter the references are importable; the grading sandbox replaces them
# %% ex1_1_solution
from helpers.checks import memory as checks_memory


def predict_training_bytes(model, optimizer_name):
    return checks_memory.measure_training_bytes(model, optimizer_name)
