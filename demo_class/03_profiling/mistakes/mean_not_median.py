# about: Everything right, but reports the mean ratio, which one slow round drags.
# base: solution
# loses: ex1_1_test
# says: you took the mean
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    for _ in range(warmup):
        step_a()
        step_b()
    ratios = []
    for _ in range(repeats):
        sync()
        t0 = clock()
        step_a()
        sync()
        t1 = clock()
        step_b()
        sync()
        t2 = clock()
        ratios.append((t2 - t1) / (t1 - t0))
    return {"ratio": sum(ratios) / len(ratios), "low": min(ratios), "high": max(ratios)}
