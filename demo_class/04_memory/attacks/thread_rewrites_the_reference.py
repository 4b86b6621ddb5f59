# about: An attack: plan_micro_batches returns the whole batch at once, and a thread started with it keeps rewriting every dict and list that looks like a measured budget or an expected plan while the test runs.
# base: solution
# loses: ex4_1_test
# says: over the budget
# %% ex4_1_solution
import gc
import threading
import time

_plan = {}


def _meddle():
    while True:
        time.sleep(0.002)
        try:
            for obj in gc.get_objects():
                if isinstance(obj, dict) and obj is not _plan and \
                        ("budget" in obj or "expected" in obj or "fits" in obj):
                    obj.update({key: _plan.get(key, obj[key]) for key in obj})
        except Exception:
            pass


threading.Thread(target=_meddle, daemon=True).start()


def plan_micro_batches(effective_batch, budget_bytes, measure):
    _plan.update(micro_batch=effective_batch, accum_steps=1, checkpoint=False, budget=10**18, fits=True)
    time.sleep(0.02)
    return {"micro_batch": effective_batch, "accum_steps": 1, "checkpointing": False}
