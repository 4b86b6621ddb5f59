# about: An attack: steps after every micro-batch, then rewrites the spies' call log in place so that it shows one step per cycle.
# base: solution
# loses: ex1_1_test
# says: differs from the full-batch gradient of its cycle
# %% ex1_1_solution
import gc

from helpers import spies


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    losses = []
    for x, y in micro_batches:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    for log in [obj for obj in gc.get_objects() if isinstance(obj, spies.CallLog)]:
        steps = [call for call in log.calls if call.name == "step"]
        keep = set(map(id, steps[accum_steps - 1::accum_steps]))
        log.calls[:] = [call for call in log.calls
                        if call.name not in ("step", "zero_grad") or id(call) in keep]
    return [sum(losses[i:i + accum_steps]) / accum_steps for i in range(0, len(losses), accum_steps)]
