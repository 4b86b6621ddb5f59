# about: Correct: finds the divisors with numpy and passes numpy integers to measure, converts the plan to int at the end.
# base: solution
# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    import numpy as np
    sizes = np.arange(effective_batch, 0, -1)
    divisors = sizes[effective_batch % sizes == 0]
    for m in divisors:
        for checkpointing in (False, True):
            if measure(m, checkpointing) <= budget_bytes:
                return {"micro_batch": int(m), "accum_steps": int(effective_batch // m),
                        "checkpointing": checkpointing}
    raise ValueError("nothing fits")
