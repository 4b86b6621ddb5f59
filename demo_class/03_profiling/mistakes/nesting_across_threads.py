# about: Leaves nested labels out, but tracks nesting over the whole trace instead of per thread (pid, tid): a label on another thread that overlaps in time with a counted one is dropped.
# base: solution
# loses: ex3_1_test
# says: labels nest only on the same pid and tid
# %% ex3_1_solution
def phase_shares(trace_path, phases):
    """{phase: share of the labelled time} from an exported Chrome trace."""
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    labels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
              and e.get("name") in phases and "dur" in e]
    labels.sort(key=lambda e: (e["ts"], -e["dur"]))
    totals = {phase: 0.0 for phase in phases}
    counted_until = float("-inf")
    for event in labels:
        end = event["ts"] + event["dur"]
        if end <= counted_until:
            continue                        # inside the label counted last
        totals[event["name"]] += float(event["dur"])
        counted_until = end
    grand_total = sum(totals.values())
    if grand_total == 0:
        raise ValueError(f"none of the phases {list(phases)} occurs in {trace_path}")
    return {phase: total / grand_total for phase, total in totals.items()}
