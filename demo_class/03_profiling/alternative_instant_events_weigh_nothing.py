# about: Correct in effect: adds every user_annotation event of a phase, instant ones too, whose missing duration .get reads as 0.
# base: solution
# %% ex3_1_solution
def phase_shares(trace_path, phases):
    with open(trace_path) as handle:
        events = json.load(handle)["traceEvents"]
    totals = dict.fromkeys(phases, 0.0)
    for event in events:
        if event.get("cat") == "user_annotation" and event.get("name") in totals:
            totals[event["name"]] += event.get("dur", 0)
    whole = sum(totals.values())
    if not whole:
        raise ValueError("no phase occurs in the trace")
    return {name: value / whole for name, value in totals.items()}
