# about: walks the divisors from the largest down and tries each one first without and then with checkpointing, so it takes a big micro-batch with checkpointing where a smaller one fits without it
# base: solution
# loses: ex4_1_test
# says: uses checkpointing, but micro-batch 1 fits without it

# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    """{"micro_batch", "accum_steps", "checkpointing"}: the fastest plan whose activations fit."""
    for micro_batch in range(effective_batch, 0, -1):
        if effective_batch % micro_batch:
            continue
        for checkpointing in (False, True):               # prefer no checkpointing at this size
            if measure(micro_batch, checkpointing) <= budget_bytes:
                return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
                        "checkpointing": checkpointing}
    raise ValueError("nothing fits, not even a micro-batch of 1 with checkpointing")
