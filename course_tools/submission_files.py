"""The files of a submission folder: shown safely, removed without following links, kept under quota.

Used by the intake (before nbgrader copies a submission) and by the feedback step (after grading):
nothing here follows a link, opens a named pipe or prints a student's file name unescaped.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from traitlets.log import get_logger

MB = 1024 * 1024


@dataclass(frozen=True)
class Dropped:
    """A file or folder removed from a submission, and why."""

    path: str
    why: str

    def note(self) -> str:
        return f"`{shown(self.path)}` was removed: {self.why}."


def shown(name: str) -> str:
    """A file name as feedback and log may show it: a student chooses their file names, so every
    character that could break out of Markdown or a terminal line is replaced. A long one keeps
    its end, where a path names the student, the assignment and the file."""
    safe = re.sub(r"[^\w.+/() -]", "?", str(name))
    return safe if len(safe) <= 80 else "..." + safe[-77:]


def megabytes(size: float) -> str:
    return f"{size / MB:.0f} MB" if size >= MB else f"{size / MB:.2g} MB"


def special_kind(mode: int) -> str | None:
    """What an lstat mode is when it is neither a regular file nor a folder."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "a special file"


def _make_accessible(path: Path, mode: int, bits: int) -> None:
    # Submissions are copied by `nbgrader collect` and so belong to the grader, who may restore
    # the permission bits a student's files arrived without.
    if mode & bits != bits:
        try:
            os.chmod(path, stat.S_IMODE(mode) | bits)
        except OSError:
            pass


def _list(folder: Path) -> list[str]:
    _make_accessible(folder, os.lstat(folder).st_mode, stat.S_IRWXU)
    return sorted(os.listdir(folder))


def _readable(path: Path, mode: int) -> bool:
    for attempt in range(2):
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK))
            return True
        except OSError:
            if attempt == 0:
                _make_accessible(path, mode, stat.S_IRUSR)
    return False


def remove_entry(path: Path) -> bool:
    """Remove a file, link or folder without following any link; False when it stays."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)  # removes links inside, never what they point to
        else:
            os.unlink(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        get_logger().error("The grader could not remove %s: grading may copy or follow it", shown(path))
        return False


def remove_unsafe_entries(folder: Path, skip: frozenset[str] = frozenset()
                          ) -> tuple[list[Dropped], list[tuple[str, int]]]:
    """Remove every link and special file under `folder` (never following a link), and every file
    or folder the grader cannot read even after restoring its owner's permissions. Returns what
    was removed and (path, size) of every regular file left; top-level names in `skip` are the
    caller's."""
    dropped, files = [], []
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            names = _list(current)
        except OSError:
            if current == folder:
                raise
            if remove_entry(current):
                relative = current.relative_to(folder).as_posix()
                dropped.append(Dropped(relative, "the grader cannot open this folder"))
            continue
        for name in names:
            path = current / name
            relative = path.relative_to(folder).as_posix()
            if current == folder and name in skip:
                continue
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            kind = special_kind(mode)
            if kind:
                if remove_entry(path):
                    dropped.append(Dropped(relative, f"it is {kind}; the grader takes in only plain files"))
            elif stat.S_ISDIR(mode):
                pending.append(path)
            elif _readable(path, mode):
                files.append((relative, os.lstat(path).st_size))
            elif remove_entry(path):
                dropped.append(Dropped(relative, "the grader cannot read it"))
    return dropped, files


def enforce_quota(folder: Path, files: list[tuple[str, int]], quota: int) -> list[Dropped]:
    """Remove the largest files until the rest total at most `quota` bytes."""
    total, dropped = sum(size for _, size in files), []
    for relative, size in sorted(files, key=lambda item: (-item[1], item[0])):
        if total <= quota:
            break
        if remove_entry(folder / relative):
            total -= size
            dropped.append(Dropped(relative, f"it is {megabytes(size)}, and the files handed in beside the "
                                             f"notebooks may total at most {megabytes(quota)}"))
    return dropped
