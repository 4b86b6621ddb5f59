# about: Runs each cycle's forward passes on a worker thread, where the main thread's saved-tensor hooks do not reach, then one backward per cycle: the right updates with every micro-batch's graph alive at once.
# base: solution
# loses: ex2_1_test
# says: forward passes at once
# %% ex2_1_solution
import threading


def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycle_losses = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        samples = sum(len(x) for x, _ in cycle)
        optimizer.zero_grad(set_to_none=True)
        built = []
        worker = threading.Thread(target=lambda: built.append(
            sum(loss_fn(model(x), y) * (len(x) / samples) for x, y in cycle)))
        worker.start()
        worker.join()
        built[0].backward()
        optimizer.step()
        cycle_losses.append(built[0].item())
    return cycle_losses
