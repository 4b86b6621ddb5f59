# about: interleaves the rounds A-B, B-A, A-B... (counterbalanced order), collects the ratios from a generator, reads the profile in an on_trace_ready callback, totals the trace with a Counter, and counts steps with enumerate
# base: solution

# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    """Median and spread of time(step_b) / time(step_a) over interleaved, synchronised rounds."""
    for _ in range(warmup):
        step_a()
        step_b()

    def timed(step):
        sync()
        started = clock()
        step()
        sync()
        return clock() - started

    def ratios():
        # Alternate which step goes first, so that neither always pays for running first.
        for round_index in range(repeats):
            if round_index % 2 == 0:
                time_a = timed(step_a)
                time_b = timed(step_b)
            else:
                time_b = timed(step_b)
                time_a = timed(step_a)
            yield time_b / time_a

    spread = sorted(ratios())
    return {"ratio": statistics.median(spread), "low": spread[0], "high": spread[-1]}

# %% ex2_1_solution
def find_bottleneck(phases, steps=4):
    """(dominant phase, {phase: share of total time}) from a profile of `steps` training steps."""
    totals = {}

    def keep_totals(finished):
        # Called by the profiler at the end of its one cycle, after the warm-up step.
        for event in finished.key_averages():
            if event.key in phases:
                totals[event.key] = event.cpu_time_total

    plan = schedule(wait=0, warmup=1, active=steps - 1, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=plan, on_trace_ready=keep_totals) as prof:
        for _ in range(steps):
            for name, run in phases.items():
                with record_function(name):
                    run()
            prof.step()
    summed = sum(totals.get(name, 0.0) for name in phases)
    shares = {name: totals.get(name, 0.0) / summed for name in phases}
    return max(shares, key=shares.get), shares

# %% ex3_1_solution
from collections import Counter


def phase_shares(trace_path, phases):
    """{phase: share of the labelled time} from an exported Chrome trace."""
    with open(trace_path, encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]
    wanted = set(phases)
    labels = sorted((e for e in events
                     if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") in wanted),
                    key=lambda e: (str(e.get("pid")), str(e.get("tid")), e["ts"], -e["dur"]))

    def outermost(labels):
        last = None
        for event in labels:
            span = (event.get("pid"), event.get("tid"), event["ts"] + event["dur"])
            if last is not None and last[:2] == span[:2] and span[2] <= last[2]:
                continue
            last = span
            yield event

    durations = Counter()
    for event in outermost(labels):
        durations[event["name"]] += event["dur"]
    if not durations:
        raise ValueError(f"none of the phases {list(phases)} occurs in {trace_path}")
    summed = sum(durations.values())
    return {name: durations[name] / summed for name in phases}

# %% ex4_1_solution
def fast_epoch(model, optimizer, dataset, batch_size=16, num_workers=4, log_every=50):
    """slow_epoch without the data stall and the per-step sync; returns the mean loss (float)."""
    model_device = next(model.parameters()).device
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                        pin_memory=model_device.type == "cuda")
    running = torch.zeros((), device=model_device)
    steps = 0
    for steps, (x, y) in enumerate(loader, start=1):
        x = x.to(model_device, non_blocking=True)
        y = y.to(model_device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        running.add_(loss.detach())
        if steps % log_every == 0:
            print(f"step {steps}: running mean loss {running.item() / steps:.4f}")
    return running.item() / steps

# %% ex5_1_solution
QUICK_CHECK = "a"
