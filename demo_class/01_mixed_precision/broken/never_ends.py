# about: Exercise 2 loops forever: the grader interrupts it at the cell timeout, the rest keeps its points.
# base: solution
# loses: ex2_1_test
# says: still running at the grader's time limit
# %% ex2_1_solution
def autocast_audit(model, x, dtype):
    seen = {}
    while len(seen) < 1:  # waits for an entry that nothing ever adds
        pass
    return seen
