# about: Hands in a link to the worked solution in source/ instead of a notebook: graded as the blank release, with a note.
# base: release
# loses: ex1_1_test ex2_1_test ex3_1_test ex4_1_test
# says: write your solution here
# note: it is a link, not the notebook itself
# file: mixed_precision.ipynb -> link source/01_mixed_precision/mixed_precision.ipynb
