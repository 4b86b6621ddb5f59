# about: Everything right except the quick check: thinks Adam keeps one value per parameter.
# base: solution
# loses: ex5_1_test
# says: Adam keeps two moments per parameter
# %% ex5_1_solution
QUICK_CHECK = "a"
