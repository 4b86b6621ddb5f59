# about: A correct solution written differently: three shared clock reads per round, prof.start()/stop() with a defaultdict, a Counter over filtered events, a no_grad running total and a step helper.
# base: solution
# loses:
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    for _ in range(warmup):
        for step in (step_a, step_b):
            step()
    ratios = []
    for _ in range(repeats):
        sync()
        t0 = clock()
        step_a()
        sync()
        t1 = clock()          # A's end is B's start: both reads come right after a sync
        step_b()
        sync()
        t2 = clock()
        ratios.append((t2 - t1) / (t1 - t0))
    return dict(ratio=statistics.median(ratios), low=min(ratios), high=max(ratios))


# %% ex2_1_solution
from collections import defaultdict


def find_bottleneck(phases, steps=4):
    prof = profile(activities=[ProfilerActivity.CPU],
                   schedule=schedule(wait=0, warmup=1, active=steps - 1, repeat=1))
    prof.start()
    try:
        for _ in range(steps):
            for name, phase in phases.items():
                with record_function(name):
                    phase()
            prof.step()
    finally:
        prof.stop()
    totals = defaultdict(float)
    for event in prof.key_averages():
        totals[event.key] += event.cpu_time_total
    phase_totals = [totals[name] for name in phases]
    summed = sum(phase_totals)
    shares = {name: value / summed for name, value in zip(phases, phase_totals)}
    return max(shares, key=shares.__getitem__), shares


# %% ex3_1_solution
from collections import Counter


def phase_shares(trace_path, phases):
    wanted = set(phases)

    def is_phase(event):
        return event.get("ph") == "X" and event.get("cat") == "user_annotation" and event.get("name") in wanted

    with Path(trace_path).open() as handle:
        events = json.load(handle)["traceEvents"]
    threads = {}
    for event in filter(is_phase, events):
        threads.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    durations = Counter()
    for labels in threads.values():
        outer_end = None
        for event in sorted(labels, key=lambda e: (e["ts"], -e.get("dur", 0))):
            end = event["ts"] + event.get("dur", 0)
            if outer_end is not None and end <= outer_end:
                continue            # nested in the label counted last: its time is already there
            durations[event["name"]] += event.get("dur", 0)
            outer_end = end
    whole = sum(durations.values())
    if not whole:
        raise ValueError(f"the trace {trace_path} holds none of {sorted(wanted)}")
    return {phase: durations[phase] / whole for phase in phases}


# %% ex4_1_solution
def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    target = next(model.parameters()).device
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=(target.type == "cuda"), persistent_workers=False)

    def train_step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    running = torch.zeros((), device=target)
    for step, (x, y) in enumerate(loader, start=1):
        loss = train_step(x.to(device=target, non_blocking=True), y.to(device=target, non_blocking=True))
        with torch.no_grad():
            running.add_(loss)            # no graph is recorded, so nothing is kept alive
        if step % log_every == 0:
            print(f"step {step}: running mean loss {running.item() / step:.4f}")
    return running.item() / len(loader)


# %% ex5_1_solution
QUICK_CHECK = 'a'  # .item() waits for every queued kernel
