# about: A correct solution written differently: B before A in odd rounds, events from the table, a list of losses on the device.
# base: solution
# loses:
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    for _ in range(warmup):
        step_b()
        step_a()
    ratios = []
    for round_index in range(repeats):
        order = [("a", step_a), ("b", step_b)] if round_index % 2 == 0 else [("b", step_b), ("a", step_a)]
        took = {}
        for key, step in order:
            sync()
            begin = clock()
            step()
            sync()
            took[key] = clock() - begin
        ratios.append(took["b"] / took["a"])
    ratios.sort()
    middle = len(ratios) // 2
    median = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
    return {"ratio": median, "low": ratios[0], "high": ratios[-1]}


# %% ex2_1_solution
def find_bottleneck(phases, steps=4):
    plan = torch.profiler.schedule(wait=0, warmup=1, active=steps - 1, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=plan) as p:
        for _ in range(steps):
            for label in phases:
                with torch.profiler.record_function(label):
                    phases[label]()
            p.step()
    table = {event.key: event.cpu_time_total for event in p.key_averages()}
    totals = {label: table.get(label, 0.0) for label in phases}
    winner = sorted(totals.items(), key=lambda item: item[1])[-1][0]
    return winner, {label: value / sum(totals.values()) for label, value in totals.items()}


# %% ex3_1_solution
def phase_shares(trace_path, phases):
    with open(trace_path) as handle:
        trace = json.load(handle)
    labels = [e for e in trace["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") in phases]

    def inside(event, other):
        same_thread = (other.get("pid"), other.get("tid")) == (event.get("pid"), event.get("tid"))
        return (other is not event and same_thread and other["ts"] <= event["ts"]
                and event["ts"] + event["dur"] <= other["ts"] + other["dur"])

    outermost = [e for e in labels if not any(inside(e, other) for other in labels)]
    totals = {phase: sum(e["dur"] for e in outermost if e["name"] == phase) for phase in phases}
    whole = sum(totals.values())
    if whole <= 0:
        raise ValueError("none of the phases is in the trace")
    return {phase: value / whole for phase, value in totals.items()}


# %% ex4_1_solution
def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    where = next(model.parameters()).device
    loader = DataLoader(dataset, batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=where.type == "cuda", prefetch_factor=4 if num_workers else None)
    losses = []
    for step, (x, y) in enumerate(loader, start=1):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x.to(where, non_blocking=True)), y.to(where, non_blocking=True))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if step % log_every == 0:
            print("running loss", torch.stack(losses).mean().item())
    return torch.stack(losses).mean().item()


# %% ex5_1_solution
QUICK_CHECK = "a"
