# about: An attack that wins (docs/grading-trust.md, "what remains"): the loop reads loss.item() every micro-batch, and the cell first finds the guard's snapshot with gc.get_objects(), writes a host-read counter that counts nothing into it, then installs that counter. The guard puts back what its snapshot holds, so the patch stays, no note names it, and the count of host reads, evidence from the kernel, says one read per update.
# base: solution
# loses:
# %% ex1_1_solution
import contextlib
import gc

from helpers import spies


@contextlib.contextmanager
def _counts_nothing():
    yield spies.SyncLog({})


for _holder in gc.get_objects():
    if type(_holder).__name__ == "Guard" and isinstance(getattr(_holder, "attributes", None), dict):
        _holder.attributes["helpers.spies"]["record_host_syncs"] = _counts_nothing
spies.record_host_syncs = _counts_nothing


def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycle_losses = []
    for index, (x, y) in enumerate(micro_batches):
        if index % accum_steps == 0:
            optimizer.zero_grad(set_to_none=True)
            cycle_loss = 0.0
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        cycle_loss += loss.item()
        if (index + 1) % accum_steps == 0:
            optimizer.step()
            cycle_losses.append(cycle_loss)
    return cycle_losses
