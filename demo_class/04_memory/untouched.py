# about: The release notebook handed in as it was given out: zero points, graded without error.
# base: release
# loses: ex1_1_test ex2_1_test ex3_1_test ex4_1_test ex5_1_test ex6_1_test
