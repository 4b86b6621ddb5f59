# about: Plans right, but tries checkpointing as 0 then 1 (for checkpointing in range(2)) and returns that int: measure accepts it, the plan asks for a bool.
# base: solution
# loses: ex4_1_test
# says: checkpointing should be a bool
# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    for micro_batch in range(effective_batch, 0, -1):
        if effective_batch % micro_batch:
            continue
        for checkpointing in range(2):
            if measure(micro_batch, checkpointing) <= budget_bytes:
                return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
                        "checkpointing": checkpointing}
    raise ValueError(f"no micro-batch of {effective_batch} fits in {budget_bytes} bytes")
