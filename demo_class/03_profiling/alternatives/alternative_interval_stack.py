# about: Correct, written with a stack of open labels per thread: labels grouped by (pid, tid), sorted by start (longer first on ties), a label counts only when no label is still open around its start.
# base: solution
# loses:
# %% ex3_1_solution
def phase_shares(trace_path, phases):
    """{phase: share of the labelled time} from an exported Chrome trace."""
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    by_thread = {}
    for event in events:
        if (event.get("ph") == "X" and event.get("cat") == "user_annotation"
                and event.get("name") in phases and "dur" in event):
            by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    totals = dict.fromkeys(phases, 0.0)
    for labels in by_thread.values():
        open_ends = []                      # ends of the labels still open, outermost first
        for event in sorted(labels, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= event["ts"]:
                open_ends.pop()
            if not open_ends:
                totals[event["name"]] += event["dur"]
            open_ends.append(event["ts"] + event["dur"])
    whole = sum(totals.values())
    if whole <= 0:
        raise ValueError(f"no phase of {list(phases)} in {trace_path}")
    return {phase: totals[phase] / whole for phase in phases}
