# about: Exercise 1 trains nothing and, when the test calls it, disables the check that follows: the test does not count.
# kind: hostile
# base: solution
# loses: ex1_1_test
# says: the test does not count
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    import helpers.checks_accumulation

    helpers.checks_accumulation.check_updates = lambda *args, **kwargs: None
    return []
