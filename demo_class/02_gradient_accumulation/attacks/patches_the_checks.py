# about: Skips exercise 1 and replaces what the checks rely on: helpers' check_updates (judged in the grader's process, out of its reach) and the spies that record its loop in the kernel, which the grader restores before the test calls its function.
# base: solution
# loses: ex1_1_test
# says: The grader restored what the notebook's code had replaced
# %% ex1_1_solution
import contextlib

from helpers.checks import accumulation as checks_accumulation


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    return []


@contextlib.contextmanager
def records_nothing(**objects):
    yield spies.CallLog()


checks_accumulation.check_updates = lambda *args, **kwargs: None
spies.record = records_nothing
