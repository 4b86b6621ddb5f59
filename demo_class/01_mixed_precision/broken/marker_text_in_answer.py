# about: Everything right; a comment in an answer mentions the hidden-test markers, which made nbgrader's feedback fail.
# base: solution
# loses:
# says: Exercise 4: your answer is one of the four letters.
# %% ex4_1_solution
# The tests I cannot see stand between ### BEGIN HIDDEN TESTS and ### END HIDDEN TESTS in the teacher's copy.
QUICK_CHECK = "c"
