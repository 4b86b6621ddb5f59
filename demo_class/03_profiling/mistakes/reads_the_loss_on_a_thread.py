# about: Reads every step's loss with .item() on a worker thread, where the calling thread's host-sync counter once did not look: a sync per step all the same.
# base: solution
# loses: ex4_1_test
# says: keep the running loss on the device
# %% ex4_1_solution
import threading


def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    model_device = next(model.parameters()).device
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                        pin_memory=model_device.type == "cuda")
    losses, steps = [], 0
    for x, y in loader:
        x, y = x.to(model_device), y.to(model_device)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        reader = threading.Thread(target=lambda value=loss.detach(): losses.append(value.item()))
        reader.start()
        reader.join()
        steps += 1
        if steps % log_every == 0:
            print(f"step {steps}: mean loss {sum(losses) / steps:.4f}")
    return sum(losses) / steps
