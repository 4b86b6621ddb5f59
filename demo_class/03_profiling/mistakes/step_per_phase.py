# about: Calls prof.step() after every phase instead of once per step: the schedule then counts phases as steps, so it warms up on one phase and measures the wrong ones.
# base: solution
# loses: ex2_1_test
# says: call it once per training step
# %% ex2_1_solution
def find_bottleneck(phases, steps=4):
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=steps - 1, repeat=1)) as prof:
        for _ in range(steps):
            for name, phase in phases.items():
                with record_function(name):
                    phase()
                prof.step()
    totals = {name: 0.0 for name in phases}
    for event in prof.key_averages():
        if event.key in totals:
            totals[event.key] += event.cpu_time_total
    grand_total = sum(totals.values())
    return max(totals, key=totals.get), {name: total / grand_total for name, total in totals.items()}
