"""Messages from a student's kernel are untrusted input: a bad one is dropped and counted, never fatal.

jupyter_client raises on a message whose signature does not verify, that was replayed, or that is
malformed, and nbclient lets that exception end the whole notebook: one forged message from a
student's code left a submission with no autograded notebook, no feedback and a zero. The grader
uses `CheckedSession` instead. It turns such a message into an inert one that no cell is waiting
for (no parent, so nbclient skips it) and records why, so that GuardedExecute can fail the cell
that was running when it came and grade the rest of the notebook.
"""

from __future__ import annotations

import re

from jupyter_client.session import Session

# The type of the inert message that replaces a rejected one.
REJECTED = "course_rejected_message"
# The most a guard's reply may carry in tensor bytes, and the most all the replies of one notebook
# may carry together. A reply holds a collector's plain data, kilobytes at the exercises' sizes: a
# larger one is dropped as soon as it arrives, and fails the test that asked for it.
MAX_REPLY_BYTES = 64 * 2**20
MAX_NOTEBOOK_REPLY_BYTES = 512 * 2**20
# The most JSON (header, metadata, content) one message may carry: read into Python objects, JSON
# grows several times its size, so a larger message is refused before it is parsed.
MAX_MESSAGE_JSON_BYTES = 64 * 2**20
# The most values (lists, objects, and the items in them) one message's JSON may hold. Under the
# byte cap, 59 MiB of empty lists would still become 20 million Python lists, over a GiB in the
# grader: counted on the bytes before parsing (strings blanked first), a message with more is refused.
MAX_MESSAGE_ITEMS = 1_000_000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def json_items(data: bytes) -> int:
    """An upper bound on the values the JSON `data` holds once parsed: its brackets, braces and
    commas outside strings, counted at C speed without building anything."""
    bare = _JSON_STRING.sub(b'""', data)
    return bare.count(b"[") + bare.count(b"{") + bare.count(b",") + 1


def _is_well_formed(message: dict, with_content: bool) -> bool:
    header, parent = message.get("header"), message.get("parent_header")
    if not (isinstance(header, dict) and isinstance(parent, dict)):
        return False
    if not (isinstance(header.get("msg_id"), str) and isinstance(header.get("msg_type"), str)):
        return False
    if not isinstance(parent.get("msg_id", ""), str) or not isinstance(message.get("metadata"), dict):
        return False
    return not with_content or isinstance(message.get("content"), dict)


class CheckedSession(Session):
    """A Session that drops what it cannot verify or read, and keeps a list of why."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rejected: list[str] = []

    def deserialize(self, msg_list, content=True, copy=True):
        json_bytes = sum(memoryview(part).nbytes for part in msg_list[:5])
        if json_bytes > MAX_MESSAGE_JSON_BYTES:
            return self._rejected(f"a message of {json_bytes / 2**20:.0f} MiB, more than the "
                                  f"{MAX_MESSAGE_JSON_BYTES // 2**20} MiB the grader parses")
        items = sum(json_items(bytes(part)) for part in msg_list[1:5])
        if items > MAX_MESSAGE_ITEMS:
            return self._rejected(f"a message of {items:,} values, more than the {MAX_MESSAGE_ITEMS:,} the "
                                  "grader parses")
        try:
            message = super().deserialize(msg_list, content=content, copy=copy)
        except Exception as error:  # signature, replay, framing, JSON: all the kernel's doing
            return self._rejected(f"{type(error).__name__}: {str(error)[:80]}")
        if not _is_well_formed(message, content):
            return self._rejected("a message without the fields every kernel message has")
        return message

    def _rejected(self, why: str) -> dict:
        self.rejected.append(why)
        header = {"msg_id": f"rejected-{len(self.rejected)}", "msg_type": REJECTED, "session": "",
                  "username": "", "date": None, "version": "5.3"}
        return {"header": header, "msg_id": header["msg_id"], "msg_type": REJECTED, "parent_header": {},
                "metadata": {}, "content": {}, "buffers": []}

