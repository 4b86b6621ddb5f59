"""What a student's kernel writes to its file descriptors 1 and 2: never the grader's own terminal.

ipykernel turns what the student's code writes to fds 1 and 2 into stream messages (the notebook's
outputs, capped by GuardedExecute) and also echoes every byte to the descriptor the kernel was
started with. If that were the grader's stderr, a kernel could write megabytes into the teacher's
log, or terminal escape sequences that retitle or clear the teacher's terminal. So a kernel starts
with a `KernelOutputRelay` as its stdout and stderr: a pipe whose first bytes (bubblewrap's or
Python's message when a kernel cannot start) reach the grader's log with every control character
replaced, and whose rest is read and dropped. A kernel forked from the template (kernel_template_program)
gets /dev/null instead.
"""

from __future__ import annotations

import os
import re
import sys
import threading

# Enough for a traceback of a kernel that could not start; a student's flood stops here.
KEPT_BYTES = 16 * 1024
# C0 and C1 control characters but newline and tab: ESC and CSI start terminal escape sequences.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def harmless(text: str) -> str:
    """`text` with every control character but newline and tab shown as '?'."""
    return _CONTROL.sub("?", text)


class KernelOutputRelay:
    """A pipe for one kernel's stdout and stderr, read by a thread that keeps the first `kept` bytes
    for the grader's log (`sink`, default sys.stderr) and drops the rest."""

    def __init__(self, kept: int = KEPT_BYTES, sink=None):
        read_fd, self.write_fd = os.pipe()
        self._sink = sink
        self._thread = threading.Thread(target=self._relay, args=(read_fd, kept), daemon=True,
                                        name="kernel-output-relay")
        self._thread.start()

    def close_writer(self) -> None:
        """Once the kernel holds its own copy: the relay ends when the kernel's copies close."""
        if self.write_fd is not None:
            os.close(self.write_fd)
            self.write_fd = None

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _relay(self, read_fd: int, kept: int) -> None:
        shown, dropped = bytearray(), 0
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                room = kept - len(shown)
                shown += chunk[:max(room, 0)]
                dropped += max(len(chunk) - max(room, 0), 0)
        if not shown and not dropped:
            return
        text = harmless(bytes(shown).decode("utf-8", errors="replace"))
        if dropped:
            text += f"\n[the kernel wrote {dropped:,} more bytes to its stdout and stderr: not shown]\n"
        sink = self._sink or sys.stderr
        try:
            sink.write(text if text.endswith("\n") else text + "\n")
            sink.flush()
        except (OSError, ValueError):   # the grader's stderr is gone (closed at exit): nothing to tell
            pass
