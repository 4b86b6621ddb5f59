# about: Everything right except the quick check: thinks Adam keeps one value per parameter.
# base: solution
# loses: ex5_1_test
# says: Adam keeps two moments per parameter
# validate-misses: ex5_1_test the answer key of a quick check is hidden: a visible check would give it away
# %% ex5_1_solution
QUICK_CHECK = "a"
