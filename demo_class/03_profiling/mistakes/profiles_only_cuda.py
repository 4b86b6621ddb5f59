# about: Profiles with activities=[ProfilerActivity.CUDA] alone, having read that GPU time needs the CUDA activity: the profiler records no CPU time for the phases' labels (and on a machine without CUDA it does not even start).
# base: solution
# loses: ex2_1_test
# says: not the CPU: profile with activities=[ProfilerActivity.CPU]
# %% ex2_1_solution
def find_bottleneck(phases, steps=4):
    with profile(activities=[ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=1, active=steps - 1, repeat=1)) as prof:
        for _ in range(steps):
            for name, phase in phases.items():
                with record_function(name):
                    phase()
            prof.step()
    totals = {e.key: e.cpu_time_total for e in prof.key_averages() if e.key in phases}
    grand_total = sum(totals.values())
    return max(totals, key=totals.get), {k: v / grand_total for k, v in totals.items()}
