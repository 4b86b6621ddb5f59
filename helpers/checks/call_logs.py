"""The spies' record a collector sent back, rebuilt for the judges of lessons 01 and 02."""

from __future__ import annotations

from helpers import spies


def call_log(calls) -> spies.CallLog:
    """The CallLog a collector recorded (helpers.collect.specs.plain_calls), rebuilt from its plain
    data. An entry that is not a call the spies make is dropped: a log forged in the student's
    process can only lose calls, never pass."""
    log = spies.CallLog()
    for call in calls if isinstance(calls, list) else []:
        if (isinstance(call, dict) and call.get("name") in spies.CALL_NAMES
                and isinstance(call.get("info"), dict) and all(isinstance(key, str) for key in call["info"])):
            log.calls.append(spies.Call(call["name"], len(log.calls), call["info"]))
    return log
