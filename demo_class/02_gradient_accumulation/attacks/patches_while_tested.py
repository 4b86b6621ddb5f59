# about: Exercise 1 trains nothing and, when the test calls it, disables the check that follows: the check runs in the grader's process, out of its reach, and fails on what the loop really did.
# base: solution
# loses: ex1_1_test
# says: backward ran 0 times for 8 micro-batches
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    import helpers.checks.accumulation

    helpers.checks.accumulation.check_updates = lambda *args, **kwargs: None
    return []
