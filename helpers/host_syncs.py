"""A spy on host syncs: the reads that copy a tensor's value to the host and so wait for the
device (.item(), float(t), printing, .cpu(), ...), and the copies of batches to a device."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch


@dataclass
class SyncLog:
    """Host syncs seen by record_host_syncs: {"item": 3, "float": 1, ...}, how many of the values
    read still carried an autograd graph (a running total built without .detach()), and how many
    were floating point (a loss, never an integer count such as a number of tokens). Also
    the copies of host tensors of one or more dimensions (batches) to a device with .to(device,
    ...): how many, and how many of them without non_blocking=True."""

    counts: dict[str, int] = field(default_factory=dict)
    reads_with_graph: int = 0
    float_reads: int = 0
    batch_copies: int = 0
    blocking_batch_copies: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())


# What each host read is called in a SyncLog, by the Tensor method torch dispatches it as.
_SYNC_METHODS = {"item": "item", "float": "__float__", "int": "__int__", "tolist": "tolist", "cpu": "cpu",
                 "bool": "__bool__", "numpy": "numpy", "to": "to", "print": "__repr__",
                 "format": "__format__"}
_SYNC_NAMES = {method: name for name, method in _SYNC_METHODS.items()}
# Frames between a read and the mode that sees it: torch's own dispatch, not the reader.
_DISPATCH_MODULES = ("torch.overrides", "torch._tensor", "torch.utils._device")


def _is_host_copy(tensor: torch.Tensor, method: str, args, kwargs) -> bool:
    if method not in ("to", "cpu"):
        return True
    if method == "to":
        target = kwargs.get("device", args[0] if args else None)
        if not (isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"):
            return False
    # A copy to the host waits for the device; on a CPU-only machine there is no device, so count
    # only what reads a value for logging there: a 0-dim tensor such as a loss.
    return tensor.device.type != "cpu" or tensor.dim() == 0


def _batch_copy(tensor: torch.Tensor, args, kwargs) -> tuple[bool, bool]:
    """For tensor.to(*args, **kwargs): (whether it copies a host batch, a tensor of one or more
    dimensions, to a device named by the call; whether it asks for non_blocking=True). On a
    CPU-only machine the device is the CPU too: the call is what the lesson asks for, whatever it
    costs there."""
    target = kwargs.get("device", args[0] if args else None)
    named = isinstance(target, (str, torch.device)) or (type(target) is int and target >= 0)
    if not (named and tensor.device.type == "cpu" and tensor.dim() >= 1):
        return False, False
    # to(device, dtype, non_blocking, copy): the first positional bool is non_blocking.
    flags = [arg for arg in args[1:] if type(arg) is bool]
    return True, kwargs.get("non_blocking", flags[0] if flags else False) is True


def _reader_module(frame) -> str:
    """The module of the first frame outside torch's dispatch machinery: who asked for the read."""
    while frame is not None and frame.f_globals.get("__name__", "") in _DISPATCH_MODULES:
        frame = frame.f_back
    return "" if frame is None else frame.f_globals.get("__name__", "")


class _HostReadMode(torch.overrides.TorchFunctionMode):
    """Sees every Tensor method call made while it is active, however the method was reached: a
    reference to torch.Tensor.item taken before the recording began still dispatches here, which
    a patched attribute would miss. While a handler runs torch disables the mode, so the calls
    torch makes inside one read (printing runs .item() and .tolist()) are not seen again."""

    def __init__(self, log: SyncLog):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _SYNC_NAMES.get(getattr(func, "__name__", ""))
        # torch's own bookkeeping (DataLoader seeding its workers, GradScaler checking for inf,
        # Module.to) and the course's spies read and move tensors; only the calls made by the code
        # under test count.
        if (name is not None and args and isinstance(args[0], torch.Tensor)
                and not _reader_module(sys._getframe(1)).startswith(("torch.", "helpers."))):
            if _is_host_copy(args[0], name, args[1:], kwargs):
                self.log.counts[name] += 1
                self.log.reads_with_graph += bool(args[0].grad_fn is not None)
                self.log.float_reads += args[0].is_floating_point()
            elif name == "to":
                copied, non_blocking = _batch_copy(args[0], args[1:], kwargs)
                self.log.batch_copies += copied
                self.log.blocking_batch_copies += copied and not non_blocking
        return func(*args, **kwargs)


@contextlib.contextmanager
def record_host_syncs() -> Iterator[SyncLog]:
    """Count the reads that copy a value to the host and so wait for the device: .item(),
    float(t), int(t), .tolist(), .numpy(), bool(t) (an `if` on a tensor), printing or formatting a
    tensor, and .cpu() or .to("cpu") of a device tensor or of a 0-dim one (a loss read for logging).
    Each read counts once, not the calls torch makes inside it, and not the DataLoader's own
    bookkeeping. The copies of batches to a device with .to(device, ...) are counted too, with
    those made without non_blocking=True (see SyncLog). Reads are seen at torch's dispatch (a
    TorchFunctionMode), on the thread that entered the recording and on every thread `threading`
    starts meanwhile: a mode is per thread, so each new thread enters one of its own as it begins."""
    import threading

    log = SyncLog({name: 0 for name in _SYNC_METHODS})
    recording = [True]

    def enter_on_new_thread(frame, event, arg) -> None:
        sys.setprofile(None)            # the thread's first event only
        if recording[0]:
            _HostReadMode(log).__enter__()

    previous = threading.getprofile()
    threading.setprofile(enter_on_new_thread)
    try:
        with _HostReadMode(log):
            yield log
    finally:
        recording[0] = False
        threading.setprofile(previous)
