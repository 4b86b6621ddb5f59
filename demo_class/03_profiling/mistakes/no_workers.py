# about: Removes the per-step sync but leaves num_workers at 0: decoding still stalls the loop.
# base: solution
# loses: ex4_1_test
# says: the DataLoader ran with num_workers=0
# %% ex4_1_solution
def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    model_device = next(model.parameters()).device
    total, steps = torch.zeros((), device=model_device), 0
    for x, y in DataLoader(dataset, batch_size=batch_size):
        x, y = x.to(model_device, non_blocking=True), y.to(model_device, non_blocking=True)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.detach()
        steps += 1
    return total.item() / steps
