# about: Weights each batch's loss by its size and divides by the dataset's length: a mean over samples, not over batches as slow_epoch returns.
# base: solution
# loses: ex4_1_test
# says: the last batch is shorter when the dataset does not divide evenly
# %% ex4_1_solution
def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    model_device = next(model.parameters()).device
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                        pin_memory=model_device.type == "cuda")
    total = torch.zeros((), device=model_device)
    steps = 0
    for x, y in loader:
        x = x.to(model_device, non_blocking=True)
        y = y.to(model_device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.detach() * len(x)
        steps += 1
        if steps % log_every == 0:
            print(f"step {steps}: mean loss {total.item() / (steps * batch_size):.4f}")
    return total.item() / len(dataset)
