# about: Ranks the phases by their labels' self time, which leaves out the operators inside them.
# base: solution
# loses: ex2_1_test
# says: not its self time
# %% ex2_1_solution
def find_bottleneck(phases, steps=4):
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=steps - 1, repeat=1)) as prof:
        for _ in range(steps):
            for name, phase in phases.items():
                with record_function(name):
                    phase()
            prof.step()
    times = {e.key: e.self_cpu_time_total for e in prof.key_averages() if e.key in phases}
    total = sum(times.values())
    return max(times, key=times.get), {k: v / total for k, v in times.items()}
