# about: Adds up every phase label, also those running inside another phase's label on the same thread (a data label inside forward, a nested forward), so their time counts twice.
# base: solution
# loses: ex3_1_test
# says: count a label twice when it runs inside another label
# %% ex3_1_solution
def phase_shares(trace_path, phases):
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    totals = dict.fromkeys(phases, 0.0)
    for event in events:
        if event.get("ph") == "X" and event.get("cat") == "user_annotation" and event.get("name") in totals:
            totals[event["name"]] += event["dur"]
    whole = sum(totals.values())
    if not whole:
        raise ValueError(f"none of the phases {list(phases)} occurs in {trace_path}")
    return {phase: total / whole for phase, total in totals.items()}
