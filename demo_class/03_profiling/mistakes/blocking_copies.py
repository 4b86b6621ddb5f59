# about: Everything of the fix is right (workers, pin_memory only on CUDA, a detached running total on the device, read every log_every steps) except the copies: each batch moves with a plain .to(device), which from pinned memory still makes the host wait for every copy.
# base: solution
# loses: ex4_1_test
# says: ran without non_blocking=True
# %% ex4_1_solution
def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    """slow_epoch without the data stall and the per-step sync; returns the mean loss (float)."""
    model_device = next(model.parameters()).device
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                        pin_memory=model_device.type == "cuda")
    total = torch.zeros((), device=model_device)
    steps = 0
    for x, y in loader:
        x, y = x.to(model_device), y.to(model_device)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.detach()
        steps += 1
        if steps % log_every == 0:
            print(f"step {steps}: mean loss {total.item() / steps:.4f}")
    return total.item() / steps
