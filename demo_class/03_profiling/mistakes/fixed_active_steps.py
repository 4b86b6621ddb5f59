# about: Hard-codes active=3 in the schedule, right only for the default steps=4.
# base: solution
# loses: ex2_1_test
# says: your schedule measures steps [1, 2, 3] of 0..5
# %% ex2_1_solution
def find_bottleneck(phases, steps=4):
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1)) as prof:
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
    shares = {name: total / grand_total for name, total in totals.items()}
    return max(totals, key=totals.get), shares
