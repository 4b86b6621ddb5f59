# about: An attack: exercise 1 trains nothing and starts a thread that, while the test runs, keeps copying the newest parameters of any same-shaped model into the student's model and overwriting dicts that look like references.
# kind: hostile
# base: solution
# loses: ex1_1_test
# says: backward ran 0 times for 8 micro-batches
# %% ex1_1_solution
import gc
import threading
import time

import torch

_targets = []


def _meddle():
    while True:
        time.sleep(0.002)
        try:
            for model in list(_targets):
                shapes = [p.shape for p in model.parameters()]
                for obj in gc.get_objects():
                    if isinstance(obj, dict) and ("expected" in obj or "reference" in obj):
                        obj.update(expected=None, reference=None)
                    elif isinstance(obj, torch.nn.Module) and obj is not model and \
                            [p.shape for p in obj.parameters()] == shapes:
                        with torch.no_grad():
                            for mine, theirs in zip(model.parameters(), obj.parameters()):
                                mine.copy_(theirs)
        except Exception:
            pass


threading.Thread(target=_meddle, daemon=True).start()


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    _targets[:] = [model]
    time.sleep(0.05)
    return [0.0] * (len(micro_batches) // accum_steps)
