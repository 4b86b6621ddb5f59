"""The files of a submission folder: shown safely, removed without following links, kept under quota.

Used by the intake (before nbgrader copies a submission) and by the feedback step (after grading):
nothing here follows a link, opens a named pipe or prints a student's file name unescaped, and
nothing recurses once per folder level: Python 3.11's os.walk, Path.rglob, shutil.rmtree and
shutil.copytree all do, and raise RecursionError on a folder about 1,000 levels deep.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from traitlets.log import get_logger

from course_tools.units import MB


@dataclass(frozen=True)
class Dropped:
    """A file or folder removed from a submission, and why."""

    path: str
    why: str
    others: int = 0  # more entries removed for the same reason, not named in the note

    def note(self) -> str:
        if self.others:
            return f"`{shown(self.path)}` and {self.others:,} more were removed: {self.why}."
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
        remove_tree(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        get_logger().error("The grader could not remove %s: grading may copy or follow it", shown(path))
        return False


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def remove_tree(path: Path) -> int:
    """Remove a file, link or folder with everything in it, never following a link; returns how
    many entries went. Unlike shutil.rmtree, it neither recurses nor holds a descriptor per level,
    so no depth stops it, and it restores the owner's permissions a folder needs to be emptied."""
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        os.unlink(path)
        return 1
    parent = os.open(Path(path).parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return _remove_folder(parent, Path(path).name)
    finally:
        os.close(parent)


def _open_folder(parent: int, name: str) -> int:
    try:
        folder = os.open(name, _FOLDER_FLAGS, dir_fd=parent)
    except PermissionError:
        # O_NOFOLLOW got as far as the permission check, so `name` is no link that chmod would follow.
        os.chmod(name, stat.S_IRWXU, dir_fd=parent)
        folder = os.open(name, _FOLDER_FLAGS, dir_fd=parent)
    mode = os.fstat(folder).st_mode
    if mode & stat.S_IRWXU != stat.S_IRWXU:  # emptying it takes write and search rights too
        os.fchmod(folder, stat.S_IMODE(mode) | stat.S_IRWXU)
    return folder


def _identity(descriptor: int) -> tuple[int, int]:
    info = os.fstat(descriptor)
    return info.st_dev, info.st_ino


def _remove_all_but_folders(folder: int) -> tuple[list[str], int]:
    """Unlink every entry of an open folder that is no folder; returns the subfolders' names and
    how many entries went."""
    subfolders, removed = [], 0
    for name in os.listdir(folder):
        try:
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(mode):
            subfolders.append(name)
        else:
            os.unlink(name, dir_fd=folder)
            removed += 1
    return subfolders, removed


def _remove_folder(parent: int, name: str) -> int:
    # Depth first, holding only the innermost folder open: each level entered keeps its name, its
    # identity and the subfolders it still holds, and going back up opens `..`, which must be the
    # level entered before (nothing else moves a submission's folders while it is taken in).
    current = _open_folder(parent, name)
    try:
        subfolders, removed = _remove_all_but_folders(current)
        levels = [(name, _identity(current), subfolders)]
        while levels:
            name, _, subfolders = levels[-1]
            if subfolders:
                child = subfolders.pop()
                inner = _open_folder(current, child)
                os.close(current)
                current = inner
                inner_subfolders, count = _remove_all_but_folders(current)
                levels.append((child, _identity(current), inner_subfolders))
                removed += count
                continue
            levels.pop()
            if levels:
                outer = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
                os.close(current)
                current = outer
                if _identity(outer) != levels[-1][1]:
                    raise OSError(errno.ESTALE, "a folder moved while it was being removed")
            else:
                os.close(current)
                current, outer = None, parent
            os.rmdir(name, dir_fd=outer)
            removed += 1
        return removed
    finally:
        if current is not None:
            os.close(current)


def remove_unsafe_entries(folder: Path, skip: frozenset[str] = frozenset(), max_depth: int | None = None,
                          max_entries: int | None = None) -> tuple[list[Dropped], list[tuple[str, int]]]:
    """Remove every link and special file under `folder` (never following a link), and every file
    or folder the grader cannot read even after restoring its owner's permissions. Returns what
    was removed and (path, size) of every regular file left; top-level names in `skip` are the
    caller's.

    With `max_depth`, what lies more than that many folders below `folder` is removed; with
    `max_entries`, what comes after that many entries, taken shallowest first. nbgrader walks what
    is left with os.walk, which recurses once per level, and matches each file against its ignore
    patterns by listing the file's folder again, so that its time grows with the square of the
    files in a folder (9 s for 1,000 in one)."""
    dropped, files = [], []
    too_deep: list[str] = []
    too_many: list[str] = []
    looked_at = 0
    pending = deque([folder])  # breadth first, so that the entries kept are the shallowest
    while pending:
        current = pending.popleft()
        try:
            names = _list(current)
        except OSError:
            if current == folder:
                raise
            if remove_entry(current):
                relative = current.relative_to(folder).as_posix()
                dropped.append(Dropped(relative, "the grader cannot open this folder"))
            continue
        depth = len(current.relative_to(folder).parts) + 1  # of the entries in `current`
        for name in names:
            path = current / name
            relative = path.relative_to(folder).as_posix()
            if current == folder and name in skip:
                continue
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            if max_depth is not None and depth > max_depth:
                if remove_entry(path):
                    too_deep.append(relative)
                continue
            if max_entries is not None and looked_at >= max_entries:
                if remove_entry(path):
                    too_many.append(relative)
                continue
            looked_at += 1
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
    # One note for each bound: a cut tree can have thousands of entries at its edge.
    if too_deep:
        dropped.append(Dropped(too_deep[0], f"the grader takes in nothing more than {max_depth} folders "
                                            "below the notebook, and a folder there goes with everything "
                                            "in it", others=len(too_deep) - 1))
    if too_many:
        dropped.append(Dropped(too_many[0], f"a submission may hold at most {max_entries:,} files and "
                                            "folders beside its notebooks, the shallowest kept first, and a "
                                            "folder beyond them goes with everything in it",
                               others=len(too_many) - 1))
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
