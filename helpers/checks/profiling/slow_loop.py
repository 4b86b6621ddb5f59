"""Exercise 4 (fix the slow loop): check_fast_epoch runs the student's fast_epoch and judges its outcome
against reference_epoch (the lesson's slow_epoch as published), then what only counting shows: the
DataLoader's settings, the host syncs, the graph kept in what is read, the blocking copies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from helpers import grads
from helpers.checks.kept import kept
from helpers.collect.profiling import collect_fast_epoch
from helpers.diagnosis import mistake
from helpers.transport import errors, remote

# ----------------------------------------------------------------------------------------------
# Exercise 4: fast_epoch against slow_epoch
# ----------------------------------------------------------------------------------------------

def reference_epoch(model: torch.nn.Module, dataset, batch_size: int, lr: float) -> float:
    """The notebook's slow_epoch as the lesson publishes it, with SGD(lr), on `model` (trained in
    place): same batches, same order, same updates. The check runs this, never the notebook's
    slow_epoch, which sits in a cell the student can edit. Returns the mean loss."""
    model_device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(dataset, batch_size=batch_size)
    total = 0.0
    for x, y in loader:
        x, y = x.to(model_device), y.to(model_device)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


@kept
def slow_epoch_outcome(model: torch.nn.Module, dataset, batch_size: int, lr: float) -> tuple[float, dict]:
    """reference_epoch on a copy of `model`: its mean loss and the copy's final parameters (on the
    CPU), once per process for equal arguments (helpers.checks.kept)."""
    twin = grads.clone_model(model)
    loss = reference_epoch(twin, dataset, batch_size, lr)
    return loss, {name: tensor.cpu() for name, tensor in grads.param_snapshot(twin).items()}


def _dicts(value) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _count(value) -> int:
    return value if type(value) is int and value >= 0 else 0


def _parameters_of(outcome: Mapping, like: Mapping[str, torch.Tensor]) -> dict | None:
    """The parameters the collector sent, if they are `like`'s names and shapes, else None."""
    sent = outcome.get("parameters")
    if not (isinstance(sent, dict) and sent.keys() == like.keys()):
        return None
    if not all(isinstance(sent[name], torch.Tensor) and sent[name].shape == tensor.shape
               for name, tensor in like.items()):
        return None
    return sent


def check_fast_epoch(fast_epoch: Callable, dataset, model: torch.nn.Module, *,
                     batch_size: int, num_workers: int, log_every: int, lr: float = 0.05) -> str:
    """Run fast_epoch on a copy of `model` (SGD, lr) and assert Exercise 4: first the outcome,
    slow_epoch's final parameters and mean loss (a float; a wrong outcome is explained by the
    DataLoader's batch_size, shuffle, drop_last and batches), then what only counting shows: a
    DataLoader with the given num_workers (pin_memory on CUDA), host syncs only every log_every
    steps and at the end, no graph in what is read, batches moved with non_blocking=True.
    slow_epoch's outcome comes from reference_epoch, the lesson's slow_epoch as published, run here
    on another copy: never the notebook's, which sits in a cell the student can edit. Returns a
    one-line summary."""
    reference_loss, reference = slow_epoch_outcome(model, dataset, batch_size, lr)
    steps = -(-len(dataset) // batch_size)
    model_device = _device_of(model)
    outcome = remote.run_student(fast_epoch, collect_fast_epoch, model, next(model.parameters()).device, lr,
                                 dataset, batch_size, num_workers, log_every)
    error = remote.raised_of(outcome)
    if error is not None:
        raise errors.failure("fast_epoch", error,
                             expected="trains as slow_epoch does and returns its mean loss")
    loaders = outcome.get("loaders") if isinstance(outcome.get("loaders"), dict) else {}
    all_settings, batches = _dicts(loaders.get("settings")), _count(loaders.get("batches"))
    # The outcome first: the parameters and the loss slow_epoch reaches. What the spies recorded
    # (the DataLoaders, the host syncs) explains a wrong outcome, or enforces what no outcome shows.
    ended = _parameters_of(outcome, reference)
    params = None if ended is None else grads.compare(ended, reference)
    if params is None or not params.close(rtol=1e-5, atol=1e-6):
        for settings in all_settings:
            if settings.get("batch_size") != batch_size:
                raise mistake("batch_size_not_passed",
                              f"the DataLoader ran with batch_size={settings.get('batch_size')}: pass "
                              f"batch_size={batch_size} on")
        if any(settings.get("shuffle") is True for settings in all_settings):
            raise mistake("shuffled_batches",
                          "the DataLoader shuffled (shuffle=True): slow_epoch takes the batches in the "
                          "dataset's order, so yours held other samples, in another order, and the model "
                          "ended elsewhere than slow_epoch's: leave shuffle off (False, the default)")
        if any(settings.get("drop_last") is True for settings in all_settings):
            raise mistake("dropped_last_batch",
                          f"the DataLoader dropped the last, shorter batch (drop_last=True): slow_epoch "
                          f"trains on it too ({steps} steps for {len(dataset)} samples in batches of "
                          f"{batch_size}): leave drop_last off (False, the default)")
        if all_settings and batches != steps:
            raise mistake("not_every_batch_trained",
                          f"fast_epoch took {batches} batches from its DataLoader for {steps} "
                          "steps: train on every batch the DataLoader yields, once")
        how = f" ({params})" if params else ""
        raise mistake("wrong_final_parameters",
                      f"the model ended elsewhere than slow_epoch's{how}: same batches, same order, "
                      "same updates")
    if "value" not in outcome:
        raise mistake("loss_not_python_float",
                      "return the mean loss as a Python float (read the total with .item() at the "
                      f"end), not a {outcome.get('returned')}")
    loss = outcome["value"]
    if not grads.near(loss, reference_loss, atol=1e-4 * max(1.0, abs(reference_loss))):
        raise mistake("wrong_loss_returned",
                      f"returned {loss:.6f}, slow_epoch returns {reference_loss:.6f}: the mean of the "
                      f"{steps} batches' losses (the last batch is shorter when the dataset does not "
                      "divide evenly)")
    # Required by the text, and visible in no outcome: counted.
    if not all_settings:
        raise mistake("no_dataloader", "fast_epoch should load the data with a torch.utils.data.DataLoader")
    for settings in all_settings:
        if settings.get("num_workers") != num_workers:
            raise mistake(
                "num_workers_not_passed",
                f"the DataLoader ran with num_workers={settings.get('num_workers')}: pass num_workers on, so "
                f"that worker processes (here {num_workers}) decode the next batches while the model trains")
        if model_device.type == "cuda" and not settings.get("pin_memory"):
            raise mistake("pin_memory_off_on_cuda",
                          "the model is on CUDA but the DataLoader ran with pin_memory=False: pinned "
                          "batches copy to the GPU with .to(device, non_blocking=True) without a stop")
        if model_device.type != "cuda" and settings.get("pin_memory"):
            raise mistake("pin_memory_without_cuda",
                          f"the model is on {model_device.type} but the DataLoader ran with "
                          "pin_memory=True: pinning helps only a copy to a GPU; pass "
                          "pin_memory=(the model's device is CUDA)")
    syncs = outcome.get("syncs") if isinstance(outcome.get("syncs"), dict) else {}
    counts = syncs.get("counts") if isinstance(syncs.get("counts"), dict) else {}
    counts = {str(name): _count(count) for name, count in counts.items()}
    total_syncs = sum(counts.values())
    # The text allows a read per log and one at the end; when the last step also logs, one read can
    # serve both, so one fewer is right too.
    reads = steps // log_every + 1
    fewest = reads - (steps % log_every == 0)
    if total_syncs > reads:
        raise mistake(
            "too_many_host_reads",
            f"fast_epoch made {total_syncs} host syncs ({_nonzero(counts)}) for {steps} steps with "
            f"log_every={log_every}: keep the running loss on the device (total += loss.detach()) and "
            f"read it only every log_every steps and at the end ({reads} reads)")
    if total_syncs < fewest:
        raise mistake(
            "loss_not_logged",
            f"fast_epoch read the loss {total_syncs} times in {steps} steps with log_every={log_every}: "
            f"print the running mean every log_every steps ({steps // log_every} times) and read it once "
            "at the end")
    if _count(syncs.get("reads_with_graph")):
        raise mistake("total_keeps_graph",
                      "the running total you read still carries the autograd graph: total += loss "
                      "keeps every step's graph alive (the PyTorch FAQ's memory leak); add "
                      "loss.detach()")
    blocking = _count(syncs.get("blocking_batch_copies"))
    if blocking:
        raise mistake("blocking_copies",
                      f"{blocking} of the {max(blocking, _count(syncs.get('batch_copies')))} copies of "
                      "a batch to the model's device ran without non_blocking=True: move each batch "
                      "with .to(device, non_blocking=True), so that a copy from pinned memory does not "
                      "stop the host while it runs")
    return f"{steps} steps, {total_syncs} host syncs, num_workers={num_workers}"


def _device_of(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (a seam: unit tests stand in a CUDA device)."""
    return next(model.parameters()).device


def _nonzero(counts: Mapping[str, int]) -> dict[str, int]:
    return {name: count for name, count in counts.items() if count}
