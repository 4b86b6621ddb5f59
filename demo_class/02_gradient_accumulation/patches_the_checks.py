# about: Skips exercise 1 and replaces helpers' check_updates with a no-op: the grader restores it.
# kind: hostile
# base: solution
# loses: ex1_1_test
# says: The grader restored what the notebook's code had replaced
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    return []


checks_accumulation.check_updates = lambda *args, **kwargs: None
