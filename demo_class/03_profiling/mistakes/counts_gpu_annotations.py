# about: Adds every event named like a phase, so a GPU trace counts each label twice.
# base: solution
# loses: ex3_1_test
# says: must not be added
# %% ex3_1_solution
def phase_shares(trace_path, phases):
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    totals = dict.fromkeys(phases, 0.0)
    for event in events:
        if event.get("ph") == "X" and event.get("name") in totals:
            totals[event["name"]] += event["dur"]
    if not sum(totals.values()):
        raise ValueError("no phase in the trace")
    return {k: v / sum(totals.values()) for k, v in totals.items()}
