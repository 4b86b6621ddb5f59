# about: Reads the clock without synchronising: on a GPU it would time the queueing, not the work.
# base: solution
# loses: ex1_1_test
# says: did not come right after sync()
# %% ex1_1_solution
def compare_speed(step_a, step_b, sync, clock=time.perf_counter, repeats=11, warmup=2):
    for _ in range(warmup):
        step_a()
        step_b()
    ratios = []
    for _ in range(repeats):
        t0 = clock()
        step_a()
        t1 = clock()
        step_b()
        t2 = clock()
        ratios.append((t2 - t1) / (t1 - t0))
    return {"ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}
