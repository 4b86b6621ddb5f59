# about: Exercise 2 calls os._exit: the kernel dies in its test, a fresh kernel grades the rest.
# base: solution
# loses: ex2_1_test
# says: the kernel died while running this cell
# %% ex2_1_solution
import os


def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    os._exit(1)  # "quit early when the sizes differ", written as a hard exit
