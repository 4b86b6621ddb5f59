"""How many autograd graphs through a model a loop kept alive at once, seen from the model's layers.

Gradient accumulation keeps memory at one micro-batch by running each micro-batch's backward before
the next forward: the next graph is built only after the last one was used and freed. The lesson's
saved-tensor meter shows that too, but saved-tensor hooks are per thread and innermost-wins, so a
forward run on a worker thread, inside `save_on_cpu()` or `checkpoint`, or under the student's own
hooks is hidden from it. A layer's forward hook and a hook on its output's graph node fire on every
thread, whatever saved-tensor hooks are active: `graphs_alive(model)` counts with those.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch
from torch import nn


class GraphRecord:
    """`most_alive`: the most graphs through one layer alive at once (a forward whose output needs a
    gradient opens one, the backward reaching that output closes it); `most_rows`: the most rows
    (the first dimension of the input) one forward of the whole model saw; `forwards`: the graphs
    opened, counted per layer; `hooks_lost`: the record's hooks that were no longer on their module
    when the block ended (code that clears a module's hooks hides its forwards from the count)."""

    def __init__(self):
        self.most_alive = 0
        self.most_rows = 0
        self.forwards = 0
        self.hooks_lost = 0
        self._alive: dict[int, int] = {}
        self._lock = threading.Lock()

    def plain(self) -> dict[str, int]:
        return {"most_alive": self.most_alive, "most_rows": self.most_rows, "forwards": self.forwards,
                "hooks_lost": self.hooks_lost}

    def _opened(self, layer: nn.Module) -> None:
        with self._lock:
            alive = self._alive.get(id(layer), 0) + 1
            self._alive[id(layer)] = alive
            self.most_alive = max(self.most_alive, alive)
            self.forwards += 1

    def _saw_rows(self, rows: int) -> None:
        with self._lock:
            self.most_rows = max(self.most_rows, rows)

    def _closed(self, layer: nn.Module) -> None:
        with self._lock:
            self._alive[id(layer)] = max(self._alive.get(id(layer), 0) - 1, 0)


def _rows(args: tuple) -> int:
    first = args[0] if args else None
    return int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() > 0 else 0


@contextlib.contextmanager
def graphs_alive(model: nn.Module) -> Iterator[GraphRecord]:
    """Count, inside the block, the graphs through each of `model`'s layers that hold parameters.

    A forward that runs while a backward pass is running (checkpointing recomputing a segment) opens
    no graph: it rebuilds one that is already counted."""
    record = GraphRecord()

    def forward_hook(layer, args, output) -> None:
        if type(output) is not torch.Tensor or output.grad_fn is None:
            return
        if torch._C._current_graph_task_id() != -1:
            return
        record._opened(layer)
        closed = []

        def backward_reached(grad_outputs) -> None:
            if not closed:          # a second backward through a retained graph closes nothing more
                closed.append(True)
                record._closed(layer)

        output.grad_fn.register_prehook(backward_reached)

    def model_rows(module, args, output) -> None:
        if torch.is_grad_enabled():
            record._saw_rows(_rows(args))

    layers = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    hooked = [(layer, layer.register_forward_hook(forward_hook)) for layer in layers]
    hooked.append((model, model.register_forward_hook(model_rows)))
    try:
        yield record
    finally:
        for module, handle in hooked:
            hooks = getattr(module, "_forward_hooks", None)
            if not (isinstance(hooks, dict) and handle.id in hooks):
                record.hooks_lost += 1
            handle.remove()
