# about: Correct in effect: adds every user_annotation event of a phase, instant ones too, whose missing duration .get reads as 0.
# base: solution
# %% ex3_1_solution
def phase_shares(trace_path, phases):
    with open(trace_path) as handle:
        events = json.load(handle)["traceEvents"]
    totals = dict.fromkeys(phases, 0.0)
    labels = [e for e in events if e.get("cat") == "user_annotation" and e.get("name") in totals]
    labels.sort(key=lambda e: (e.get("pid"), e.get("tid"), e.get("ts", 0), -e.get("dur", 0)))
    ends = {}
    for event in labels:
        thread, end = (event.get("pid"), event.get("tid")), event.get("ts", 0) + event.get("dur", 0)
        if thread in ends and end <= ends[thread]:
            continue
        totals[event["name"]] += event.get("dur", 0)
        ends[thread] = end
    whole = sum(totals.values())
    if not whole:
        raise ValueError("no phase occurs in the trace")
    return {name: value / whole for name, value in totals.items()}
