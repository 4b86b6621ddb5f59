# about: Adds workers but still logs loss.item() in every step: a host sync per step.
# base: solution
# loses: ex4_1_test
# says: keep the running loss on the device
# %% ex4_1_solution
def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    model_device = next(model.parameters()).device
    losses = []
    for x, y in DataLoader(dataset, batch_size=batch_size, num_workers=num_workers):
        x, y = x.to(model_device), y.to(model_device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)
