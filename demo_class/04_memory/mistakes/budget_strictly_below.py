# about: Plans as asked, but tests measure(m, c) < budget_bytes, strictly: a micro-batch whose peak is exactly the budget is rejected, although it fits.
# base: solution
# loses: ex4_1_test
# says: is exactly the budget of
# %% ex4_1_solution
def plan_micro_batches(effective_batch, budget_bytes, measure):
    """{"micro_batch", "accum_steps", "checkpointing"}: the largest micro-batch whose peak fits."""
    for micro_batch in range(effective_batch, 0, -1):
        if effective_batch % micro_batch:
            continue
        for checkpointing in (False, True):
            if measure(micro_batch, checkpointing) < budget_bytes:
                return {"micro_batch": micro_batch, "accum_steps": effective_batch // micro_batch,
                        "checkpointing": checkpointing}
    raise ValueError(f"no micro-batch of {effective_batch} fits in {budget_bytes} bytes")
