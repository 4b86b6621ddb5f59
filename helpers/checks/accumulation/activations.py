"""The memory a loop's result cannot show, judged for every exercise's loop: at most one micro-batch's
autograd graph and saved activations alive at once, against a single micro-batch's peak."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

from helpers.checks.accumulation.shared import Batch
from helpers.checks.kept import kept
from helpers.diagnosis import mistake
from helpers.grads import clone_model
from helpers.memory import SavedTensorMeter

# A correct loop holds one micro-batch's saved activations at a time. A forward or a backward over
# two or more micro-batches at once holds about twice as much or more; 1.5x separates the two with
# room for another, equivalent way of writing the loss.
MEMORY_SLACK = 1.5


@kept
def micro_batch_peak(model: nn.Module, loss_fn: Callable, micro_batches: Sequence[Batch]) -> int:
    """The most bytes of saved activations one forward and backward of a single micro-batch holds,
    over `micro_batches` (each on its own copy of the model and of the batch, as the student's
    kernel receives them): what a correct accumulation loop peaks at."""
    peak = 0
    for x, y in micro_batches:
        twin = clone_model(model)
        with SavedTensorMeter(twin) as saved:
            loss_fn(twin(x.clone()), y.clone()).backward()
        peak = max(peak, saved.peak)
    return peak


def check_graphs_alive(graphs, micro_rows: int) -> None:
    """At most one micro-batch's autograd graph alive at once, and no forward on more rows than the
    largest micro-batch holds, as the model's layers saw them (helpers.collect.autograd_graphs: on every
    thread, whatever saved-tensor hooks, save_on_cpu or checkpoint were active)."""
    keys = ("most_alive", "most_rows", "forwards")
    if not (isinstance(graphs, dict) and all(type(graphs.get(key)) is int for key in keys)):
        raise mistake("evidence_unreadable", "could not read which autograd graphs your loop held")
    alive, rows = graphs["most_alive"], graphs["most_rows"]
    if graphs.get("hooks_lost"):
        raise mistake(
            "course_hooks_removed",
            "your function removed the hooks the check put on the model's layers (a module's "
            "_forward_hooks), which count the forward passes it held at once: leave the model's hooks "
            "as you found them")
    if alive > 1:
        raise mistake(
            "several_micro_batches_in_memory",
            f"the result is right, but the model's layers held the autograd graphs of {alive} forward passes "
            "at once: run each micro-batch's backward before the next forward, so that its graph is freed "
            "(saving the activations elsewhere, with save_on_cpu or checkpoint, or running the forward on "
            "another thread, still holds them)")
    if micro_rows and rows > micro_rows:
        raise mistake(
            "forward_over_whole_cycle",
            f"the result is right, but one forward pass ran {rows} rows at once, where the largest "
            f"micro-batch holds {micro_rows}: run the forward of each micro-batch on its own")


def check_activation_memory(peak_saved, single_peak: int, backwards: int, num_micro_batches: int,
                            graphs=None, micro_rows: int = 0) -> None:
    """The one requirement the parameters cannot show: at most one micro-batch's activations
    alive at once. `graphs` (the model's layers' record, check_graphs_alive) decides first; then
    `peak_saved`, what the student's kernel's saved-tensor meter measured, against `single_peak`.
    The backward count only explains a failure. A loop that torch.func runs cannot run under the
    meter (collect_training runs it again without): its `peak_saved` is None, and the graphs judge."""
    if graphs is not None:
        check_graphs_alive(graphs, micro_rows)
        if peak_saved is None:
            return
    if not isinstance(peak_saved, int) or isinstance(peak_saved, bool) or peak_saved < 0:
        raise mistake("evidence_unreadable", "could not read how much memory your loop's autograd graph held")
    if single_peak > 0 and peak_saved > MEMORY_SLACK * single_peak:
        counted = (f"; backward ran {backwards} times for {num_micro_batches} micro-batches"
                   if backwards != num_micro_batches else "")
        raise mistake(
            "several_micro_batches_in_memory",
            f"the result is right, but the autograd graph held {peak_saved / single_peak:.1f} micro-batches' "
            f"activations at once ({peak_saved} bytes; one micro-batch needs {single_peak}){counted}: run "
            "one forward and one backward per micro-batch, so that each backward frees its activations "
            "before the next forward (holding a whole cycle's is what accumulation exists to avoid)")
