# about: Pasted a copy of the Exercise 1 test cell below it, as JupyterLab copies it (same grade id): the test runs once and counts.
# base: solution
# loses:
# says: Exercise 1: visible checks passed.
# note: appeared more than once (a pasted copy)
# paste: ex1_1_test after ex1_1_test
