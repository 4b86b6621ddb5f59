"""Byte counts of parameters, gradients, optimizer state, saved activations, and peaks over time."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import weakref
from collections.abc import Callable, Mapping

import torch
from torch import nn

from helpers.device import synchronize


def tensor_bytes(t: torch.Tensor) -> int:
    """Return numel * element_size of a tensor of any shape/dtype."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a tensor, got {type(t).__name__}")
    return t.numel() * t.element_size()


def _require_module(model) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


def parameter_bytes(model: nn.Module) -> int:
    """Return the bytes of all parameters of `model` (shared parameters counted once)."""
    return sum(tensor_bytes(p) for p in _require_module(model).parameters())


def gradient_bytes(model: nn.Module) -> int:
    """Return the bytes of all existing .grad tensors of `model` (None grads count 0)."""
    return sum(tensor_bytes(p.grad) for p in _require_module(model).parameters()
               if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Return the bytes of every tensor in optimizer.state, step counters included.

    Adam keeps `step` as a 0-d float32 tensor (4 bytes per parameter), which is counted;
    plain Python numbers are not tensors and are not counted.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    return sum(
        tensor_bytes(value)
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )


class _Saved:
    """What the meter keeps for autograd: the saved tensor and its version when it was saved (a
    detached alias shares the tensor's version counter, so later in-place changes show)."""

    __slots__ = ("tensor", "version")

    def __init__(self, tensor: torch.Tensor):
        self.tensor, self.version = tensor, tensor._version


class SavedTensorMeter:
    """Measure the unique storage bytes autograd saves for backward inside a `with` block.

    Attributes `bytes` and `count` (unique storages) are live inside the block and final after;
    `peak` is the most bytes the graph held at one moment (a storage stops counting there once
    every saved tensor on it is freed, as backward frees them): what accumulation keeps low.
    Storages of `model`'s parameters are skipped: autograd saves them by reference, at no cost.
    Under autocast the low-precision copies of weights that autograd saves are not parameters
    and are counted: the graph really holds them.
    """

    def __init__(self, model: nn.Module | None = None):
        if model is not None:
            _require_module(model)
        self.model = model
        self.bytes = 0
        self.count = 0
        self.live = 0
        self.peak = 0
        # data_ptr -> weak references to the saved tensors that use that storage.
        self._seen: dict[int, list[weakref.ref]] = {}
        self._parameter_pointers: set[int] = set()
        self._hooks = None

    def _pack(self, tensor: torch.Tensor) -> _Saved:
        # Saving the tensor itself would make a saved output hold its own grad_fn: a reference
        # cycle that keeps the graph alive even after gc. A detached alias shares the storage.
        saved = tensor.detach()
        packed = _Saved(saved)
        try:
            storage = saved.untyped_storage()
            pointer, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):
            # Tensors without a plain storage (e.g. some subclasses) count by their own size.
            pointer, nbytes = None, tensor_bytes(saved)
        if nbytes == 0 or pointer in self._parameter_pointers:
            return packed
        if pointer is not None:
            holders = self._seen.setdefault(pointer, [])
            # An address is only a duplicate while a tensor saved on it is alive; once the graph
            # freed it, the allocator may have reused the address for a new storage.
            already_counted = any(holder() is not None for holder in holders)
            holders.append(weakref.ref(saved))
            if already_counted:
                return packed
        self.bytes += nbytes
        self.count += 1
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(saved, self._release, pointer, nbytes)
        return packed

    def _release(self, pointer: int | None, nbytes: int) -> None:
        """A saved tensor was freed: its storage stops counting as live unless another saved
        tensor still holds it, which then carries the storage's release."""
        survivor = next((held for ref in self._seen.get(pointer, ()) if (held := ref()) is not None), None)
        if pointer is not None and survivor is not None:
            weakref.finalize(survivor, self._release, pointer, nbytes)
        else:
            self.live -= nbytes

    @staticmethod
    def _unpack(packed: _Saved) -> torch.Tensor:
        # With saved-tensor hooks on, autograd no longer checks that a saved tensor was left as
        # it was; the meter must not turn that error into a silently wrong gradient, so it checks.
        saved = packed.tensor
        if saved._version != packed.version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [{saved.type()} {list(saved.shape)}] is at version {saved._version}; expected "
                f"version {packed.version} instead (checked by helpers.memory.SavedTensorMeter, as autograd "
                "checks it without the meter)")
        return saved

    def __enter__(self) -> SavedTensorMeter:
        if self._hooks is not None:
            raise RuntimeError("this SavedTensorMeter is already active; create a new one")
        self.bytes = 0
        self.count = 0
        self.live = 0
        self.peak = 0
        self._seen = {}
        self._parameter_pointers = (
            set() if self.model is None
            else {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        )
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self._hooks.__exit__(*exc_info)
        self._hooks = None
        self._seen = {}

    def __repr__(self) -> str:
        return f"SavedTensorMeter(bytes={self.bytes}, count={self.count}, peak={self.peak})"


def cuda_peak_bytes(fn: Callable[[], object], device: torch.device | str) -> int | None:
    """Run fn(); on CUDA return peak bytes allocated while it ran (live tensors too), else None."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    device = torch.device(device)
    if device.type != "cuda":
        fn()
        return None
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    synchronize(device)
    return torch.cuda.max_memory_allocated(device)


# What the CPU allocator logs (natively, on file descriptor 2) when a tensor made before profiling
# is freed during it: true and harmless here, and stderr in a test cell fails nbgrader's Validate.
_UNKNOWN_BLOCK_LOG = b"Memory block of unknown size was allocated before the profiling started"


@contextlib.contextmanager
def _native_stderr_without_allocator_notes():
    """Hold what native code writes to file descriptor 2, then pass it on without the allocator's
    note. Python's own sys.stderr is untouched; a file, unlike a pipe, never fills and blocks."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held.read().splitlines(keepends=True)
                            if _UNKNOWN_BLOCK_LOG not in line)
            if kept:
                sys.stderr.write(kept.decode(errors="replace"))


def _allocations(events) -> list:
    """The allocation events of the profiler's event tree, depth first."""
    found, pending = [], list(events)
    while pending:
        event = pending.pop()
        kind, fields = event.typed
        if kind == torch._C._profiler._EventType.Allocation:
            found.append((event.start_time_ns, fields))
        pending.extend(event.children)
    return found


class _CpuLedger:
    """The CPU tensors allocated while this ledger watched, and how many bytes of them live.

    Each `run(fn)` is one profiling window; a block counts from its allocation in any of this
    ledger's windows to its free, so phases run one after another add up. A block from outside
    them (made before, or in another ledger's window) is never counted, nor is its free: the
    allocator remembers sizes across windows, and such a free would lower the total below what the
    watched code ever held.
    """

    def __init__(self):
        self.mine: set[int] = set()
        self.live = 0

    def run(self, fn: Callable[[], object]) -> int:
        """Run fn(); the most bytes live at one moment while it ran."""
        from torch.profiler import ProfilerActivity, profile

        # The profiler's native library prints a line on stderr at every start and stop unless
        # told not to before its first use.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        with _native_stderr_without_allocator_notes(), profile(activities=[ProfilerActivity.CPU],
                                                               profile_memory=True) as prof:
            fn()
        peak = self.live
        allocations = _allocations(prof.profiler.kineto_results.experimental_event_tree())
        # At one timestamp a free goes before an allocation: the allocator may reuse the block.
        for _, fields in sorted(allocations, key=lambda item: (item[0], item[1].alloc_size > 0)):
            if fields.device.type != "cpu":
                continue
            if fields.alloc_size > 0:
                self.mine.add(fields.ptr)
                self.live += fields.alloc_size
                peak = max(peak, self.live)
            elif fields.ptr in self.mine:
                self.mine.discard(fields.ptr)
                self.live += fields.alloc_size
        return peak


def _check_device(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"peak_bytes measures CUDA and CPU memory, not {device.type}: "
                         "measure a copy of the model on the CPU")
    return device


def peak_bytes(fn: Callable[[], object], device: torch.device | str) -> int:
    """Run fn() and return the most bytes it had allocated at one moment on `device`, beyond what
    was allocated when it started: the peak over a forward AND backward pass (what checkpointing
    really costs), where SavedTensorMeter shows only what the forward left for backward.

    On CUDA this is the allocator's `max_memory_allocated`; on a CPU the profiler's memory events
    (`profile_memory=True`), which see every tensor allocation. Both count tensors only, and agree
    up to the CUDA allocator's rounding (to 512 bytes) and library workspaces (cuBLAS). Other
    devices (MPS) keep no such record: measure a CPU copy there.
    """
    return next(iter(phase_peaks({"fn": fn}, device).values()))


def phase_peaks(phases: Mapping[str, Callable[[], object]], device: torch.device | str) -> dict[str, int]:
    """Run each phase in order; for each, the most bytes allocated at one moment during it, above
    what was allocated when the first phase began (what one phase leaves, the next one holds).

    For a training step: {"forward": ..., "backward": ..., "optimizer step": ...}.
    """
    if not isinstance(phases, Mapping) or not phases:
        raise TypeError("phases must be a non-empty dict of name -> callable taking no arguments")
    for name, fn in phases.items():
        if not callable(fn):
            raise TypeError(f"phase {name!r} must be a callable taking no arguments, got {type(fn).__name__}")
    device = _check_device(device)
    peaks = {}
    if device.type == "cuda":
        synchronize(device)
        before = torch.cuda.memory_allocated(device)
        for name, fn in phases.items():
            torch.cuda.reset_peak_memory_stats(device)
            fn()
            synchronize(device)
            peaks[name] = torch.cuda.max_memory_allocated(device) - before
        return peaks
    ledger = _CpuLedger()
    for name, fn in phases.items():
        peaks[name] = ledger.run(fn)
    return peaks


def format_bytes(n: int | float) -> str:
    """Format a byte count with binary units: '512 B', '1.50 KiB', '9.00 MiB', '2.00 GiB'."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        raise TypeError(f"expected a number of bytes, got {type(n).__name__}")
    sign, size = ("-" if n < 0 else ""), abs(n)
    if size < 1024:
        return f"{sign}{size:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            return f"{sign}{size:.2f} {unit}"
    return f"{sign}{size / 1024:.2f} TiB"
