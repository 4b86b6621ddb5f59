# about: Correct: prints the running mean as a tensor every log_every steps (one host read per print), reads it once more at the end.
# base: solution
# %% ex4_1_solution
def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    device = next(model.parameters()).device
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                        pin_memory=(device.type == "cuda"))
    running = torch.zeros((), device=device)
    n = 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss.detach()
        n += 1
        if n % log_every == 0:
            print("step", n, "running mean", running / n)
    return running.item() / n
