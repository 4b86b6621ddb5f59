# about: Correct, written with record_function as a decorator: each phase is wrapped once, before profiling, into a labelled function; the totals come from a dict built over key_averages() with .get for absent keys.
# base: solution
# loses:
# %% ex2_1_solution
def find_bottleneck(phases, steps=4):
    """(dominant phase, {phase: share of total time}) from a profile of `steps` training steps."""
    labelled = [(name, record_function(name)(phase)) for name, phase in phases.items()]
    plan = schedule(wait=0, warmup=1, active=steps - 1, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=plan) as prof:
        for _ in range(steps):
            for _, run in labelled:
                run()
            prof.step()
    by_key = {event.key: event.cpu_time_total for event in prof.key_averages()}
    totals = {name: by_key.get(name, 0.0) for name in phases}
    whole = sum(totals.values())
    return max(totals, key=totals.get), {name: total / whole for name, total in totals.items()}
