# about: Everything right except the quick check: thinks four quarter-size steps, one per micro-batch, add up to the full update.
# base: solution
# loses: ex5_1_test
# says: step() runs once per cycle
# validate-misses: ex5_1_test the answer key of a quick check is hidden: a visible check would give it away
# %% ex5_1_solution
QUICK_CHECK = "a"
