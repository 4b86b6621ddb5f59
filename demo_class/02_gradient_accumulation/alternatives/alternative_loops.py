# about: A correct solution written differently (other loop shapes; the deprecated clip_grad_norm, whose FutureWarning the checks show on stdout, so Validate passes too).
# base: solution
# loses:
# %% ex1_1_solution
def train_accumulated(model, optimizer, loss_fn, micro_batches, accum_steps):
    cycles = [micro_batches[i:i + accum_steps] for i in range(0, len(micro_batches), accum_steps)]
    history = []
    optimizer.zero_grad()
    for cycle in cycles:
        summed = torch.zeros(())
        for x, y in cycle:
            loss = loss_fn(model(x), y)
            (loss / len(cycle)).backward()
            summed = summed + loss.detach()
        optimizer.step()
        optimizer.zero_grad()
        history.append(float(summed) / len(cycle))
    return history


# %% ex2_1_solution
def train_accumulated_any_sizes(model, optimizer, loss_fn, micro_batches, accum_steps):
    history = []
    batches = iter(micro_batches)
    while True:
        cycle = [b for _, b in zip(range(accum_steps), batches)]
        if not cycle:
            return history
        for p in model.parameters():
            p.grad = None
        n = sum(x.shape[0] for x, _ in cycle)
        running = 0
        for x, y in cycle:
            part = loss_fn(model(x), y) * x.shape[0] / n
            part.backward()
            running = running + part.detach()
        optimizer.step()
        history.append(float(running))


# %% ex3_1_solution
def accumulate_token_gradients(model, micro_batches, ignore_index=-100):
    counts = [(t != ignore_index).sum() for _, t in micro_batches]
    total_tokens = torch.stack(counts).sum().clamp(min=1)
    mean_loss = torch.zeros(())
    for (inputs, targets) in micro_batches:
        log_probs = torch.log_softmax(model(inputs).float(), dim=-1)
        mask = targets != ignore_index
        picked = log_probs[mask].gather(1, targets[mask].unsqueeze(1)).squeeze(1)
        loss = -picked.sum() / total_tokens
        loss.backward()
        mean_loss += loss.detach()
    return mean_loss.item()


# %% ex4_1_solution
def train_accumulated_amp(model, optimizer, scaler, loss_fn, micro_batches, accum_steps,
                          max_norm, amp_dtype=None):
    kind = next(model.parameters()).device.type
    results = []
    for start in range(0, len(micro_batches), accum_steps):
        cycle = micro_batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        cycle_loss = 0.0
        for x, y in cycle:
            with torch.autocast(device_type=kind, dtype=amp_dtype, enabled=amp_dtype is not None):
                out = model(x)
                loss = loss_fn(out, y) / len(cycle)
            scaler.scale(loss).backward()
            cycle_loss += loss.item()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm(model.parameters(), max_norm=max_norm)   # deprecated: a FutureWarning
        scaler.step(optimizer)
        scaler.update()
        results.append(cycle_loss)
    return results


# %% ex5_1_solution
QUICK_CHECK = " D "
