# about: An attack: exercise 1 trains nothing and starts a thread that, while the test runs, keeps copying the newest parameters of any same-shaped model into the student's model and overwriting dicts that look like references. The thread stops once the next exercise's cell has defined its function, so that only exercise 1 is at stake whatever the timing.
# base: solution
# loses: ex1_1_test
# says: backward ran 0 times for 8 micro-batches
# %% ex1_1_solution
import gc
import threading
import time
import weakref

import torch

_targets = []


def _rewrite(models):
    for model in models:
        shapes = [p.shape for p in model.parameters()]
        for obj in gc.get_objects():
            if isinstance(obj, dict) and ("expected" in obj or "reference" in obj):
                obj.update(expected=None, reference=None)
            elif isinstance(obj, torch.nn.Module) and obj is not model and \
                    [p.shape for p in obj.parameters()] == shapes:
                with torch.no_grad():
                    for mine, theirs in zip(model.parameters(), obj.parameters()):
                        mine.copy_(theirs)


def _meddle():
    # Stop when exercise 2's cell has run, i.e. when exercise 1's test is over: waiting for the
    # handed models to be collected left the thread alive into exercise 4 on a busy machine.
    while "train_accumulated_any_sizes" not in globals():
        time.sleep(0.002)
        alive = [model for model in (ref() for ref in _targets) if model is not None]
        try:
            _rewrite(alive)
        except Exception:
            pass
        del alive


threading.Thread(target=_meddle, daemon=True).start()


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    _targets[:] = [weakref.ref(model)]
    time.sleep(0.05)
    return [0.0] * (len(micro_batches) // accum_steps)
