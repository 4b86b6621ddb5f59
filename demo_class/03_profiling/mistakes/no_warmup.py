# about: Starts timing at once: the first, cold call of each step is in the measurement.
# base: solution
# loses: ex1_1_test
# says: warm up both steps
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
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
    return {"ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}
